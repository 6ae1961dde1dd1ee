"""The web UI's controller client asks only for what ws.v1 declares (the controller's
operations registry): the same operation, verb, number of path arguments, query argument and
JSON body.
The other tests run the web UI against the controller's own ws.v1 (api.make_app over its core,
tests/stack.py), so they hold the web UI to the same registry and to its answers."""

import inspect

import pytest

from homework_controller.api.operations import BY_NAME
from homework_webui.controller import ControllerClient

MAC = "02:00:00:00:00:42"
# A sample argument for each parameter name the client's methods take.
SAMPLES = {"mac": MAC, "action": None, "name": "the kitchen", "domain": "example.com", "duration": "30"}
SAMPLES |= {"ip": "10.2.0.6", "into": "02:00:00:00:00:43", "macs": [MAC]}
SAMPLES |= {"windows": "sun-thu 21:30-07:00", "amount": "2 h", "zone": "Europe/London", "at": "04:00"}
SAMPLES |= {"settings": {"channel": 11}, "role": "panel", "prefix": "fdee:1:2:3::/64", "on": True}
SAMPLES |= {"event": "joined", "keyid": "", "links": [{"mac": MAC, "rssi": -50, "retries": 0, "packets": 9}]}
ACTIONS = {"decide": ("permit", "deny", "whitelist", "blacklist"), "dns": ("deny-dns", "permit-dns")}


def client_requests() -> list[tuple[str, str, str, dict | None, dict | None]]:
    """(client method, verb, path under ws.v1/, query, body) for every call the client can make."""
    sent = []
    for name, method in inspect.getmembers(ControllerClient, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = [p for p in inspect.signature(method).parameters if p != "self"]
        for action in ACTIONS.get(name, (None,)):
            client = ControllerClient("http://127.0.0.1:9")
            client._call = lambda verb, path, query=None, body=None, _n=name: sent.append(  # type: ignore[method-assign]
                (_n, verb, path, query, body)
            )
            getattr(client, name)(*(action if p == "action" else SAMPLES[p] for p in params))
    return sent


def test_the_client_covers_the_calls_the_web_ui_makes():
    names = {name for name, *_ in client_requests()}
    assert {"status", "device", "decide", "pause", "resume", "rename", "issue_wifi_key", "apps", "health"} <= names
    assert {"radio_settings", "set_radio_settings"} <= names
    assert {"satellite_keys", "satellite_station", "satellite_links"} <= names


def undeclared(verb: str, path: str, query: dict | None, body: dict | None = None) -> str | None:
    """Why ws.v1's registry does not declare this request, or None if it does."""
    name, *args = path.split("/")
    op = BY_NAME.get(name)
    if op is None:
        return f"ws.v1 declares no operation {name!r}"
    if verb != op.verb:
        return f"{name} is {op.verb}, the client sends {verb}"
    if len(args) not in op.arities:
        return f"{name} takes {op.arities} path arguments, the client sends {len(args)}"
    if set(query or {}) != ({op.query} if op.query else set()):
        return f"{name}'s query argument is {op.query!r}, the client sends {sorted(query or {})}"
    if (body is not None) != op.body:
        return f"{name} {'takes' if op.body else 'takes no'} JSON body, the client sends {'one' if body else 'none'}"
    return None


@pytest.mark.parametrize("request_", client_requests(), ids=lambda r: f"{r[0]}:{r[2]}")
def test_every_client_call_is_a_declared_operation(request_):
    _, verb, path, query, body = request_
    assert undeclared(verb, path, query, body) is None


def test_a_client_that_drifts_is_caught():
    assert undeclared("POST", f"pause/{MAC}", None) is None  # the control: as declared
    assert "declares no operation" in undeclared("POST", f"pause-for-an-hour/{MAC}", None)
    assert "is POST" in undeclared("GET", f"pause/{MAC}", None)
    assert "path arguments" in undeclared("POST", f"pause/{MAC}/60", None)
    assert "query argument" in undeclared("POST", f"name/{MAC}", None)
    assert undeclared("POST", "set-radio-settings", None, {"channel": 1}) is None
    assert "takes JSON body" in undeclared("POST", "set-radio-settings", None)
    assert "takes no JSON body" in undeclared("POST", f"pause/{MAC}", None, {"channel": 1})
