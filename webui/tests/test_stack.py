"""The test stack's real hwdb: a port taken between choosing it and hwdb binding it costs a retry, not the
test (a fresh clone's CI run once failed with "hwdb did not start", hwdb's own words thrown away)."""

import socket

import pytest
from stack import ChildExited, HwdbServer


def test_hwdb_takes_another_port_when_its_first_is_taken_but_a_restart_keeps_its_port(tmp_path):
    server = HwdbServer(str(tmp_path / "hwdb.sqlite"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", server.port))  # someone else's socket, there first
        server.start()
        try:
            assert server.port != taken.getsockname()[1]
            assert server.query("show tables") is not None  # it serves, on the port it says
            # Once clients know its port, a restart keeps it: taken, hwdb says so, in the error.
            server.stop()
            port = server.port
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
                squatter.bind(("127.0.0.1", port))
                with pytest.raises(ChildExited, match="Address already in use"):
                    server.start()
            server.start()  # positive control: the port free again, the same hwdb comes back on it
            assert server.port == port and server.query("show tables") is not None
        finally:
            server.stop()
