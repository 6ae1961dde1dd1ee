from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from isp_flowvisor.testing import Household, SlicerProcess, private_ovs_fixture, wait_until

ALICE = {
    "name": "alice",
    "slot": 1,
    "addresses": ["100.64.1.0/24", "2001:db8:100::/56"],
    "source_address": "127.0.0.11",
    "ports": [2],
    "macs": ["02:00:00:00:01:01"],
    "flow_quota": 20,
    "msg_rate": 2000,
    "msg_burst": 2000,
    "guaranteed_mbit": 20,
}
BOB = {
    "name": "bob",
    "slot": 2,
    "addresses": ["100.64.2.0/24", "2001:db8:200::/56"],
    "source_address": "127.0.0.12",
    "ports": [3],
    "macs": ["02:00:00:00:02:01"],
    "flow_quota": 5,
    "msg_rate": 100,
    "msg_burst": 50,
    "guaranteed_mbit": 10,
    "on_disconnect": "delete",
}


def write_registry(path: Path, *households: dict) -> Path:
    records = {h["name"]: {k: v for k, v in h.items() if k != "name"} for h in households}
    path.write_text(
        json.dumps({"next_slot": 1 + max((h["slot"] for h in households), default=0), "households": records})
    )
    return path


ovs = pytest.fixture(scope="session", name="ovs")(private_ovs_fixture)


@pytest.fixture
def bridge_name(request):
    return f"fvbr{os.getpid() % 10000}{abs(hash(request.node.name)) % 100}"


@pytest.fixture
def slicer(tmp_path, ovs, bridge_name):
    """A slicer (plain TCP for tests) in charge of a fresh bridge, with alice and bob registered."""
    registry = write_registry(tmp_path / "households.json", ALICE, BOB)
    proc = SlicerProcess(
        tmp_path / "slicer",
        {"backend": "file", "path": str(registry)},
        shared_ports=(1,),
        switch_socket=ovs.dir / f"{bridge_name}.slicer",
    ).start()
    ovs.add_bridge(bridge_name, proc.controller)
    proc.bridge = bridge_name  # type: ignore[attr-defined]
    wait_until(proc.switch_connected, 60, "the switch to connect")
    yield proc
    proc.stop()
    ovs.vsctl("--if-exists", "del-br", bridge_name)
    ovs.bridges.remove(bridge_name)


@pytest.fixture
def households(slicer):
    opened: list[Household] = []

    def connect(name: str, **kwargs) -> Household:
        source = {"alice": ALICE, "bob": BOB}[name]["source_address"]
        household = Household(slicer.household_port, source=source, **kwargs)
        opened.append(household)
        return household

    yield connect
    for household in opened:
        household.close()
