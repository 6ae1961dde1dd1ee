"""The household's controls over devices' time online, the concern: pauses and bedtimes (`pauses.py`),
daily allowances (`allowances.py`), and the household's clock both read (its time zone and daily
reset, `schedules.HouseholdTime`).

Pauses and allowances are its own gates, and the gates plugged in beside them (`gates/`, `GATES`) the
others: each may hold a device's traffic for now (`HomeRouter` gives a held device a non-forwarding
device's rules), and a plugged-in gate may add rules to a forwarding device's and has operations of its
own (`change_gate`). This module takes the household's words (ws.v1's text: "30 min", "tomorrow",
"sun-thu 21:30-07:00", "2 h") to pauses and allowances, answering `ApiError` for what it cannot read, and
says why and until when a device is held. `HomeRouter` finds the device, and brings
its rules in line after each change.
"""

from __future__ import annotations

from collections.abc import Callable

from ..effects import TellHousehold
from ..errors import ApiError, UnknownDevice
from ..flows import GateRules
from ..lifecycle import NOTHING_TICKED, Ticked
from ..policy import schedules
from ..store import DeviceStore
from . import allowances
from .allowances import Allowances
from .gates import GATES, Gate, Hold
from .pauses import Pauses


class HouseholdControls:
    def __init__(self, store: DeviceStore, clock: Callable[[], float]):
        self.clock = clock
        self.time = schedules.HouseholdTime(store)
        self.pauses = Pauses(store, clock, self.time)
        self.allowances = Allowances(store, clock, self.time)
        self.plugged: dict[str, Gate] = {gate.name: gate(store, clock) for gate in GATES}
        # Per-device policies that may hold a device's traffic for now (asked when its rules are made), in
        # the order the status says why: a pause or bedtime before a used-up allowance (resuming it still
        # leaves the allowance to lift).
        self.gates: tuple[Hold, ...] = (self.pauses, self.allowances, *self.plugged.values())
        self._plugged = tuple(self.plugged.values())

    # -- the lifecycle

    def knows(self, mac: str) -> bool:
        return any(gate.knows(mac) for gate in self.gates)

    def forget(self, mac: str) -> None:
        for gate in self.gates:
            gate.forget(mac)

    def move(self, old_mac: str, new_mac: str) -> None:
        for gate in self.gates:
            gate.move(old_mac, new_mac)

    def may_forward(self, mac: str) -> bool:
        return all(gate.may_forward(mac) for gate in self.gates)

    def rules_of(self, mac: str) -> tuple[GateRules, ...]:
        """What the plugged-in gates add to the device's rules while it forwards (asked for every device with
        rules on every tick: a plain loop, no generator)."""
        added: tuple[GateRules, ...] = ()
        for gate in self._plugged:
            rules = gate.rules_of(mac)
            if rules is not None:
                added += (rules,)
        return added

    def tick(self, now: float) -> Ticked:
        """Bedtimes that began or ended, pauses that ran out, a new day: every device with rules has them
        reconciled on each tick (`SwitchMirror.tick`), which applies them."""
        for gate in self.gates:
            gate.tick(now)
        return NOTHING_TICKED

    def status_of(self, mac: str) -> dict:
        """Every gate's word on the device (its schedule, its allowance, whether it is internet only...);
        paused, and if so why (the first gate's hold: "paused" | "bedtime" | "allowance") and until when (the
        household's local time, ISO; null: until resumed)."""
        hold = next((held for gate in self.gates if (held := gate.hold_of(mac)) is not None), None)
        why, until = hold if hold is not None else (None, None)
        status: dict = {}
        for gate in self.gates:
            status |= gate.status_of(mac)
        return {
            **status,
            "paused": hold is not None,
            "paused_why": why,
            "paused_until": None if until is None else schedules.iso(until, self.time.tz),
        }

    # -- events

    def count(self, used: dict[str, int]) -> set[str]:
        """Bytes each device moved since the last read: the devices whose allowance ran out or came back."""
        return self.allowances.count(used)

    def used_up(self, changed: dict[str, str]) -> list[TellHousehold]:
        """What the household is told of devices whose hold by an allowance changed (`changed`: MAC ->
        what the household calls the device): one message for a device whose own allowance ran out,
        one for a shared allowance that ran out (naming its devices), nothing for those that came back
        (a bonus or a new day let them go)."""
        until = schedules.iso(self.time.next_reset(self.clock()), self.time.tz)[11:16]
        told, shared_told = [], set()
        for mac, label in sorted(changed.items()):
            if self.allowances.hold_of(mac) is None:
                continue
            shared = self.allowances.status_of(mac)["shared_allowance"] or {}
            if shared.get("used_up"):
                if shared["name"] not in shared_told:
                    shared_told.add(shared["name"])
                    names = ", ".join(changed.get(m, m) for m in shared["devices"])
                    told.append(
                        TellHousehold(
                            "allowance",
                            mac,
                            f"The shared allowance {shared['name']} is used up: {names} paused until {until}",
                        )
                    )
            else:
                told.append(
                    TellHousehold("allowance", mac, f"{label} has used up today's allowance; paused until {until}")
                )
        return told

    # -- the household's decisions (by device; `HomeRouter` makes its rules follow)

    def change_gate(self, gate: str, change: Callable[[Gate, str], None], mac: str) -> None:
        """One of a plugged-in gate's operations (`GateOperation.change`) on the device."""
        change(self.plugged[gate], mac)

    def pause(self, mac: str) -> None:
        """The device's traffic stops now (its connections with it) until it is resumed."""
        self.pauses.pause(mac)

    def pause_for(self, mac: str, duration: str) -> None:
        """Paused now for a while: "30" or "30 min", "1 h", or "tomorrow" (the household's next reset)."""
        now = self.clock()
        if duration.strip().lower() == "tomorrow":
            until = self.time.next_reset(now)
        else:
            minutes = duration if duration.strip()[-1:].isalpha() else f"{duration} min"  # "30" is minutes
            try:
                kind, amount = allowances.parse_amount(minutes)
            except allowances.BadAllowance:
                kind, amount = "", 0
            if kind != "minutes":
                raise ApiError(f"{duration!r}: pause for minutes ('30 min', '1 h') or until 'tomorrow'")
            until = now + amount * 60
        self.pauses.pause(mac, until)

    def resume(self, mac: str, bedtime: bool = True) -> None:
        """Online again now (a pause ends; with `bedtime`, a running bedtime lets it go until that window
        ends). An allowance that is used up still holds it: only a bonus or the reset lifts that."""
        self.pauses.resume(mac, bedtime)

    def set_schedule(self, mac: str, text: str) -> None:
        """The device's weekly schedule (`schedules.py`'s text form; empty clears it)."""
        try:
            windows = schedules.parse(text)
        except schedules.BadSchedule as exc:
            raise ApiError(str(exc)) from None
        self.pauses.set_schedule(mac, windows)

    def set_allowance(self, mac: str, amount: str) -> None:
        """The device's daily allowance ("2 h", "500 MB"; empty removes it)."""
        try:
            allowance = allowances.Allowance(*allowances.parse_amount(amount)) if amount.strip() else None
        except allowances.BadAllowance as exc:
            raise ApiError(str(exc)) from None
        self.allowances.choose(mac, allowance)

    def grant_bonus(self, mac: str, amount: str) -> None:
        """More for today, until the household's reset ("30 min", "500 MB")."""
        try:
            self.allowances.grant_bonus(mac, *allowances.parse_amount(amount))
        except allowances.BadAllowance as exc:
            raise ApiError(str(exc)) from None

    # -- shared allowances (a person's: the devices an account owns, named by the web UI)

    def set_shared_allowance(self, name: str, amount: str) -> set[str]:
        """A daily allowance several devices use together ("2 h", "5 GB"; empty removes it): the
        devices whose hold changed."""
        name = self._shared_name(name)
        try:
            allowance = allowances.Allowance(*allowances.parse_amount(amount)) if amount.strip() else None
            return self.allowances.choose_shared(name, allowance)
        except allowances.BadAllowance as exc:
            raise ApiError(str(exc)) from None

    def share_allowance(self, name: str, macs: list[str]) -> set[str]:
        """The devices that share the allowance (replacing those that did): the devices whose hold changed."""
        name = self._shared_name(name)
        if name not in self.allowances.shared_names():
            raise UnknownDevice(f"no shared allowance {name!r}: set its amount first")
        try:
            return self.allowances.share(name, macs)
        except allowances.BadAllowance as exc:
            raise ApiError(str(exc)) from None

    def grant_shared_bonus(self, name: str, amount: str) -> set[str]:
        name = self._shared_name(name)
        if name not in self.allowances.shared_names():
            raise UnknownDevice(f"no shared allowance {name!r}")
        try:
            return self.allowances.grant_bonus(name, *allowances.parse_amount(amount))
        except allowances.BadAllowance as exc:
            raise ApiError(str(exc)) from None

    def shared_allowance(self, name: str) -> dict:
        """The shared allowance's standing today and the devices sharing it."""
        status = self.allowances.shared_status(self._shared_name(name))
        if status is None:
            raise UnknownDevice(f"no shared allowance {name!r}")
        return status

    def shared_allowances(self) -> list[dict]:
        return [self.shared_allowance(name) for name in self.allowances.shared_names()]

    @staticmethod
    def _shared_name(name: str) -> str:
        if not allowances.SHARED_NAME.fullmatch(name):
            raise ApiError(f"{name[:60]!r}: a shared allowance's name is 1-40 of a-z, 0-9, '.', '_', '-'")
        return name

    # -- the household's clock

    def household_time(self) -> dict:
        return self.time.to_json()

    def set_time_zone(self, name: str) -> dict:
        """The household's time zone (IANA name): schedules and the reset are read in it from now on."""
        try:
            self.time.set_zone(name)
        except schedules.BadSchedule as exc:
            raise ApiError(str(exc)) from None
        return self.time.to_json()

    def set_reset_time(self, at: str) -> dict:
        """When the household's day begins: allowances start again, "until tomorrow" ends."""
        try:
            self.time.set_reset(at)
        except schedules.BadSchedule as exc:
            raise ApiError(str(exc)) from None
        return self.time.to_json()
