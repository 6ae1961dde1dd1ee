"""The order the controller serves in: what devices send (packet-ins, DHCP from its socket), parsed off the
lock, is queued per device and served round-robin by one worker thread, so a flooding device lengthens only its
own queue; the rule changes DHCP answers bring are held behind the answers (`held.py`) and sent in the order they
were decided. Every effect the router decides reaches the sink through here (`FairServer.apply`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ... import flows
from ...api.server import TimedLock
from ...core.router import HomeRouter
from ...effects import AnswerDhcp, Effect, RuleChange
from ...model import State
from ...wire import packets
from .fairness import FairQueue
from .held import ANSWER, SEND, HeldChanges, Wait
from .switch_connection import SwitchConnection

LOG = logging.getLogger("homework.controller")

# The fair queue's group of the devices nobody has decided on: one turn per round for all of them, shared round
# robin among its members, each pending device and the newcomers (every MAC the router does not know yet, one
# member). A storm of forged MACs taking leases is hundreds of pending devices: with a queue each, a permitted
# device's DHCP could wait a turn for every one of them (issue 39).
UNDECIDED = "undecided"
NEWCOMERS = "newcomers"
# How long held changes wait before they are offered again to a switch whose connection is behind.
SWITCH_BEHIND_S = 0.005
ROUTER = "router"  # its key for the router's own stack (its ARP and neighbour solicitations for devices)


def queue_key(
    eth_src: str, state_of: Callable[[str], State | None], from_router: bool = False, about: str | None = None
) -> tuple[object, str | None]:
    """Whose queue a frame waits in, (key, member within the key's group or None): the router's stack's own
    (what came in on the switch's LOCAL port), a decided device's own, else the undecided group's, as a pending
    device or a newcomer. The router's never shares the newcomers': a storm of forged MACs filling theirs must
    not drop the router's solicitations for the devices it routes to. And it is one per device the router asks
    about (`about`: its MAC), so a device cycling addresses in its /64 (each one the router's stack solicits)
    fills only the queue of the router's questions about itself."""
    if from_router:
        return (ROUTER, about), None
    state = state_of(eth_src)
    if state is None:
        return UNDECIDED, NEWCOMERS
    if state is State.PENDING:
        return UNDECIDED, eth_src
    return eth_src, None


class FairServer:
    """switch: where rule changes go, encoded off the lock (os-ken's encoding, the slow part of sending them) and
    sent under it (so changes leave in the order decided); carry_out: the sink's, for every other effect."""

    def __init__(
        self,
        router: HomeRouter,
        lock: TimedLock,
        switch: SwitchConnection,
        carry_out: Callable[[Effect], None],
        *,
        per_device_queue: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.router, self.lock, self.switch, self.carry_out = router, lock, switch, carry_out
        # What devices send the controller (packet-ins, and DHCP from its socket), queued per device; the undecided
        # ones share one turn per round (`UNDECIDED`). Newcomers share one queue in it, as long as their meter's
        # burst: what the switch lets through for a household arriving at once is not dropped here.
        self.from_devices = FairQueue(per_key_limit=per_device_queue, limits={NEWCOMERS: flows.NEWCOMERS_METER.burst})
        self.from_devices_ready = threading.Event()
        self.held_rules = HeldChanges(clock=clock)  # rule and meter changes waiting behind DHCP answers
        self.dhcp_before_switch = 0

    def on_dhcp(self, frame: packets.Frame) -> None:
        """A client's DHCP frame from the LAN interface (dhcp_port)."""
        if self.switch.datapath is None:
            # Rules a restarted controller finds in the switch still send DHCP here; answers wait
            # until it knows the switch (and the router's MAC), which the client's retry finds.
            self.dhcp_before_switch += 1
            return
        self.queue(frame, self.router.joining.on_dhcp, answers_first=True)

    def queue(
        self, frame: packets.Frame, decide, answers_first: bool = False, from_router: bool = False, asked: str = ""
    ) -> None:
        """answers_first: DHCP, which a household's devices all ask at once after a power cut; the
        rule changes it brings wait behind the answers (a packet-in's are applied at once). from_router:
        it came from the router's own stack, asking where the address `asked` is (a neighbour
        solicitation's target)."""
        about = None
        if from_router and asked:
            with self.lock:  # the registry's word on whose address the router's stack asks about
                about = self.router.registry.device_at(asked)
        # Decided devices get a queue each; the undecided share one turn, or a storm of forged MACs would be a
        # thousand "devices" each served as often as a real one. Which: one lookup in the router's dict of
        # devices, without its lock (the queue has its own), so the threads that receive frames do not wait
        # for the worker's turns: in a lease-completing storm the DHCP socket's thread waited for the lock for
        # every storm frame ahead of another device's, whose DHCP p99 was 40x quiet's (issue 39). A device
        # added, decided on or forgotten meanwhile has this frame served from the other queue.
        key, member = queue_key(frame.eth_src, self._state_of, from_router, about.mac if about else None)
        queued = self.from_devices.put(key, (frame, decide, answers_first), member)
        # Set once per wake-up, not per frame (a set costs a condition's lock): the worker clears it
        # before it looks at the queue, so a frame queued while it is still set is seen then.
        if queued and not self.from_devices_ready.is_set():
            self.from_devices_ready.set()

    def _state_of(self, mac: str) -> State | None:
        device = self.router.devices.get(mac)  # without the controller's lock: see `queue`
        return None if device is None else device.state

    def serve_from_devices(self) -> None:
        while True:
            self.from_devices_ready.wait()
            self.from_devices_ready.clear()
            while (turn := self.serve_one_turn()) is not None:
                if isinstance(turn, Wait):  # for a new frame, or for the devices to go quiet
                    self.from_devices_ready.wait(turn.seconds)
                    self.from_devices_ready.clear()

    def serve_one_turn(self) -> str | Wait | None:
        """Answer the next waiting frame, or send some held rule changes (`held.py` says which)."""
        to_send: list[RuleChange] = []
        with self.lock:
            turn = self.held_rules.next_turn(frames_waiting=bool(self.from_devices))
            if turn == ANSWER:
                frame, decide, answers_first = self.from_devices.pop()
                if answers_first:
                    self.held_rules.answering()
                try:
                    effects = decide(frame)
                    if self._waits_for_rules(frame.eth_src, effects):
                        self.send_held_rules()  # its own among them, if any are held
                        self.apply(effects, at_once=True)  # its rules, then its answer (`dhcp.answer`)
                    else:
                        self.apply(effects, answers_first=answers_first, source=frame.eth_src)
                except Exception:
                    LOG.exception("frame from %s failed", frame.eth_src)
            elif turn == SEND:
                to_send = self.held_rules.oldest(self.held_rules.per_turn)
        if to_send and not self._send_encoded_off_the_lock(to_send):
            return Wait(SWITCH_BEHIND_S)
        return turn

    def _send_encoded_off_the_lock(self, changes: list[RuleChange]) -> bool:
        """Send the oldest held changes, encoded without the lock: a storm's newcomers bring ten rules each, and
        encoding them under it (a quarter of a millisecond a rule, more on a loaded box) was the lock's longest
        hold in a lease-completing storm, 64-88 ms, which every other device's DHCP and DNS waited for (issue
        39). Under the lock only what is encoded is sent, if the changes are still the oldest held: meanwhile a
        decision, or an answer that waits for its rules, may have sent everything held (in order: these too),
        or the switch came back and gets the whole rule set. Nor does the lock wait for the switch: when its
        connection is behind (OVS reads slowly while it forwards a storm), the changes stay held, and False says
        to try again shortly."""
        encoded = [self.switch.encode_rules(change) for change in changes]
        # Asked before the lock: the room is os-ken's queue's, whose own lock its threads take as they hand over (a
        # wait for it under the controller's lock held that 11-14 ms in the storm, 0.1 ms on a CPU). A decision may
        # fill the queue meanwhile: then the outbox's thread waits for os-ken, not the lock's holder.
        if self.switch.room() < 1:  # they go as one buffer (`send_encoded`)
            return False
        with self.lock:
            if self.held_rules.take_oldest(changes):
                self.switch.send_encoded(*encoded)
        return True

    def _waits_for_rules(self, mac: str, effects: list[Effect]) -> bool:
        """Whether the answer in `effects` waits for rule changes: an ACK that lets the device use its address
        (its first DNS query must find its rules), if it brings some or some its frames brought are held. Not
        otherwise: a forwarding device's renewal changes none of its rules, and sending every change held behind
        a storm's answers first held the lock 780 ms and delayed its answer as long (issue 39). A held-back
        device's ACK (its captive portal's rules) waits only while nothing is held: a newcomer joining alone gets
        its first probe answered; while other frames wait or changes are held (a storm, a power cut), its ACK goes
        first, as the storm's others do, and a lost probe is asked again."""
        answer = next((e for e in effects if isinstance(e, AnswerDhcp) and e.after_rules), None)
        if answer is None:
            return False
        brings_rules = any(isinstance(e, RuleChange) for e in effects)
        if answer.held_back:
            return brings_rules and not self.held_rules and not self.from_devices
        return brings_rules or self.held_rules.holds_from(mac)

    def apply(
        self, effects: list[Effect], *, answers_first: bool = False, at_once: bool = False, source: str = ""
    ) -> None:
        """Carry out the router's effects. Rule and meter changes reach the switch in the order
        they were decided: answers_first (devices are waiting) holds them back behind the answers
        (`serve_one_turn` sends them); while some are held, later ones queue behind them. at_once
        (a household's decision; addresses blocked before the DNS answer that names them leaves)
        sends everything held and then its own, if it brings any (else nothing held need go first: a
        decision or a DNS answer that changes no rule is not held up by a storm's changes). source: the MAC
        whose frame brought the effects."""
        if at_once and any(isinstance(e, RuleChange) for e in effects):
            self.send_held_rules()
        hold = answers_first or bool(self.held_rules)
        for effect in effects:
            if hold and isinstance(effect, RuleChange):
                self.held_rules.hold(effect, source)
            else:
                self.carry_out(effect)
        if self.held_rules and not answers_first:
            self.from_devices_ready.set()  # the worker sends them

    def send_held_rules(self) -> None:
        """Every held change, encoded and sent in order as one hand-over to the switch's outbox (the sink's
        `change_rules` is one per change)."""
        self.switch.send_encoded(*(self.switch.encode_rules(change) for change in self.held_rules.take()))
