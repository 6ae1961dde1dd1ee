"""ws.v1 as a caller sees it: routes, verbs and JSON errors."""

import io
import json

from homework_controller import api
from homework_controller.model import BadMac
from homework_controller.router import NotConfigured, UnknownDevice


def request(app, verb, path, query=""):
    out = {}

    def start_response(status, headers):
        out["status"], out["headers"] = int(status.split()[0]), dict(headers)

    body = b"".join(
        app(
            {"REQUEST_METHOD": verb, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO()},
            start_response,
        )
    )
    return out["status"], json.loads(body)


def service(name, *args):
    if name == "permit" and args[0] == "bad":
        raise BadMac("not a MAC address: 'bad'")
    if name == "permit" and args[0] == "02:00:00:00:00:99":
        raise UnknownDevice("no device 02:00:00:00:00:99 has asked to join")
    return {"called": name, "args": list(args)}


APP = api.make_app(service)


def test_state_changes_need_post():
    assert request(APP, "GET", "/ws.v1/permit/02:00:00:00:00:01")[0] == 405
    assert request(APP, "POST", "/ws.v1/permit/02:00:00:00:00:01") == (
        200,
        {"called": "permit", "args": ["02:00:00:00:00:01"]},
    )


def test_errors_are_json_with_a_4xx_code():
    assert request(APP, "POST", "/ws.v1/permit/bad") == (400, {"error": "not a MAC address: 'bad'"})
    status, body = request(APP, "POST", "/ws.v1/permit/02:00:00:00:00:99")
    assert status == 404 and "has asked to join" in body["error"]
    status, body = request(APP, "GET", "/ws.v1/nonsense")
    assert status == 404 and "permit" in body["methods"]
    assert request(APP, "POST", "/ws.v1/permit")[0] == 400


def test_every_original_method_is_routed():
    for method in (
        "permit",
        "deny",
        "status",
        "dhcp-status",
        "whitelist",
        "blacklist",
        "blacklist-status",
        "permit-dns",
        "deny-dns",
    ):
        assert method in api.ROUTES
    assert request(APP, "POST", "/ws.v1/deny-dns/02:00:00:00:00:01/games.example.test")[1]["called"] == "deny_dns"
    assert request(APP, "GET", "/ws.v1/status/02:00:00:00:00:01")[1]["args"] == ["02:00:00:00:00:01"]


def test_a_name_with_slashes_and_quotes_arrives_whole():
    status, body = request(APP, "POST", "/ws.v1/name/02:00:00:00:00:01", "name=Grandma%27s%20iPad%2FAir")
    assert status == 200 and body["args"] == ["02:00:00:00:00:01", "Grandma's iPad/Air"]
    assert request(APP, "POST", "/ws.v1/name/02:00:00:00:00:01")[0] == 400


def test_wifi_passphrase_methods_are_routed_with_their_verbs_and_a_router_without_wifi_says_501():
    mac = "02:00:00:00:00:01"
    assert request(APP, "POST", f"/ws.v1/wifi-key/{mac}")[1] == {"called": "issue_wifi_key", "args": [mac]}
    assert request(APP, "GET", f"/ws.v1/wifi-key/{mac}")[0] == 405  # a new passphrase is never made by a GET
    assert request(APP, "GET", f"/ws.v1/show-wifi-key/{mac}")[1]["called"] == "wifi_key_of"
    assert request(APP, "POST", f"/ws.v1/revoke-wifi-key/{mac}")[1]["called"] == "revoke_wifi_key"

    def no_wifi(name, *args):
        raise NotConfigured("this router has no Wi-Fi network configured (--wifi-ssid)")

    assert request(api.make_app(no_wifi), "POST", f"/ws.v1/wifi-key/{mac}") == (
        501,
        {"error": "this router has no Wi-Fi network configured (--wifi-ssid)"},
    )
