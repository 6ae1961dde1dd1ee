"""ws.v1's operations are declared once (operations.py): the routes, what a decision does before it
answers, and openapi.yaml all come from that declaration."""

import inspect
import json
from pathlib import Path

from dhcp_frames import frame
from support import LAPTOP, PHONE, PHONE_CLIENT, ROUTER_MAC, WLAN, lease, permitted_phone

from homework_controller.api import api, authority, operations
from homework_controller.core.router import HomeRouter
from homework_controller.effects import InstallRules
from homework_controller.store import DeviceStore

OPENAPI = Path(__file__).resolve().parents[1] / "openapi.yaml"


def test_openapi_yaml_is_what_the_declarations_say():
    assert (
        OPENAPI.read_text() == operations.openapi_yaml()
    ), "controller/openapi.yaml is stale: python -m homework_controller.api.operations > controller/openapi.yaml"


def test_every_declared_operation_takes_the_arguments_it_declares_by_their_names():
    """ws.v1 passes a request's arguments in the declared order: the function performing the operation takes
    what it acts on, then those (an optional one with a default), then the role's keywords (`authority`)."""
    assert set(api.ROUTES) == {op.name for op in operations.OPERATIONS}
    for op in operations.OPERATIONS:
        assert not op.decision or op.verb == "POST", op.name  # a query writes nothing
        target, *taken = inspect.signature(op.call).parameters.values()
        declared = [*op.path, *([op.query] if op.query else [])]
        assert target.name == {"edge": "host", "radio": "radio", "satellite": "host"}.get(op.answers, "router"), op.name
        if op.body:  # the body's parameter, named for what it is (the settings, a report)
            declared.append(taken[len(declared)].name)
        assert [p.name for p in taken] == [*declared, *authority.KEYWORDS.get(op.name, {})], op.name
        defaults = [p.name for p in taken if p.default is not inspect.Parameter.empty]
        assert defaults == [*op.path[-1:] * op.optional, *authority.KEYWORDS.get(op.name, {})], op.name


def test_every_operation_answers_json_and_a_decision_reaches_the_switch_before_its_answer(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), clock=clock, wifi_ssid="home")
    assert router.ipv6.enabled  # as shipped: every concern that ships
    router.switch_ready(WLAN, ROUTER_MAC)
    phone_ip = permitted_phone(router)
    arguments = {"mac": PHONE, "ip": phone_ip, "domain": "games.example.test", "name": "Phone", "duration": "30"}
    arguments |= {"windows": "sun-thu 21:30-07:00", "amount": "30 min", "zone": "Europe/London", "at": "05:00"}
    arguments |= {"shared": "person-1", "devices": PHONE, "prefix": "fdee:1:2:3::/64"}
    order = ["wifi-key", "show-wifi-key", "revoke-wifi-key", "deny-dns", "permit-dns", "name", "pause", "resume"]
    order += ["deny", "permit"]
    routed = [op for op in operations.OPERATIONS if op.answers not in ("edge", "radio", "satellite")]
    # merge, and a satellite's station and links (each needs a satellite on an access port of its own:
    # test_satellites.py),
    # have their own scenes.
    order += [op.name for op in routed if op.name not in [*order, "merge", "satellite-station", "satellite-links"]]
    for name in order:
        op = operations.BY_NAME[name]
        carried_out: list = []
        args = [arguments[p] for p in op.path] + ([arguments[op.query]] if op.query else [])
        answer = operations.perform(router, op, args, carried_out.append, applied=True)
        json.dumps(answer)  # never effects: those went to the switch
        assert len(carried_out) == (op.answers in ("device", "dns-rules", "shared-allowance")), name
        if op.answers == "device":
            assert answer["mac"] == PHONE and answer["applied"] is True, name
        if op.answers == "dns-rules":
            assert isinstance(answer, list), name
        if name in ("deny", "permit"):  # the change itself went to the switch
            assert any(isinstance(e, InstallRules) for e in carried_out[0]), name
    # merge takes a newcomer for a device that is away: its own scene, the same checks. The phone is let in
    # again (the operations above blocked it), renews with its DHCP client, leaves, and is back as LAPTOP.
    router.decisions.whitelist(PHONE)
    router.joining.on_dhcp(frame(PHONE, "request", ciaddr=phone_ip, src_ip=phone_ip, options=PHONE_CLIENT))
    clock.now += 3601  # the phone's lease ran out
    lease(router, LAPTOP, PHONE_CLIENT)
    carried_out = []
    answer = operations.perform(router, operations.BY_NAME["merge"], [LAPTOP, PHONE], carried_out.append, applied=True)
    assert answer["mac"] == LAPTOP and answer["earlier_macs"] == [PHONE] and answer["applied"] is True
    assert len(carried_out) == 1 and any(isinstance(e, InstallRules) for e in carried_out[0])


def test_an_operation_that_would_answer_effects_is_refused(router):
    undeclared = operations.Operation(
        "permit", "POST", "permit, declared without its answer", operations.permit, ("mac",)
    )
    permitted_phone(router)
    try:
        operations.perform(router, undeclared, [PHONE], lambda effects: None, applied=True)
    except TypeError as exc:
        assert "declares no answer" in str(exc)
    else:
        raise AssertionError("effects answered to the caller")
