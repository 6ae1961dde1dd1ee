"""Sessions: version negotiation, TLS identity, rate limits and fairness, disconnects, switch restarts."""

from __future__ import annotations

import ssl
import threading
import time

import pytest
from conftest import ALICE, BOB, write_registry
from os_ken.ofproto import ofproto_v1_0 as ofp10
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import ALICE_HOST, BOB_HOST, _closed, flow, to

from isp_flowvisor import codec
from isp_flowvisor.testing import CA, Household, SlicerProcess, wait_until

C = codec.CODEC


def _hello(version: int, bitmap: list[int] | None = None) -> bytes:
    if bitmap:
        return codec.hello(tuple(bitmap), header_version=version)
    return bytes([version, ofp.OFPT_HELLO, 0, 8, 0, 0, 0, 1])  # a HELLO without elements


def test_version_negotiation(slicer):
    # An OpenFlow 1.0-only controller gets HELLO_FAILED in 1.0 and is disconnected.
    old = Household(slicer.household_port, source=ALICE["source_address"], hello=_hello(ofp10.OFP_VERSION))
    error = old.read_frame()
    assert error[0] == ofp10.OFP_VERSION and error[1] == ofp10.OFPT_ERROR
    assert int.from_bytes(error[8:10], "big") == ofp10.OFPET_HELLO_FAILED
    wait_until(lambda: _closed(old), 30, "the 1.0 session to close")
    # A controller offering 1.3 and 1.5 by bitmap, and one saying 1.5 without a bitmap, both get 1.3.
    for hello in (_hello(6, [4, 6]), _hello(6)):
        newer = Household(slicer.household_port, source=ALICE["source_address"], hello=hello)
        newer.barrier()
        newer.close()
    # A bitmap without 1.3 is refused.
    only_15 = Household(slicer.household_port, source=ALICE["source_address"], hello=_hello(6, [6]))
    assert codec.decode(only_15.read_frame()).type == ofp.OFPET_HELLO_FAILED


def test_unregistered_source_is_refused(slicer):
    with pytest.raises((ConnectionError, AssertionError, OSError)):
        Household(slicer.household_port, source="127.0.0.99")
    Household(slicer.household_port, source=ALICE["source_address"]).barrier()


def test_tls_identifies_households_by_certificate(tmp_path, ovs, bridge_name):
    ca = CA(tmp_path / "ca")
    server = ca.issue("isp-flowvisor", server=True)
    alice_cert, eve_cert = ca.issue("alice"), ca.issue("eve")
    stranger = CA(tmp_path / "other", "fv-other-ca").issue("mallory")
    registry = write_registry(tmp_path / "households.json", {**ALICE, "cert_sha256": alice_cert["sha256"]}, BOB)
    proc = SlicerProcess(
        tmp_path / "slicer",
        {"backend": "file", "path": str(registry)},
        tls=server,
        switch_socket=ovs.dir / f"{bridge_name}.slicer",
    ).start()
    ovs.add_bridge(bridge_name, proc.controller)
    try:
        wait_until(proc.switch_connected, 60, "the switch to connect")

        def context(client: dict[str, str]) -> ssl.SSLContext:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(server["ca"])
            ctx.load_cert_chain(client["cert"], client["key"])
            return ctx

        alice = Household(proc.household_port, tls=context(alice_cert))
        features = alice.reply_to(alice.send(parser.OFPFeaturesRequest(C)))
        assert features.datapath_id & 0xFFFFFF == ALICE["slot"]
        # Signed by the ISP's CA but not in the registry: the connection ends without a HELLO.
        with pytest.raises((ConnectionError, ssl.SSLError, OSError, AssertionError)):
            Household(proc.household_port, tls=context(eve_cert))
        # Not signed by the ISP's CA: the TLS handshake fails.
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            Household(proc.household_port, tls=context(stranger))
        # No client certificate at all.
        bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        bare.load_verify_locations(server["ca"])
        with pytest.raises((ssl.SSLError, ConnectionError, OSError, AssertionError)):
            Household(proc.household_port, tls=bare)
        alice.barrier()
        alice.close()
    finally:
        proc.stop()
        ovs.vsctl("--if-exists", "del-br", bridge_name)
        ovs.bridges.remove(bridge_name)


def test_a_flooding_household_is_throttled_and_does_not_delay_another(households, slicer):
    alice, bob = households("alice"), households("bob")  # bob: 100 messages/s, burst 50
    stop = threading.Event()
    sent = [0]

    def flood() -> None:
        frame = codec.encode(flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)]), 5)
        bob.sock.settimeout(60)
        try:
            while not stop.is_set():
                bob.send_raw(frame * 50)
                sent[0] += 50
        except OSError:
            pass

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    try:
        wait_until(lambda: sent[0] > 2000, 60, "bob to flood")
        # While bob floods, alice's barriers come back promptly.
        rtts = []
        for _ in range(20):
            start = time.monotonic()
            alice.barrier(timeout=30)
            rtts.append(time.monotonic() - start)
        assert sorted(rtts)[len(rtts) // 2] < 0.2, rtts
        served = _metric(slicer, "isp_flowvisor_household_messages_in_total", "bob")
        time.sleep(2)
        rate = (_metric(slicer, "isp_flowvisor_household_messages_in_total", "bob") - served) / 2
        assert rate <= 100 * 1.5, rate  # held to his configured rate, not what he offers
        assert _metric(slicer, "isp_flowvisor_household_throttled_total", "bob") > 0
    finally:
        stop.set()
        bob.close()
        flooder.join(10)


def _metric(slicer, name: str, household: str) -> float:
    for line in slicer.metrics().splitlines():
        if line.startswith(f'{name}{{household="{household}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} for {household}")


def test_disconnect_keeps_or_deletes_rules_as_configured(households, slicer, ovs):
    alice, bob = households("alice"), households("bob")  # alice: keep, bob: delete
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=1)))
    bob.no_error_for(bob.send(flow(to(BOB_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=2)))
    alice.close()
    bob.close()
    wait_until(lambda: not any("cookie=0x20000000002" in r for r in ovs.flows(slicer.bridge)), 30, "bob's rules to go")
    assert any("cookie=0x10000000001" in r for r in ovs.flows(slicer.bridge))


def test_switch_restart_is_resynchronised(households, slicer, ovs):
    alice, bob = households("alice"), households("bob")
    alice.no_error_for(
        alice.send(
            flow(to(ALICE_HOST), [parser.OFPActionSetQueue(2), parser.OFPActionOutput(ofp.OFPP_NORMAL)], cookie=3)
        )
    )
    ovs.stop_vswitchd()
    wait_until(lambda: not slicer.switch_connected(), 30, "the slicer to notice")
    ovs.start_vswitchd()
    wait_until(slicer.switch_connected, 60, "the switch to come back")
    rules = wait_until(
        lambda: [r for r in ovs.flows(slicer.bridge) if "cookie=0x10000000003" in r], 30, "alice's rule to be put back"
    )
    assert "set_queue:6" in rules[0]
    assert any("priority=200" in r and "nw_dst=100.64.2.0/24" in r for r in ovs.flows(slicer.bridge))
    # Both sessions survived the switch's absence.
    alice.barrier()
    bob.barrier()
