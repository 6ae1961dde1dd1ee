"""The DHCP socket on a real interface (loopback): only DHCP to the server port comes in, a bad
frame costs only itself, and a dead thread is seen by health and replaced."""

import queue
import socket

import pytest
from dhcp_frames import client_frame

from homenet.wait import wait_until
from homework_controller.edge.dhcp_port import DhcpPort
from homework_controller.wire import packets

PHONE = "02:00:00:00:00:aa"

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_PACKET"), reason="Linux packet sockets")


@pytest.fixture
def port():
    received: queue.Queue = queue.Queue()
    dhcp = DhcpPort("lo")
    dhcp.start(received.put)
    sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sender.bind(("lo", 0))
    yield dhcp, received, sender
    sender.close()
    dhcp.supervisor.stop(join_s=0)


def test_only_dhcp_to_the_server_port_arrives_and_a_malformed_frame_costs_only_itself(port):
    dhcp, received, sender = port
    answer = bytearray(client_frame(PHONE, "offer"))
    answer[34:38] = bytes([0, 67, 0, 68])  # UDP 67 -> 68: what the router sends, not what it serves
    truncated = client_frame(PHONE, "discover")[:60]  # the UDP header says more follows
    for frame in (bytes(answer), truncated, client_frame(PHONE, "discover")):
        sender.send(frame)
    got = received.get(timeout=3)
    assert (got.eth_src, got.payload) == (PHONE, client_frame(PHONE, "discover")[42:])
    with pytest.raises(queue.Empty):
        received.get(timeout=0.3)  # the answer and the cut-off frame did not arrive as DHCP
    wait_until("the cut-off frame to be counted", lambda: dhcp.malformed == 1, 5)


def test_a_dead_socket_thread_shows_in_health_and_is_replaced(port, monkeypatch):
    dhcp, received, sender = port
    assert dhcp.health() == {"socket": "running", "restarts": 0}

    def crash(data):
        monkeypatch.undo()
        raise Crash()

    monkeypatch.setattr(packets, "parse", crash)  # a bug no per-frame check foresaw: the thread ends
    sender.send(client_frame(PHONE, "discover"))
    wait_until("the supervisor to restart it", lambda: dhcp.health() == {"socket": "running", "restarts": 1}, 5)
    sender.send(client_frame(PHONE, "discover"))
    assert received.get(timeout=3).eth_src == PHONE


class Crash(Exception):
    pass
