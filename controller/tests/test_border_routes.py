"""Which routes a device's adverts may offer the home (a Thread border router's mesh), for how long, and
what the household is told: the policy alone, as plain calls."""

import ipaddress

import pytest

from homework_controller.concerns.border_routes import (
    CHANGE_HOLD_S,
    MAX_LIFETIME_S,
    MAX_PER_DEVICE,
    TOLD_REFUSALS,
    BorderRoutes,
    refusal,
)
from homework_controller.wire.nd import RouteOffer

HOME = (ipaddress.IPv6Network("fd12:3456:789a::/48"), ipaddress.IPv6Network("2001:db8:100::/56"))
MESH = "fd11:2233:4455:1::/64"
BR, OTHER_BR = "02:00:00:00:00:bb", "02:00:00:00:00:cc"


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("2001:db8:77::/64", "not a unique local prefix (fc00::/7)"),  # global: the ISP routes it elsewhere
        ("::/0", "not a unique local prefix (fc00::/7)"),  # a default route: all the home's traffic
        ("fd11::/32", "not a /48 to /64"),
        ("fd11:2233:4455:1::7/128", "not a /48 to /64"),
        ("fd12:3456:789a:5::/64", "overlaps the home's own prefix"),  # a /64 of the home's ULA /48
        ("fd12:3456:789a::/48", "overlaps the home's own prefix"),
    ],
)
def test_a_route_that_is_not_a_meshs_own_space_is_refused(prefix, why):
    assert refusal(ipaddress.IPv6Network(prefix), HOME, ()) == why


def test_a_meshs_unique_local_prefix_is_accepted_unless_another_device_holds_it():
    mesh = ipaddress.IPv6Network(MESH)
    assert refusal(mesh, HOME, ()) is None
    assert refusal(mesh, HOME, (ipaddress.IPv6Network("fd11:2233:4455::/48"),)) == "overlaps another device's route"


def test_an_accepted_route_lasts_its_lifetime_capped_and_is_told_once():
    routes = BorderRoutes()
    change = routes.offered(BR, (RouteOffer(MESH, 0xFFFF_FFFF),), HOME, now=1000)
    assert change.routes_changed and len(change.told) == 1 and MESH in change.told[0]
    assert routes.of(BR) == (MESH,)
    # The border router advertises again: nothing new to do or tell; its lifetime starts again.
    change = routes.offered(BR, (RouteOffer(MESH, 600),), HOME, now=1500)
    assert not change.routes_changed and change.told == []
    assert routes.expire(2099) == [] and routes.of(BR) == (MESH,)
    assert routes.expire(2100) == [BR] and routes.of(BR) == ()
    # Positive control of the cap: an "infinite" lifetime held MAX_LIFETIME_S.
    routes.offered(BR, (RouteOffer(MESH, 0xFFFF_FFFF),), HOME, now=3000)
    assert routes.expire(3000 + MAX_LIFETIME_S - 1) == [] and routes.expire(3000 + MAX_LIFETIME_S) == [BR]


def test_lifetime_0_withdraws_and_a_device_that_stops_forwarding_loses_its_routes():
    routes = BorderRoutes()
    routes.offered(BR, (RouteOffer(MESH, 1800), RouteOffer("fd11:2233:4455:2::/64", 1800)), HOME, now=0)
    change = routes.offered(BR, (RouteOffer(MESH, 0),), HOME, now=10)
    assert change.routes_changed and routes.of(BR) == ("fd11:2233:4455:2::/64",)
    assert routes.forget(BR) and routes.of(BR) == () and routes.owner_of(ipaddress.IPv6Network(MESH)) is None


def test_one_device_cannot_take_another_devices_route_and_its_refusal_is_told_once():
    routes = BorderRoutes()
    routes.offered(BR, (RouteOffer(MESH, 1800),), HOME, now=0)
    for _ in range(3):
        change = routes.offered(OTHER_BR, (RouteOffer(MESH, 1800),), HOME, now=5)
    assert not change.routes_changed and change.told == []  # told at the first advert only
    assert routes.owner_of(ipaddress.IPv6Network("fd11:2233:4455:1::99/128")) == BR
    # Positive control: a prefix of its own is its own.
    assert routes.offered(OTHER_BR, (RouteOffer("fd77::/64", 1800),), HOME, now=5).routes_changed
    assert routes.owner_of(ipaddress.IPv6Network("fd77::1/128")) == OTHER_BR


def test_a_device_holds_at_most_a_few_routes():
    routes = BorderRoutes()
    offers = tuple(RouteOffer(f"fd11:2233:4455:{n}::/64", 1800) for n in range(MAX_PER_DEVICE + 2))
    change = routes.offered(BR, offers, HOME, now=0)
    assert len(routes.of(BR)) == MAX_PER_DEVICE
    assert sum("refused" in message for message in change.told) == 2


def test_the_other_devices_hear_each_route_with_what_is_left_of_its_lifetime_but_not_their_own():
    routes = BorderRoutes()
    routes.offered(BR, (RouteOffer(MESH, 1800),), HOME, now=0)
    assert routes.offered_to("02:00:00:00:00:01", now=100) == ((MESH, 1700),)
    assert routes.offered_to(BR, now=100) == ()


def test_a_device_flapping_a_route_changes_it_at_most_once_every_hold():
    routes = BorderRoutes()
    changes = 0
    for n in range(100):  # its meter's 20 adverts a second for 5 s, each turning the route on or off
        change = routes.offered(BR, (RouteOffer(MESH, 1800 if n % 2 == 0 else 0),), HOME, now=n / 20)
        changes += change.routes_changed
    assert changes <= 5 / CHANGE_HOLD_S + 1
    # Positive control: a border router advertising the same route again keeps it alive meanwhile.
    routes = BorderRoutes()
    routes.offered(BR, (RouteOffer(MESH, 10),), HOME, now=0)
    routes.offered(BR, (RouteOffer(MESH, 10),), HOME, now=1)
    assert routes.expire(10.5) == [] and routes.of(BR) == (MESH,)


def test_ever_new_refused_prefixes_are_told_and_remembered_a_bounded_number_of_times():
    routes = BorderRoutes()
    told = 0
    for n in range(1000):
        told += len(routes.offered(BR, (RouteOffer(f"2001:db8:{n:x}::/64", 1800),), HOME, now=n).told)
    assert told == TOLD_REFUSALS and len(routes.refused[BR]) == TOLD_REFUSALS


def test_a_route_keeps_its_owner_when_its_device_stops_forwarding_and_only_the_household_gives_it_away():
    """Issue 39, finding 6: the first device honoured for a prefix owns it, on the disk (`save_owner`),
    through its pauses and a restart (`owners`); another device's offer is refused until `give`. The
    owner's own withdrawal gives it up (the positive control: the other device is then honoured)."""
    saved: dict[str, str | None] = {}
    routes = BorderRoutes(save_owner=saved.__setitem__)
    routes.offered(BR, (RouteOffer(MESH, 1800),), HOME, now=0)
    assert saved == {MESH: BR}
    routes.forget(BR)  # paused: its route goes, its ownership stays
    change = routes.offered(OTHER_BR, (RouteOffer(MESH, 1800),), HOME, now=10)
    assert routes.of(OTHER_BR) == () and "another device's route" in change.told[0]
    again = BorderRoutes({MESH: BR})  # a restart, from the disk
    assert again.offered(OTHER_BR, (RouteOffer(MESH, 1800),), HOME, now=0).routes_changed is False
    assert again.offered(BR, (RouteOffer(MESH, 1800),), HOME, now=0).routes_changed  # its owner is honoured
    assert again.give(ipaddress.IPv6Network(MESH), OTHER_BR) == {BR}  # BR held it: its route goes
    assert again.of(BR) == () and again.owned() == {MESH: OTHER_BR}
    assert again.offered(OTHER_BR, (RouteOffer(MESH, 1800),), HOME, now=10).routes_changed
    # The owner's withdrawal gives it up.
    routes.offered(BR, (RouteOffer(MESH, 1800),), HOME, now=20)
    routes.offered(BR, (RouteOffer(MESH, 0),), HOME, now=30)
    assert saved[MESH] is None and routes.offered(OTHER_BR, (RouteOffer(MESH, 1800),), HOME, now=40).routes_changed


def test_a_device_owns_at_most_a_few_prefixes_held_or_not():
    routes = BorderRoutes()
    prefixes = [f"fd11:2233:4455:{n}::/64" for n in range(1, MAX_PER_DEVICE + 2)]
    routes.offered(BR, tuple(RouteOffer(p, 1800) for p in prefixes[:MAX_PER_DEVICE]), HOME, now=0)
    routes.forget(BR)  # away: none held, all still its own
    change = routes.offered(BR, (RouteOffer(prefixes[-1], 1800),), HOME, now=10)
    assert not change.routes_changed and f"already {MAX_PER_DEVICE} routes" in change.told[0]
    assert routes.offered(BR, (RouteOffer(prefixes[0], 1800),), HOME, now=20).routes_changed  # one of its own
