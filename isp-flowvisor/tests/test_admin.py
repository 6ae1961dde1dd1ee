"""fvctl, the file registry and the metrics, against a running slicer."""

from __future__ import annotations

import json

from conftest import ALICE
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import _closed, flow, to

from isp_flowvisor.testing import Household, wait_until

CAROL = "127.0.0.13"


def test_fvctl_add_is_in_force_when_it_returns(slicer, ovs):
    added = json.loads(
        slicer.fvctl(
            "add", "carol", "--address", "100.64.3.0/24", "--rate", "15", "--quota", "3", "--source-address", CAROL
        ).stdout
    )
    assert added["slot"] == 3
    # No waiting: the moment fvctl returns, carol can connect and her dispatch rules are on the switch.
    carol = Household(slicer.household_port, source=CAROL)
    carol.no_error_for(carol.send(flow(to("100.64.3.7"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    assert any("nw_dst=100.64.3.0/24" in r and "priority=200" in r for r in ovs.flows(slicer.bridge))
    listed = {h["name"]: h for h in json.loads(slicer.fvctl("list").stdout)}
    assert listed["carol"]["connected"] and listed["carol"]["rules"] == 1 and listed["carol"]["flow_quota"] == 3
    # A household overlapping carol's addresses is refused, and nothing changes.
    clash = slicer.fvctl("add", "dave", "--address", "100.64.3.128/25", check=False)
    assert clash.returncode == 1 and "overlaps" in clash.stderr
    assert "dave" not in {h["name"] for h in json.loads(slicer.fvctl("list").stdout)}
    # Updating the quota keeps her session; removing her ends it and takes her rules off the switch.
    slicer.fvctl("update", "carol", "--quota", "1")
    error = carol.error_for(carol.send(flow(to("100.64.3.8"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    assert error.code == ofp.OFPFMFC_TABLE_FULL
    slicer.fvctl("remove", "carol")
    wait_until(lambda: _closed(carol), 30, "carol's session to end")
    assert not any("100.64.3." in r for r in ovs.flows(slicer.bridge))


def test_stats_and_metrics_show_per_household_usage(slicer, households):
    bob = households("bob")
    bob.error_for(bob.send(flow(to("100.64.1.1"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    bob.no_error_for(bob.send(flow(to("100.64.2.1"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    stats = json.loads(slicer.fvctl("stats", "bob").stdout)["bob"]
    assert stats["rules"] == 1 and stats["counters"]["refused"] == 1 and stats["connected"]
    metrics = slicer.metrics()
    assert 'isp_flowvisor_household_refused_total{household="bob"} 1' in metrics
    assert 'isp_flowvisor_household_refused_total{household="alice"} 0' in metrics
    assert 'isp_flowvisor_household_rules{household="bob"} 1' in metrics
    assert "# TYPE isp_flowvisor_household_queue_drops_total counter" in metrics
    # Whether a household's rules take the fast path: bob's own rule did, the refused one went to os-ken's.
    assert 'isp_flowvisor_household_flow_mods_total{household="bob"} 2' in metrics
    assert 'isp_flowvisor_household_fast_path_total{household="bob"} 1' in metrics
    assert 'isp_flowvisor_fast_path_cache_lookups_total{part="match",result="miss"}' in metrics


def test_registry_file_changes_are_followed_without_dropping_sessions(slicer, households, tmp_path):
    alice = households("alice")
    registry = tmp_path / "households.json"
    data = json.loads(registry.read_text())
    data["households"]["alice"]["flow_quota"] = 1
    registry.write_text(json.dumps(data))  # an operator's hand edit; the slicer polls the file
    wait_until(
        lambda: 'isp_flowvisor_household_rule_quota{household="alice"} 1' in slicer.metrics(), 30, "the new quota"
    )
    alice.no_error_for(alice.send(flow(to("100.64.1.1"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
    assert alice.error_for(alice.send(flow(to("100.64.1.2"), []))).code == ofp.OFPFMFC_TABLE_FULL
    assert ALICE["source_address"]  # the same session all along


def test_fvctl_reports_errors_clearly(slicer):
    missing = slicer.fvctl("remove", "nobody", check=False)
    assert missing.returncode == 1 and "no household nobody" in missing.stderr
    bad = slicer.fvctl("add", "Bad Name", "--address", "100.64.9.0/24", check=False)
    assert bad.returncode == 1 and "name" in bad.stderr


def _post(slicer, body: bytes, headers: dict[str, str]) -> int:
    """The status a raw HTTP request to fvctl's endpoint gets (as a browser page could send it)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{slicer.rpc_port}/", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_fvctl_needs_its_token_its_host_and_json_so_a_browser_page_cannot_drive_it(slicer):
    token_file = slicer.dir / "fvctl.token"
    assert token_file.stat().st_mode & 0o777 == 0o600  # made at the slicer's first start
    token = token_file.read_text().strip()
    assert len(token) >= 32
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "list"}).encode()
    good = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    assert _post(slicer, body, {"Content-Type": "application/json"}) == 401  # no token
    assert _post(slicer, body, {**good, "Authorization": "Bearer guess"}) == 401
    # A page on another origin (DNS rebinding names this host as its own) or a form post.
    assert _post(slicer, body, {**good, "Host": "attacker.example:6644"}) == 403
    assert _post(slicer, body, {**good, "Content-Type": "text/plain"}) == 415
    assert _post(slicer, body, {**good, "Content-Type": "application/x-www-form-urlencoded"}) == 415
    # Positive controls: the same request with its token, from loopback, as JSON; fvctl itself.
    assert _post(slicer, body, good) == 200
    assert _post(slicer, body, {**good, "Host": f"localhost:{slicer.rpc_port}"}) == 200
    assert {h["name"] for h in json.loads(slicer.fvctl("list").stdout)} == {"alice", "bob"}
    # /metrics stays open on loopback (Prometheus scrapes it without a token).
    assert "isp_flowvisor_switch_connected" in slicer.metrics()


def test_the_isp_engineer_registers_a_households_delegated_prefix_with_fvctl(slicer, ovs, tmp_path):
    slicer.fvctl("add", "carol", "--address", "100.64.3.0/24", "--source-address", CAROL)
    carol = Household(slicer.household_port, source=CAROL)
    call = {"eth_type": 0x86DD, "ip_proto": 17, "ipv6_src": "2001:db8:ffff::80", "udp_src": 3478}
    high = [parser.OFPActionSetQueue(2), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
    # Before the ISP delegated her a prefix, her router's IPv6 rule names nothing of hers.
    error = carol.error_for(carol.send(flow({**call, "ipv6_dst": "2001:db8:300:1::10"}, high)))
    assert (error.type, error.code) == (ofp.OFPET_BAD_MATCH, ofp.OFPBMC_EPERM)
    # What the ISP's DHCPv6 server delegated goes into her flowspace beside her IPv4 address.
    slicer.fvctl("update", "carol", "--address", "100.64.3.0/24", "--address", "2001:db8:300::/56")
    carol.no_error_for(carol.send(flow({**call, "ipv6_dst": "2001:db8:300:1::10"}, high)))
    assert any("ipv6_dst=2001:db8:300::/56" in r and "priority=200" in r for r in ovs.flows(slicer.bridge))
    shown = json.loads(slicer.fvctl("show", "carol").stdout)
    assert shown["addresses"] == ["100.64.3.0/24", "2001:db8:300::/56"]
    # Kept in the registry file (conftest's, in the same tmp_path), as her IPv4 address is.
    registry = json.loads((tmp_path / "households.json").read_text())
    assert registry["households"]["carol"]["addresses"] == ["100.64.3.0/24", "2001:db8:300::/56"]
    # A neighbour's prefix inside hers is refused whole.
    clash = slicer.fvctl("add", "dave", "--address", "2001:db8:300:80::/57", check=False)
    assert clash.returncode == 1 and "overlaps carol's 2001:db8:300::/56" in clash.stderr
