"""Two slicers (two aggregation switches) sharing one etcd registry."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import _closed, flow, to

from isp_flowvisor.testing import Household, SlicerProcess, free_port, wait_until


@pytest.fixture
def etcd(tmp_path):
    if shutil.which("etcd") is None:
        pytest.skip("etcd-server is not installed")
    client, peer = free_port(), free_port()
    url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = open(tmp_path / "etcd.log", "wb")  # noqa: SIM115 (open for the server's whole life)
    proc = subprocess.Popen(
        [
            "etcd",
            "--name",
            "fv-test",
            "--data-dir",
            str(tmp_path / "etcd"),
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"fv-test={peer_url}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def healthy() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        except OSError:
            return False

    wait_until(healthy, 60, "etcd to be healthy")
    yield url
    proc.terminate()
    proc.wait(20)
    log.close()


def test_two_slicers_pick_up_a_household_added_once(tmp_path, etcd, ovs):
    registry = {"backend": "etcd", "endpoint": etcd, "prefix": "/fv-test"}
    slicers = []
    try:
        for n in (1, 2):
            bridge = f"fvet{n}{free_port() % 1000}"
            proc = SlicerProcess(tmp_path / f"slicer{n}", registry, switch_socket=ovs.dir / f"{bridge}.slicer").start()
            ovs.add_bridge(bridge, proc.controller)
            proc.bridge = bridge  # type: ignore[attr-defined]
            slicers.append(proc)
        for proc in slicers:
            wait_until(proc.switch_connected, 60, "both switches to connect")
        first, second = slicers
        first.fvctl(
            "add",
            "erin",
            "--address",
            "100.64.5.0/24",
            "--address",
            "2001:db8:500::/56",  # her delegated prefix
            "--source-address",
            "127.0.0.15",
            "--quota",
            "4",
        )
        # The other slicer follows etcd: erin's dispatch rules (both families) appear on its switch, and
        # she can connect to it.
        wait_until(
            lambda: any("nw_dst=100.64.5.0/24" in r for r in ovs.flows(second.bridge))
            and any("ipv6_dst=2001:db8:500::/56" in r for r in ovs.flows(second.bridge)),
            30,
            "the second slicer to pick erin up",
        )
        erin = Household(second.household_port, source="127.0.0.15")
        erin.no_error_for(erin.send(flow(to("100.64.5.9"), [parser.OFPActionOutput(ofp.OFPP_NORMAL)])))
        listed = json.loads(second.fvctl("list").stdout)
        assert [h["name"] for h in listed] == ["erin"] and listed[0]["connected"]
        # A slot is handed out once across slicers, and clashing addresses are refused at the registry.
        added = json.loads(second.fvctl("add", "finn", "--address", "100.64.6.0/24").stdout)
        assert added["slot"] == 2
        assert second.fvctl("add", "gus", "--address", "100.64.5.0/25", check=False).returncode == 1
        assert second.fvctl("add", "gus", "--address", "2001:db8:500:40::/58", check=False).returncode == 1
        # Removal through the first slicer ends erin's session on the second.
        first.fvctl("remove", "erin")
        wait_until(lambda: _closed(erin), 30, "erin's session on the second slicer to end")
        wait_until(
            lambda: not any("100.64.5." in r or "2001:db8:500:" in r for r in ovs.flows(second.bridge)),
            30,
            "erin's rules to go",
        )
    finally:
        for proc in slicers:
            proc.stop()
            ovs.vsctl("--if-exists", "del-br", proc.bridge)
            ovs.bridges.remove(proc.bridge)
