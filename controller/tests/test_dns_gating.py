"""DNS gating per device: names, suffixes, IDN, and the addresses learnt for denied names."""
import dnslib
import pytest

from homework_controller import dnsgate, flows
from homework_controller.router import ApiError, HomeRouter, InstallRules, ResolveName
from homework_controller.store import DeviceStore
from homework_controller import dhcp

from conftest import ROUTER_MAC, WLAN
from test_accounting import permitted_phone
from test_router import PHONE


def query(name, qtype="A"):
    return dnslib.DNSRecord.question(name, qtype).pack()


def answer(name, *ips, cname=None, ttl=300):
    record = dnslib.DNSRecord.question(name).reply()
    owner = name
    if cname:
        record.add_answer(dnslib.RR(name, dnslib.QTYPE.CNAME, rdata=dnslib.CNAME(cname), ttl=ttl))
        owner = cname
    for ip in ips:
        record.add_answer(dnslib.RR(owner, dnslib.QTYPE.A, rdata=dnslib.A(ip), ttl=ttl))
    return record.pack()


def blocked_rules(effects):
    return {r.match_dict["ipv4_dst"] for e in effects if isinstance(e, InstallRules) for r in e.rules
            if r.table == flows.TABLE_ACCOUNTING and r.priority == 900}


def test_a_denied_name_and_its_subdomains_get_nxdomain_and_the_rest_resolves(router):
    ip = permitted_phone(router)
    effects = router.deny_dns(PHONE, "Games.Example.TEST.")
    assert ResolveName("games.example.test") in effects  # its addresses are looked up at once
    for name in ("games.example.test", "www.games.example.test", "GAMES.example.test"):
        verdict = router.dns_query(ip, query(name))
        reply = dnslib.DNSRecord.parse(verdict.reply)
        assert verdict.action == "answer" and reply.header.rcode == dnslib.RCODE.NXDOMAIN
    assert router.dns_query(ip, query("www.example.test")).action == "forward"
    assert router.dns_query(ip, query("notgames.example.test")).action == "forward"


def test_an_exception_under_a_blocked_domain_and_lifting_the_block(router):
    ip = permitted_phone(router)
    router.deny_dns(PHONE, "example.test")
    router.permit_dns(PHONE, "www.example.test")
    assert router.dns_query(ip, query("games.example.test")).action == "answer"
    assert router.dns_query(ip, query("www.example.test")).action == "forward"
    router.permit_dns(PHONE, "example.test")
    assert router.dns_query(ip, query("games.example.test")).action == "forward"
    assert router.dns_rules_of(PHONE) == []  # the exception went with the block it excepted


def test_internationalised_names_match_in_either_form(router):
    ip = permitted_phone(router)
    router.deny_dns(PHONE, "bücher.example")
    assert router.dns_rules_of(PHONE) == [{"domain": "xn--bcher-kva.example", "display": "bücher.example",
                                           "action": "deny"}]
    assert router.dns_query(ip, query("shop.xn--bcher-kva.example")).action == "answer"
    with pytest.raises(ApiError):
        router.deny_dns(PHONE, "bad..name")


def test_addresses_learnt_for_a_denied_name_are_blocked_for_that_device_only(router):
    ip = permitted_phone(router)
    router.deny_dns(PHONE, "games.example.test")
    effects = router.dns_answer("games.example.test", answer("games.example.test", "198.51.100.81"))
    assert blocked_rules(effects) == {"198.51.100.81"}
    assert {r.match_dict["ipv4_src"] for e in effects if isinstance(e, InstallRules) for r in e.rules
            if r.priority == 900} == {ip}  # from this device only
    # A CNAME chain teaches the final address under the denied name too.
    effects = router.dns_answer("cdn.games.example.test",
                                answer("cdn.games.example.test", "203.0.113.9", cname="edge.cdn.net"))
    assert "203.0.113.9" in blocked_rules(effects)
    assert router.dns_answer("www.example.test", answer("www.example.test", "198.51.100.80")) == []


def test_blocks_expire_with_the_answers_ttl(router, clock):
    permitted_phone(router)
    router.deny_dns(PHONE, "games.example.test")
    router.dns_answer("games.example.test", answer("games.example.test", "198.51.100.81", ttl=60))
    clock.now += 61
    removed = router.tick()
    assert not blocked_rules(removed)


def test_queries_from_strangers_and_garbage_get_no_answer(router):
    ip = permitted_phone(router)
    assert router.dns_query("198.51.100.1", query("www.example.test")).action == "drop"
    assert router.dns_query(ip, b"\x00\x01garbage").action == "drop"
    assert router.counters["dns_malformed"] == 1 and router.counters["dns_not_a_device"] == 1


def test_dns_rules_survive_a_restart(db_path, clock):
    first = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    first.switch_ready(WLAN, ROUTER_MAC)
    permitted_phone(first)
    first.deny_dns(PHONE, "games.example.test")
    first.store.close()
    second = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    assert second.dns_rules_of(PHONE)[0]["domain"] == "games.example.test"


def test_normalisation_rejects_non_names():
    assert dnsgate.normalize_domain("WWW.Example.Test.") == "www.example.test"
    for bad in ("", ".", "a" * 64 + ".test", "spaces in.name"):
        with pytest.raises(dnsgate.BadDomain):
            dnsgate.normalize_domain(bad)
