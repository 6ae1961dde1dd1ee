"""The test harness's own promises: a slicer started for a test listens on ports nobody else holds, even when
another process takes a chosen port before the slicer binds it (a fresh-clone CI run failed on exactly that)."""

from __future__ import annotations

import socket

import pytest
from conftest import ALICE, write_registry

from isp_flowvisor import testing
from isp_flowvisor.testing import SlicerProcess


def test_a_port_taken_before_the_first_start_is_chosen_again_and_a_restart_keeps_its_ports(tmp_path, monkeypatch):
    registry = {"backend": "file", "path": str(write_registry(tmp_path / "households.json", ALICE))}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        chosen = iter([held])  # the first port chosen is the one another process holds
        real = testing.free_port
        monkeypatch.setattr(testing, "free_port", lambda: next(chosen, None) or real())
        slicer = SlicerProcess(tmp_path / "slicer", registry).start()
        try:
            assert held not in (slicer.household_port, slicer.rpc_port, slicer.metrics_port)
            assert slicer.alive()
            # A restart keeps the ports its clients know: one taken meanwhile is an error, not a new port.
            slicer.stop()
            with socket.socket() as squatter:
                squatter.bind(("127.0.0.1", slicer.rpc_port))
                squatter.listen()
                with pytest.raises(AssertionError, match="address already in use"):
                    slicer.start()
            slicer.start()  # positive control: freed again, the same ports serve
            assert slicer.alive()
        finally:
            slicer.stop()
