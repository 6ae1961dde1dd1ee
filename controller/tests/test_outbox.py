"""What the controller sends leaves in the order decided, and deciding never waits for it to leave: the switch's
connection (os-ken's send queue) and the DHCP socket are each handed what is decided by a thread of their own."""

import threading

from homenet.wait import wait_until
from homework_controller.edge.switch.sink import EdgeSink
from homework_controller.edge.switch.switch_connection import SwitchConnection
from homework_controller.effects import AnswerDhcp


class StuckSwitch:
    """os-ken's connection to a switch that reads nothing until `reads` is set; records what it was handed."""

    send_q = None

    def __init__(self, handed: list):
        self.handed, self.reads = handed, threading.Event()

    def send(self, data: bytes) -> None:
        assert self.reads.wait(5), "the switch never read"
        self.handed.append(data)


class DhcpSocket:
    def __init__(self, handed: list):
        self.handed = handed

    def send(self, data: bytes) -> None:
        self.handed.append(data)


def controller(handed: list) -> tuple[SwitchConnection, EdgeSink, StuckSwitch]:
    """The switch's connection, and the sink that answers DHCP beside it (nothing else of the edge's)."""
    connection = SwitchConnection()
    connection.datapath = switch = StuckSwitch(handed)
    sink = EdgeSink(connection, DhcpSocket(handed), None, None, None, ipv6=False)
    return connection, sink, switch


def test_deciding_does_not_wait_for_a_stuck_switch_and_an_ack_follows_its_rules():
    """In the hostile bench's lease-completing storm, handing a change to os-ken held the controller's lock 11 ms
    (0.1 ms of it on a CPU) while every device's DHCP and DNS waited: now changes are handed over by a thread."""
    handed: list = []
    connection, sink, switch = controller(handed)
    done = threading.Event()

    def decide():
        connection.send_encoded((switch, b"its rules"))
        sink.answer_dhcp(AnswerDhcp(b"its ACK", after_rules=True))  # may not overtake its rules
        sink.answer_dhcp(AnswerDhcp(b"another's OFFER"))  # brings no rules: at once
        done.set()

    threading.Thread(target=decide, daemon=True).start()
    assert done.wait(2), "deciding waited for the switch"
    assert handed == [b"another's OFFER"]
    switch.reads.set()
    wait_until("the switch to read", lambda: len(handed) == 3, 5)
    assert handed == [b"another's OFFER", b"its rules", b"its ACK"]


def test_an_ack_with_nothing_on_its_way_to_the_switch_goes_at_once():
    """Positive control: its rules already with os-ken, the ACK does not wait for the switch's thread."""
    handed: list = []
    _, sink, _ = controller(handed)
    sink.answer_dhcp(AnswerDhcp(b"its ACK", after_rules=True))
    assert handed == [b"its ACK"]


def test_changes_encoded_for_a_switch_no_longer_connected_never_reach_its_successor():
    """A change encoded off the lock for the switch connected then, and handed over once another connected (which
    gets the whole rule set afresh), is dropped."""
    old_handed: list = []
    connection, _, old = controller(old_handed)
    new_handed: list = []
    connection.datapath = new = StuckSwitch(new_handed)
    new.reads.set()
    connection.send_encoded((old, b"for the old switch"))
    connection.send_encoded((new, b"for the new one"))
    wait_until("both to be handed over", lambda: len(connection.to_switch) == 0, 5)
    assert (old_handed, new_handed) == ([], [b"for the new one"])
