"""The order the os-ken app serves in (a mixin of `ofapp.HomeworkController`, which declares what it
needs of the app below): what devices send (packet-ins, DHCP from its socket), parsed off the lock,
is queued per device and served round-robin by one worker thread, so a flooding device lengthens only
its own queue; the rule changes DHCP answers bring are held behind the answers (`held.py`) and sent
in the order they were decided.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..api.server import TimedLock
from ..core.router import HomeRouter
from ..effects import AnswerDhcp, Effect, RuleChange
from ..wire import packets
from .fairness import FairQueue
from .held import ANSWER, SEND, HeldChanges, Wait

LOG = logging.getLogger("homework.controller")

NEWCOMERS = "newcomers"  # the fair queue's key for every MAC the router does not know yet
# How long held changes wait before they are offered again to a switch whose connection is behind.
SWITCH_BEHIND_S = 0.005
ROUTER = "router"  # its key for the router's own stack (its ARP and neighbour solicitations for devices)


def queue_key(eth_src: str, known: Callable[[str], bool], from_router: bool = False, about: str | None = None):
    """Whose queue a frame waits in: the router's stack's own (what came in on the switch's LOCAL port), a
    known device's, else the newcomers' one. The router's never shares the newcomers': a storm of forged
    MACs filling theirs must not drop the router's solicitations for the devices it routes to. And it is
    one per device the router asks about (`about`: its MAC), so a device cycling addresses in its /64 (each
    one the router's stack solicits) fills only the queue of the router's questions about itself."""
    if from_router:
        return (ROUTER, about)
    return eth_src if known(eth_src) else NEWCOMERS


class FairServing:
    router: HomeRouter
    lock: TimedLock
    from_devices: FairQueue
    from_devices_ready: threading.Event
    held_rules: HeldChanges
    carry_out: Callable[[Effect], None]  # `effects.EffectSink`'s
    # A rule change as the switch reads it (os-ken's encoding, the slow part of sending it: pure, so it runs off
    # the lock), and that sent (under the lock, so changes leave in the order decided).
    encode_rules: Callable[[RuleChange], Any]
    send_encoded: Callable[[Any], None]
    switch_room: Callable[[], int]  # how many encoded changes the switch's connection takes now without waiting

    def _queue(
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
        # Devices the router knows get a queue each; everyone else shares one, or a storm of forged MACs would
        # be a thousand "devices" each served as often as a real one. Which: one lookup in the router's dict of
        # devices, without its lock (the queue has its own), so the threads that receive frames do not wait
        # for the worker's turns: in a lease-completing storm the DHCP socket's thread waited for the lock for
        # every storm frame ahead of another device's, whose DHCP p99 was 40x quiet's (issue 39). A device
        # added or forgotten meanwhile has this frame served from the other queue.
        key = queue_key(frame.eth_src, self.router.devices.__contains__, from_router, about.mac if about else None)
        queued = self.from_devices.put(key, (frame, decide, answers_first))
        # Set once per wake-up, not per frame (a set costs a condition's lock): the worker clears it
        # before it looks at the queue, so a frame queued while it is still set is seen then.
        if queued and not self.from_devices_ready.is_set():
            self.from_devices_ready.set()

    def _serve_from_devices(self):
        while True:
            self.from_devices_ready.wait()
            self.from_devices_ready.clear()
            while (turn := self._serve_one_turn()) is not None:
                if isinstance(turn, Wait):  # for a new frame, or for the devices to go quiet
                    self.from_devices_ready.wait(turn.seconds)
                    self.from_devices_ready.clear()

    def _serve_one_turn(self) -> str | Wait | None:
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
                        self._send_held_rules()  # its own among them, if any are held
                        self._apply(effects, at_once=True)  # its rules, then its answer (`dhcp.answer`)
                    else:
                        self._apply(effects, answers_first=answers_first, source=frame.eth_src)
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
        encoded = [self.encode_rules(change) for change in changes]
        # Asked before the lock: the room is os-ken's queue's, whose own lock its threads take as they hand over (a
        # wait for it under the controller's lock held that 11-14 ms in the storm, 0.1 ms on a CPU). A decision may
        # fill the queue meanwhile: then the outbox's thread waits for os-ken, not the lock's holder.
        if self.switch_room() < len(encoded):
            return False
        with self.lock:
            if self.held_rules.take_oldest(changes):
                for each in encoded:
                    self.send_encoded(each)
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

    def _apply(
        self, effects: list[Effect], *, answers_first: bool = False, at_once: bool = False, source: str = ""
    ) -> None:
        """Carry out the router's effects. Rule and meter changes reach the switch in the order
        they were decided: answers_first (devices are waiting) holds them back behind the answers
        (`_serve_one_turn` sends them); while some are held, later ones queue behind them. at_once
        (a household's decision; addresses blocked before the DNS answer that names them leaves)
        sends everything held and then its own, if it brings any (else nothing held need go first: a
        decision or a DNS answer that changes no rule is not held up by a storm's changes). source: the MAC
        whose frame brought the effects."""
        if at_once and any(isinstance(e, RuleChange) for e in effects):
            self._send_held_rules()
        hold = answers_first or bool(self.held_rules)
        for effect in effects:
            if hold and isinstance(effect, RuleChange):
                self.held_rules.hold(effect, source)
            else:
                self.carry_out(effect)
        if self.held_rules and not answers_first:
            self.from_devices_ready.set()  # the worker sends them

    def _send_held_rules(self) -> None:
        for effect in self.held_rules.take():
            self.carry_out(effect)
