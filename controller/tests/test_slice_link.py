"""The household's slice link against a real slicer and a real Open vSwitch (isp-flowvisor's test harness):
where the internet's packets to the household land on the ISP's aggregation switch (`ofproto/trace`), as the
router learns flows and the household sets priorities; the slicer restarting; the slicer refusing a rule."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import threading
import time

import pytest
from fakeoftable import FakeSwitch
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from support import PHONE, ROUTER_MAC, WEB, WLAN, join

from homework_controller import flows
from homework_controller.__main__ import parse_args
from homework_controller.concerns.agent_reports import AgentReport
from homework_controller.edge.feeds.slice_link import DATAPATH, SliceLink, _Channel, tls_context
from homework_controller.policy import downlink, qos
from isp_flowvisor.testing import CA, SlicerProcess, private_ovs_fixture, wait_until

# Two households on the aggregation switch; plain TCP, so the slicer knows each by its source address.
A = {
    "slot": 1,
    "addresses": ["100.64.1.0/24", "2001:db8:100::/56"],  # its public IPv4 block and its delegated prefix
    "source_address": "127.0.0.11",
    "ports": [2],
    "flow_quota": 20,
    "msg_rate": 2000,
    "msg_burst": 2000,
    "guaranteed_mbit": 20,
}
B = {
    "slot": 2,
    "addresses": ["100.64.2.0/24", "2001:db8:200::/56"],
    "source_address": "127.0.0.12",
    "ports": [3],
    "flow_quota": 20,
    "msg_rate": 2000,
    "msg_burst": 2000,
    "guaranteed_mbit": 10,
}
A_PUBLIC, B_PUBLIC = "100.64.1.1", "100.64.2.1"
UPLINK = 1  # the aggregation switch's shared port towards the internet
HIGH_DSCP, MEDIUM_DSCP = 46, 18  # what the slicer's queues 2 and 1 become (isp-flowvisor/README.md)


ovs = pytest.fixture(scope="module", name="ovs")(private_ovs_fixture)


@pytest.fixture
def slicers(tmp_path, ovs, request):
    """Start a slicer over a fresh aggregation bridge, households A and B registered."""
    started: list[SlicerProcess] = []

    def start(tls: dict[str, str] | None = None, **registered) -> SlicerProcess:
        registry = tmp_path / "households.json"
        registry.write_text(json.dumps({"next_slot": 3, "households": {"a": A, "b": B, **registered}}))
        bridge = f"fvhw{os.getpid() % 10000}{abs(hash(request.node.name)) % 100}"
        proc = SlicerProcess(
            tmp_path / "slicer",
            {"backend": "file", "path": str(registry)},
            tls=tls,
            shared_ports=(UPLINK,),
            switch_socket=ovs.dir / f"{bridge}.slicer",
        ).start()
        started.append(proc)
        ovs.add_bridge(bridge, proc.controller)
        proc.bridge = bridge  # type: ignore[attr-defined]
        wait_until(proc.switch_connected, 60, "the aggregation switch to connect")
        return proc

    yield start
    for proc in started:
        proc.stop()
        ovs.vsctl("--if-exists", "del-br", proc.bridge)  # type: ignore[attr-defined]
        ovs.bridges.remove(proc.bridge)  # type: ignore[attr-defined]


@pytest.fixture
def slicer(slicers):
    """Plain TCP: the slicer knows each household by its source address."""
    return slicers()


@pytest.fixture
def links():
    started: list[SliceLink] = []

    def start(
        slicer, snapshot, public_addresses, host="127.0.0.1", tls=None, ahead=lambda: (), delegated=lambda: None
    ) -> SliceLink:
        """Household A's link (over plain TCP, from A's registered source address)."""
        link = SliceLink(
            host,
            slicer.household_port,
            snapshot,
            public_addresses,
            tls,
            ahead=ahead,
            delegated=delegated,
            source_address=None if tls else A["source_address"],
            poll_s=0.2,
            echo_s=0.3,
            max_backoff_s=1.0,
        ).start()
        started.append(link)
        return link

    yield start
    for link in started:
        link.stop()


def downlink_lands(ovs, slicer, remote: str, public: str, remote_port: int = 443, proto: str = "tcp"):
    """(DSCP, queue) a packet from the internet to a household's public address leaves the switch with."""
    return _lands(ovs, slicer, f"{proto},nw_src={remote},{proto}_src={remote_port},nw_dst={public},{proto}_dst=61000")


def downlink6_lands(ovs, slicer, remote: str, device: str, remote_port: int = 3478, dscp: int = 0):
    """(DSCP, queue) a UDP packet from the internet to a device's global IPv6 address, arriving with
    `dscp`, leaves the switch with."""
    return _lands(
        ovs,
        slicer,
        f"udp6,ipv6_src={remote},udp_src={remote_port},ipv6_dst={device},udp_dst=61000,nw_tos={dscp << 2}",
    )


def _lands(ovs, slicer, packet: str) -> tuple[int, int | None]:
    trace = ovs.run(
        "ovs-appctl", "-t", str(ovs.dir / "vswitchd.ctl"), "ofproto/trace", slicer.bridge, f"in_port={UPLINK},{packet}"
    )
    final = re.search(r"^Final flow: (.*)$", trace, re.M)
    assert final, trace
    tos = re.search(r"\bnw_tos=(\d+)", final.group(1))
    queue = re.search(r"\bskb_priority=(0x[0-9a-f]+)", final.group(1))  # the datapath's queue (set_queue)
    return (int(tos.group(1)) >> 2 if tos else 0), (int(queue.group(1), 16) if queue else None)


def queue_of(household: dict, queue: int) -> tuple[int, int]:
    """(DSCP, queue) of a household's slice queue on the switch: the slicer's numbering and marks."""
    return {2: HIGH_DSCP, 1: MEDIUM_DSCP}[queue], household["slot"] << 2 | queue


UNTOUCHED = (0, None)  # no rule of the household's: its Normal queue


def test_a_high_flows_downlink_gets_the_households_high_queue_and_follows_its_priority(router, ovs, slicer, links):
    """A connection with a rule of its own (its agent named it) is the household's slice rule too, in the queue of
    its app's priority, following the household's choices, and gone when it ends."""
    lock = threading.Lock()  # the controller's: the link's snapshot is taken under it

    def snapshot():
        with lock:
            return router.learnt_connections()

    switch = FakeSwitch()
    with lock:
        switch.apply(router.switch_ready(WLAN, ROUTER_MAC))
        phone = join(router, switch, PHONE)
    link = links(slicer, snapshot, [A_PUBLIC])
    wait_until(lambda: link.health()["connected"], 30, "the link to connect")
    assert downlink_lands(ovs, slicer, WEB, A_PUBLIC) == UNTOUCHED  # the phone's connection to a web site: Normal

    with lock:  # its agent says a call holds it (High)
        switch.apply(router.flow_events.agent_reported([AgentReport(6, phone, 40000, WEB, 443, "zoom")]))
    wait_until(
        lambda: downlink_lands(ovs, slicer, WEB, A_PUBLIC) == queue_of(A, 2),
        30,
        "the web site's downlink to land in A's High queue",
    )
    # The same site's traffic to the neighbour is the neighbour's, untouched; another site's to A too.
    assert downlink_lands(ovs, slicer, WEB, B_PUBLIC) == UNTOUCHED
    assert downlink_lands(ovs, slicer, "198.51.100.99", A_PUBLIC) == UNTOUCHED
    assert link.health()["rules_installed"] == 1 and link.health()["errors"] == 0

    with lock:
        switch.apply(router.set_app_priorities({"video-call": qos.MEDIUM}))
    wait_until(
        lambda: downlink_lands(ovs, slicer, WEB, A_PUBLIC) == queue_of(A, 1), 30, "the rule to move to A's Medium queue"
    )

    with lock:  # the connection ends: its rules idled out of the router's switch, both ways
        for gone in (flows.FiveTuple(6, phone, 40000, WEB, 443), flows.FiveTuple(6, WEB, 443, phone, 40000)):
            router.flow_events.on_flow_removed(flows.AccountingPriority.LEARNT_FLOW, gone.match(), 5, 500)
    wait_until(lambda: downlink_lands(ovs, slicer, WEB, A_PUBLIC) == UNTOUCHED, 30, "the rule to go")
    assert link.health()["rules_installed"] == 0 and link.health()["errors"] == 0


CALL_SERVER = "198.51.100.7"
CALL = (flows.FiveTuple(flows.PROTO_UDP, "10.2.0.6", 50000, CALL_SERVER, 8801), qos.HIGH)


def call_lands(ovs, slicer, public=A_PUBLIC):
    return downlink_lands(ovs, slicer, CALL_SERVER, public, 8801, "udp")


def test_a_calls_service_ports_marked_ahead_reach_the_slice_as_prefixes_the_real_switch_reads(ovs, slicer, links):
    """The router marks an app's port ranges ahead as value/mask prefixes (`flows.marks`); the slice gets
    the same: any server's downlink from a port in the range lands in A's High queue, from just outside it
    it is untouched, and B's is B's."""
    ports = [downlink.Ahead(flows.PROTO_UDP, None, port, qos.HIGH) for port in ((16384, 0xFFC0), (16448, 0xFFE0))]
    link = links(slicer, lambda: [], [A_PUBLIC], ahead=lambda: ports)
    lands = lambda port, public=A_PUBLIC: downlink_lands(ovs, slicer, CALL_SERVER, public, port, "udp")  # noqa: E731
    wait_until(lambda: lands(16384) == queue_of(A, 2), 30, "the ports' rules")
    assert lands(16479) == queue_of(A, 2) and lands(16447) == queue_of(A, 2)
    assert lands(16383) == UNTOUCHED and lands(16480) == UNTOUCHED and lands(16400, B_PUBLIC) == UNTOUCHED
    assert link.health()["rules_installed"] == 2 and link.health()["errors"] == 0


def test_after_the_slicer_restarts_the_link_reconnects_and_its_rules_are_back(ovs, slicer, links):
    link = links(slicer, lambda: [CALL], [A_PUBLIC])
    wait_until(lambda: call_lands(ovs, slicer) == queue_of(A, 2), 30, "the call's rule")
    slicer.stop()
    wait_until(lambda: not link.health()["connected"], 30, "the link to notice")
    # While the slicer is away the switch loses the rule (as a restarted switch would).
    ovs.ofctl(slicer.bridge, "del-flows", f"cookie={A['slot'] << 40 | downlink.SLICE_COOKIE:#x}/-1")
    assert call_lands(ovs, slicer) == UNTOUCHED
    slicer.start()
    wait_until(lambda: call_lands(ovs, slicer) == queue_of(A, 2), 60, "the rule to be back")
    assert link.health()["connects"] == 2 and link.health()["connected"]


def test_a_rule_outside_the_households_addresses_is_refused_and_counted_and_the_rest_holds(ovs, slicer, links):
    link = links(slicer, lambda: [CALL], [A_PUBLIC, B_PUBLIC])  # misconfigured: B's address given as A's
    wait_until(lambda: link.health()["errors"] >= 1, 30, "the slicer's refusal")
    wait_until(lambda: call_lands(ovs, slicer) == queue_of(A, 2), 30, "A's own rule")
    assert call_lands(ovs, slicer, B_PUBLIC) == UNTOUCHED  # B's traffic stays B's
    health = link.health()
    assert health["connected"] and health["rules_installed"] == 1 and health["rules_refused"] == 1
    assert "BAD_MATCH" in health["last_error"] and B_PUBLIC in health["last_error"]
    # Refused once, not again at every poll; and the session carries on (kept alive by echoes: it
    # calls a slicer silent for three echo intervals gone).
    time.sleep(1.5)
    assert link.health()["errors"] == health["errors"] and link.health()["connects"] == 1


def test_over_tls_the_slicer_knows_the_household_by_its_certificate_and_a_stranger_slicer_is_refused(
    tmp_path, ovs, slicers, links
):
    ca = CA(tmp_path / "isp-ca")
    household = ca.issue("household-a")
    slicer = slicers(tls=ca.issue("localhost", server=True), a={**A, "cert_sha256": household["sha256"]})
    link = links(
        slicer,
        lambda: [CALL],
        [A_PUBLIC],
        host="localhost",
        tls=tls_context(household["cert"], household["key"], household["ca"]),
    )
    wait_until(lambda: call_lands(ovs, slicer) == queue_of(A, 2), 30, "the call's rule over TLS")
    assert link.health()["tls"] and link.health()["connects"] == 1
    # A slicer whose certificate the ISP's CA did not sign (a man in the middle) gets nothing.
    other = CA(tmp_path / "other-ca", "fv-other-ca")
    stranger = links(
        slicer,
        lambda: [CALL],
        [A_PUBLIC],
        host="localhost",
        tls=tls_context(household["cert"], household["key"], other.path),
    )
    wait_until(lambda: "CERTIFICATE_VERIFY_FAILED" in stranger.health()["last_failure"], 30, "the refusal")
    assert not stranger.health()["connected"] and stranger.health()["connects"] == 0
    assert link.health()["connected"]  # the real session is not disturbed


def test_slice_options_need_a_public_address_and_tls_files_unless_plain_tcp(tmp_path):
    ok = parse_args(["--slice", "isp.example:6643", "--slice-plain-tcp", "--public-address", A_PUBLIC])
    assert (ok.slice_host, ok.slice_port, ok.public_address) == ("isp.example", 6643, (A_PUBLIC,))
    assert not parse_args(["--slice", "", "--public-address", ""]).slice  # settings left empty: no slice
    for bad in (
        ["--slice", "isp.example:6643", "--slice-plain-tcp"],  # no public address
        ["--slice", "isp.example", "--slice-plain-tcp", "--public-address", A_PUBLIC],
        ["--slice", "isp.example:6643", "--public-address", A_PUBLIC],  # no certificate
        [
            "--slice",
            "isp.example:6643",
            "--public-address",
            A_PUBLIC,
            "--slice-cert",
            str(tmp_path / "no"),
            "--slice-key",
            str(tmp_path / "no"),
            "--slice-ca",
            str(tmp_path / "no"),
        ],
        ["--public-address", A_PUBLIC],
    ):  # no slice to use it for
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_a_refused_priority_change_removes_the_old_rule_rather_than_keep_a_priority_nobody_wants():
    """The slicer accepted the call's rule at High, then refuses the change to Medium (say the ISP
    narrowed the household's queues meanwhile): the High rule must not stay behind. The session's
    far end is a socket this test reads as the slicer would."""

    def sent(peer) -> list:
        """The messages the link sent: flow-mods as the slicer decodes them, others by type."""
        peer.settimeout(0.5)
        data = b""
        try:
            while chunk := peer.recv(65536):
                data += chunk
        except TimeoutError:
            pass
        msgs = []
        while data:
            version, msg_type, length, xid = ofproto_parser.header(data)
            msgs.append(
                ofproto_parser.msg(DATAPATH, version, msg_type, length, xid, data[:length])
                if msg_type == ofp.OFPT_FLOW_MOD
                else (msg_type, xid)
            )
            data = data[length:]
        return msgs

    ours, peer = socket.socketpair()
    channel = _Channel(ours)
    link = SliceLink("slicer.invalid", 6633, lambda: [], [A_PUBLIC], None)
    high, medium = (downlink.wanted_rules([(CALL[0], p)], [A_PUBLIC]) for p in (qos.HIGH, qos.MEDIUM))
    link._reconcile(channel, high)
    add_high, barrier = sent(peer)
    assert barrier[0] == ofp.OFPT_BARRIER_REQUEST
    reply = parser.OFPBarrierReply(DATAPATH)
    reply.xid = barrier[1]
    reply.serialize()
    link._handle(channel, bytes(reply.buf))  # accepted
    assert link.health()["rules_installed"] == 1 and add_high.command == ofp.OFPFC_ADD

    link._reconcile(channel, medium)
    add_medium, _ = sent(peer)
    assert add_medium.command == ofp.OFPFC_ADD and add_medium.match.to_jsondict() == add_high.match.to_jsondict()
    error = parser.OFPErrorMsg(DATAPATH, type_=ofp.OFPET_FLOW_MOD_FAILED, code=ofp.OFPFMFC_EPERM, data=b"")
    error.xid = add_medium.xid
    error.serialize()
    link._handle(channel, bytes(error.buf))
    (removal,) = sent(peer)
    assert removal.command == ofp.OFPFC_DELETE_STRICT and removal.match.to_jsondict() == add_high.match.to_jsondict()
    health = link.health()
    assert health["rules_installed"] == 0 and health["rules_refused"] == 1 and "EPERM" in health["last_error"]
    # Not sent again at the next poll, and nothing else is sent.
    link._reconcile(channel, medium)
    assert sent(peer) == []
    ours.close()
    peer.close()


A_DELEGATED, B_DELEGATED = ipaddress.IPv6Network("2001:db8:100::/56"), ipaddress.IPv6Network("2001:db8:200::/56")
A_PHONE6, A_LAPTOP6, B_DEVICE6 = "2001:db8:100:2::10", "2001:db8:100:3::10", "2001:db8:200:2::10"
CALL_SERVER6 = "2001:db8:ffff::7"


def test_an_ipv6_call_at_high_lands_in_the_households_high_queue_for_its_device_only(ovs, slicer, links):
    lock = threading.Lock()
    connections = [(flows.FiveTuple(flows.PROTO_UDP, A_PHONE6, 50000, CALL_SERVER6, 3478), qos.DEFAULT)]

    def snapshot():
        with lock:
            return list(connections)

    link = links(slicer, snapshot, [A_PUBLIC], delegated=lambda: A_DELEGATED)
    wait_until(lambda: link.health()["connected"], 30, "the link to connect")
    # At Normal: no rule, the call's downlink is in A's Normal queue (the internet's own DSCP cleared).
    assert downlink6_lands(ovs, slicer, CALL_SERVER6, A_PHONE6, dscp=46) == UNTOUCHED
    with lock:
        connections[0] = (connections[0][0], qos.HIGH)
    wait_until(
        lambda: downlink6_lands(ovs, slicer, CALL_SERVER6, A_PHONE6) == queue_of(A, 2),
        30,
        "the IPv6 call's downlink to land in A's High queue",
    )
    # Only that device's call: A's laptop on the same server and B's device are untouched.
    assert downlink6_lands(ovs, slicer, CALL_SERVER6, A_LAPTOP6) == UNTOUCHED
    assert downlink6_lands(ovs, slicer, CALL_SERVER6, B_DEVICE6) == UNTOUCHED
    assert link.health()["rules_installed"] == 1 and link.health()["errors"] == 0
    with lock:
        connections.clear()
    wait_until(lambda: downlink6_lands(ovs, slicer, CALL_SERVER6, A_PHONE6) == UNTOUCHED, 30, "the rule to go")


def test_a_delegated_prefix_that_is_not_the_households_own_is_refused_and_counted(ovs, slicer, links):
    """A router that believes it was delegated B's prefix (misconfigured, or stale after the ISP renumbered):
    the slicer refuses its IPv6 rules, B's devices' downlink stays B's, and A's IPv4 rule holds."""
    call6 = (flows.FiveTuple(flows.PROTO_UDP, B_DEVICE6, 50000, CALL_SERVER6, 3478), qos.HIGH)
    link = links(slicer, lambda: [CALL, call6], [A_PUBLIC], delegated=lambda: B_DELEGATED)
    wait_until(lambda: link.health()["errors"] >= 1, 30, "the slicer's refusal")
    wait_until(lambda: call_lands(ovs, slicer) == queue_of(A, 2), 30, "A's own IPv4 rule")
    assert downlink6_lands(ovs, slicer, CALL_SERVER6, B_DEVICE6) == UNTOUCHED
    health = link.health()
    assert health["rules_installed"] == 1 and health["rules_refused"] == 1
    assert "BAD_MATCH" in health["last_error"] and B_DEVICE6 in health["last_error"]
