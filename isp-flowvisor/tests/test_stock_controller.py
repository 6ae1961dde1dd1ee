"""A household controller this project did not write: Open vSwitch's learning switch
(`ovs-testcontroller`, Debian's openvswitch-testcontroller) dials the slicer as a controller dials a
switch, learns MACs through a slice, and its rules carry a ping between two hosts on the household's
ports; beside it the router's own controller (its slice link, `controller/`) keeps alice's queue
rule in her slice.

(os-ken 4.2.2 ships no sample applications: neither its wheel, its sdist nor Debian's python3-os-ken
has `os_ken.app.simple_switch_13`.)"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess

import pytest
from conftest import ALICE
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import ALICE_HOST, flow, to

from isp_flowvisor import codec
from isp_flowvisor.model import Household
from isp_flowvisor.testing import have, socketless_slicer, wait_until

C = codec.CODEC

CAROL = {"address": "100.64.3.0/24", "hosts": ("100.64.3.1", "100.64.3.2"), "ports": (4, 5), "slot": 3}
# The learning switch cannot choose its source address: on plain TCP, carol is 127.0.0.1.
CAROL_SOURCE = "127.0.0.1"


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


@pytest.fixture
def carols_hosts(slicer, ovs):
    """Two hosts (network namespaces) on carol's private ports 4 and 5, through veth pairs."""
    tag = f"{os.getpid() % 10000}"
    names = [f"fvsc{tag}{side}" for side in "ab"]
    for name, host, port in zip(names, CAROL["hosts"], CAROL["ports"], strict=True):
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", f"{name}0", "type", "veth", "peer", "name", f"{name}1")
        _run("ip", "link", "set", f"{name}0", "netns", ovs.netns)
        _run("ip", "link", "set", f"{name}1", "netns", name)
        for ns, end in ((ovs.netns, f"{name}0"), (name, f"{name}1")):
            _run("ip", "netns", "exec", ns, "ip", "link", "set", end, "up")
            _run("ip", "netns", "exec", ns, "ethtool", "-K", end, "tx", "off")
        _run("ip", "netns", "exec", name, "ip", "addr", "add", f"{host}/24", "dev", f"{name}1")
        ovs.vsctl("add-port", slicer.bridge, f"{name}0", "--", "set", "interface", f"{name}0", f"ofport_request={port}")
    yield names
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # takes both veth ends with it


def test_a_stock_learning_switch_works_through_a_slice_beside_the_routers_own_controller(
    slicer, ovs, carols_hosts, tmp_path
):
    assert have("ovs-testcontroller"), "install Debian's openvswitch-testcontroller (scripts/install-deps.sh)"
    slicer.fvctl(
        "add",
        "carol",
        "--address",
        CAROL["address"],
        "--source-address",
        CAROL_SOURCE,
        *(arg for port in CAROL["ports"] for arg in ("--port", str(port))),
        "--quota",
        "50",
    )
    log = tmp_path / "testcontroller.log"
    app = subprocess.Popen(
        [
            "ovs-testcontroller",
            "-O",
            "OpenFlow13",
            f"--log-file={log}",
            "-vfile:dbg",
            f"--unixctl={tmp_path / 'testcontroller.ctl'}",
            f"tcp:127.0.0.1:{slicer.household_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    routers_link = None
    try:
        wait_until(
            lambda: 'isp_flowvisor_household_connected{household="carol"} 1' in slicer.metrics(),
            30,
            "the learning switch to connect through the slicer",
        )
        cookie = f"cookie=0x{CAROL['slot'] << 40:x}"
        table_miss = wait_until(
            lambda: [
                r for r in ovs.flows(slicer.bridge) if cookie in r and "priority=1," in r and "controller" in r.lower()
            ],
            30,
            "its table-miss rule on the switch",
        )
        assert "metadata=0x3" in table_miss[0] and "table=1" in table_miss[0], table_miss
        # Beside it, the router's own controller keeps alice's High call in her slice.
        routers_link = _routers_slice_link(slicer)
        wait_until(lambda: routers_link.health()["rules_installed"] == 1, 30, "the router's queue rule")
        routers_rule = f"cookie={(1 << 40) | 0x486F6D65:#x}"  # her slot, the router's cookie
        assert any(routers_rule in r and "set_queue:6" in r for r in ovs.flows(slicer.bridge)), ovs.flows(slicer.bridge)
        ping = subprocess.run(
            ["ip", "netns", "exec", carols_hosts[0], "ping", "-c", "5", "-i", "0.2", "-W", "2", CAROL["hosts"][1]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ping.returncode == 0, ping.stdout + log.read_text()[-2000:]
        # Its own MAC-learning rules are on the switch, in carol's slice, and carry the ping.
        learnt = [r for r in ovs.flows(slicer.bridge) if cookie in r and "dl_dst=" in r and "in_port=" in r]
        assert len(learnt) >= 2, ovs.flows(slicer.bridge)
        assert all("metadata=0x3" in r for r in learnt)
        assert sum(int(r.split("n_packets=")[1].split(",")[0]) for r in learnt) > 0, learnt
        stats = json.loads(slicer.fvctl("stats", "carol").stdout)["carol"]
        assert stats["counters"]["refused"] == 0, (stats, log.read_text()[-2000:])
        assert routers_link.health()["connected"] and routers_link.health()["rules_refused"] == 0
    finally:
        app.terminate()
        app.wait(10)
        if routers_link is not None:
            routers_link.stop()


def _routers_slice_link(slicer):
    """Alice's router: `controller/`'s slice link, with one High call learnt (plain TCP, her source)."""
    from homework_controller import flows
    from homework_controller.edge.feeds.slice_link import SliceLink
    from homework_controller.policy import qos

    call = (flows.FiveTuple(flows.PROTO_UDP, "10.2.0.6", 50000, "198.51.100.7", 8801), qos.HIGH)
    return SliceLink(
        "127.0.0.1",
        slicer.household_port,
        lambda: [call],
        [ALICE_HOST],
        None,
        source_address=ALICE["source_address"],
        poll_s=0.2,
        echo_s=0.3,
        max_backoff_s=1.0,
    ).start()


def _ofctl(slicer, *args: str) -> str:
    """Open vSwitch's own client, pointed at the slicer as at a switch (carol's virtual switch)."""
    result = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", args[0], f"tcp:127.0.0.1:{slicer.household_port}", *args[1:]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_stock_client_reads_the_households_tables_groups_and_meters(slicer, households):
    slicer.fvctl("add", "carol", "--address", CAROL["address"], "--source-address", CAROL_SOURCE, "--quota", "50")
    tables = _ofctl(slicer, "dump-table-features")
    # Her four tables, each with her quota, going forward only; no write_metadata (the slicer's).
    assert [line.split('"')[1] for line in tables.splitlines() if line.startswith("  table ")] == [
        f"slice table {t}" for t in range(4)
    ]
    assert tables.count("max_entries=50") == 2 and "next tables: 1-3" in tables  # tables 1, 2 say "ditto"
    assert "goto_table" in tables.split("table 3")[0] and "goto_table" not in tables.split("table 3")[1]
    assert "write_metadata" not in tables and "push_vlan" not in tables
    groups = _ofctl(slicer, "dump-group-features")
    assert "Types:  0xf" in groups and groups.count("max_groups=0x10") == 4 and "actions: output" in groups
    meters = _ofctl(slicer, "meter-features")
    assert "max_meter:16" in meters and "band_types: drop" in meters
    # Setting table features is refused, as by a switch whose tables are fixed.
    refused = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "mod-table", f"tcp:127.0.0.1:{slicer.household_port}", "0", "evict"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0
    # Alice's session beside carol's is untouched.
    alice = households("alice")
    alice.no_error_for(alice.send(flow(to(ALICE_HOST), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))


def test_get_async_is_answered_with_what_the_household_gets():
    """A real switch answers GET_ASYNC_REQUEST (OpenFlow 1.3, 7.3.10); so does the slice."""

    async def run() -> list:
        slicer, session, household_end, _ = socketless_slicer(
            Household("carol", 3, (ipaddress.IPv4Network("100.64.3.0/24"),))
        )
        slicer._serve(session, codec.encode(parser.OFPGetAsyncRequest(C), 77))
        await asyncio.sleep(0)
        return [codec.decode(f) for f in household_end.frames]

    (reply,) = asyncio.run(run())
    assert isinstance(reply, parser.OFPGetAsyncReply) and reply.xid == 77
    assert reply.packet_in_mask[0] == 1 << ofp.OFPR_NO_MATCH | 1 << ofp.OFPR_ACTION
    assert reply.flow_removed_mask[0] & 1 << ofp.OFPRR_IDLE_TIMEOUT


def test_a_stock_client_manages_and_reads_only_the_households_own_groups_and_meters(slicer, households):
    slicer.fvctl("add", "carol", "--address", CAROL["address"], "--source-address", CAROL_SOURCE)
    bob = households("bob")  # his group 1 and meter 1 are other ids on the switch
    bob.no_error_for(
        bob.send(
            parser.OFPGroupMod(
                C,
                ofp.OFPGC_ADD,
                ofp.OFPGT_ALL,
                1,
                [parser.OFPBucket(0, ofp.OFPP_ANY, ofp.OFPG_ANY, [parser.OFPActionOutput(3)])],
            )
        )
    )
    bob.no_error_for(
        bob.send(parser.OFPMeterMod(C, ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 1, [parser.OFPMeterBandDrop(5000, 0)]))
    )
    _ofctl(slicer, "add-group", "group_id=1,type=all,bucket=output:NORMAL")
    _ofctl(slicer, "add-meter", "meter=2,kbps,band=type=drop,rate=1000")
    groups = _ofctl(slicer, "dump-groups")
    assert "group_id=1,type=all,bucket=actions=NORMAL" in groups.replace(" ", "") and groups.count("group_id=") == 1
    assert _ofctl(slicer, "dump-group-stats").count("group_id=") == 1
    meters = _ofctl(slicer, "dump-meters")
    assert "meter=2" in meters and "rate=1000" in meters and "meter=1 " not in meters and "rate=5000" not in meters
    assert _ofctl(slicer, "meter-stats").count("meter:") == 1
    assert "meter:2" in _ofctl(slicer, "meter-stats", "meter=2")
