"""A concern takes part in the phases that span every device (the switch (re)connecting, the clock, a
device's status) by joining the router's tuple for each: the router loops over them, so a new concern
needs no edit of `HomeRouter.switch_ready`, `tick` or `status`."""

from support import LAPTOP, PHONE, ROUTER_MAC, WLAN, lease, solicit_router

from homework_controller.core.router import HomeRouter
from homework_controller.effects import InstallRules, RemoveRules, TellHousehold
from homework_controller.lifecycle import SwitchFacts, Ticked
from homework_controller.store import DeviceStore


class Lantern:
    """A concern that lights up a device: it asks for the device's rules to be reinstalled on every tick,
    tells the household when the switch is ready and on each tick, and shows in the device's status."""

    def __init__(self, mac: str):
        self.mac = mac
        self.switches: list[SwitchFacts] = []

    def switch_ready(self, switch: SwitchFacts) -> list:
        self.switches.append(switch)
        return [TellHousehold("lantern", self.mac, "the switch is ready")]

    def tick(self, now: float) -> Ticked:
        return Ticked(effects=(TellHousehold("lantern", self.mac, f"tick at {now}"),), reinstall=[self.mac])

    def status_of(self, mac: str) -> dict:
        return {"lit": mac == self.mac}


def home(tmp_path, name, clock) -> HomeRouter:
    """A router as it ships with the phone permitted and leased, the laptop a newcomer."""
    router = HomeRouter(DeviceStore(str(tmp_path / f"{name}.sqlite")), clock=clock)
    router.switch_ready(WLAN, ROUTER_MAC)
    lease(router, PHONE)
    router.decisions.permit(PHONE)
    solicit_router(router, PHONE)
    lease(router, LAPTOP)
    return router


def test_a_concern_in_the_routers_tuples_takes_part_in_every_phase_and_the_others_answer_as_before(tmp_path, clock):
    plain, lit = home(tmp_path, "plain", clock), home(tmp_path, "lit", clock)
    lantern = Lantern(PHONE)
    lit.on_switch_ready += (lantern,)
    lit.ticking += (lantern,)
    lit.reporting += (lantern,)
    told = TellHousehold("lantern", PHONE, "the switch is ready")

    # The switch reconnects: the lantern hears of it and adds its word; every other concern's is as before.
    control = plain.switch_ready((WLAN, 5), ROUTER_MAC, frozenset({5}))
    effects = lit.switch_ready((WLAN, 5), ROUTER_MAC, frozenset({5}))
    assert lantern.switches == [SwitchFacts((WLAN, 5), ROUTER_MAC, frozenset({5}))]
    assert told in effects and told not in control
    assert [e for e in effects if e != told] == control
    assert any(isinstance(e, InstallRules) for e in control)  # the control: the whole rule set

    # The clock: the lantern's device has its rules reinstalled and the household hears of the tick; the
    # real phases' results (IPv6's adverts repeated, the rules reconciled) come first, unchanged.
    clock.now += 120
    control = plain.tick()
    effects = lit.tick()
    assert control  # the control: the phone hears its prefixes again
    assert effects[: len(control)] == control
    added = effects[len(control) :]
    assert added[-1] == TellHousehold("lantern", PHONE, f"tick at {clock.now}")
    assert any(isinstance(e, RemoveRules) for e in added) and any(isinstance(e, InstallRules) for e in added)
    assert plain.tick() == []  # the control: nothing more for the router as it ships...
    assert lit.tick()[-1] == TellHousehold("lantern", PHONE, f"tick at {clock.now}")  # ...the lantern on every tick

    # A device's status: the lantern's field beside every other concern's, which are unchanged.
    phone, laptop = lit.status(PHONE), lit.status(LAPTOP)
    assert (phone["lit"], laptop["lit"]) == (True, False)
    lit.reporting = lit.reporting[:-1]
    assert {k: v for k, v in phone.items() if k != "lit"} == lit.status(PHONE)
    assert "portal_code" in phone and phone["access_port"] is None  # the control: the concerns' fields are there
