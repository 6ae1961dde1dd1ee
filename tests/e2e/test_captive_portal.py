"""A device held back is told why (issue 23, test 3), with the real dhclient, curl and the router's own
resolver: option 114 in its lease, the captive portal's API, the OS probe by name sent to the portal, the
page with the same code as the Guest Board's API, and after a permit the real internet's 204."""

from __future__ import annotations

import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.request

from homenet import WEBUI_URL

PORTAL = "http://10.2.0.1/captive-portal"
API = f"{PORTAL}/api"
PROBE = "http://connectivitycheck.gstatic.com/generate_204"
OWNER = ("owner", "a long household passphrase")  # as the Guest Board's browser test makes it


def curl(home, name, url, *opts) -> tuple[str, str]:
    """(status and the redirect's target, body) of a device's plain GET, by name through its own DNS."""
    out = home.exec(name, "curl", "-sS", "-m", "5", "-w", "\n%{http_code} %{redirect_url}", *opts, url, check=False)
    body, _, status = out.stdout.rpartition("\n")
    return status.strip(), body


def captive_api(home, name) -> dict:
    status, body = curl(home, name, API, "-H", "Accept: application/captive+json")
    assert status.startswith("200"), (status, body)
    return json.loads(body)


def board_devices(home) -> list[dict]:
    """The Guest Board's own API (/api/devices) as a signed-in owner sees it, from the wall panel (loopback)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def call(method, path, body=None, csrf=None):
        req = urllib.request.Request(
            WEBUI_URL + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **({"X-CSRF-Token": csrf} if csrf else {})},
        )
        try:
            with opener.open(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    _, session = call("GET", "/api/session")
    user, password = OWNER
    status, answer = call("POST", "/api/login", {"username": user, "password": password}, session["csrf_token"])
    if status != 200:  # a fresh home: the owner is made with the setup code, as on first run
        status, answer = call(
            "POST",
            "/api/setup",
            {"setup_code": home.setup_code(), "username": user, "password": password},
            session["csrf_token"],
        )
    assert status in (200, 201), answer
    status, listing = call("GET", "/api/devices")
    assert status == 200, listing
    return listing["devices"]


def wait_for(what, check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def test_a_pending_device_is_sent_to_the_portal_and_once_let_in_gets_the_internet(home):
    home.add("guest")
    home.add("family")
    home.dhcp("guest")
    # Its first DNS query, the probe an OS sends as its lease is bound, is answered at once (one try, one
    # second): before, its ACK went ahead of the portal's rules and the probe was lost (the resolver's retry
    # came five seconds later).
    first = home.exec("guest", "dig", "+time=1", "+tries=1", "+short", "connectivitycheck.gstatic.com", check=False)
    assert first.stdout.split() == ["10.2.0.1"], first
    home.dhcp("family")
    home.permit("family")
    home.dhcp("family")
    mac = home.mac("guest")

    # Its real dhclient was told where the portal's API is (RFC 8910's option 114, "default-url" to ISC).
    lease = (home.stations.state_dir("guest") / "dhclient.leases").read_text()
    assert re.search(r'option default-url "http://10\.2\.0\.1/captive-portal/api";', lease), lease

    # The API says it is held back, and where the page is.
    assert captive_api(home, "guest") == {"captive": True, "user-portal-url": PORTAL}
    # Android's probe, by name through the router's DNS, gets the portal, not 204.
    status, _ = curl(home, "guest", PROBE)
    assert status == f"302 {PORTAL}", status
    # Nothing else: the internet by name (refused by its DNS) or by address.
    assert home.fetch("guest", "http://www.example.test/", timeout=3) == "000"
    assert home.fetch("guest", "http://198.51.100.80/", timeout=3) == "000"
    # Positive control: the permitted device's probe reaches the real internet's 204.
    assert curl(home, "family", PROBE)[0] == "204"

    # The page says, in plain words, with the same code as the Guest Board's card for that device.
    status, page = curl(home, "guest", PORTAL)
    [card] = [d for d in board_devices(home) if d["mac"] == mac]
    assert status.startswith("200") and card["state"] == "pending"
    shown = f'<strong class="code">{card["portal_code"]}</strong>'
    assert f"waiting for someone at home to let it in — show them this code: {shown}" in page
    assert re.fullmatch(r"[A-Z0-9]{2}-[A-Z0-9]{2}", card["portal_code"])

    # Let in: the API says so, and the probe gets the internet's own 204 (the router's answer for the
    # probe name lived a second).
    permitted_at = time.monotonic()
    home.permit("guest")
    assert captive_api(home, "guest") == {"captive": False}
    api_s = time.monotonic() - permitted_at
    wait_for("the probe's 204", lambda: curl(home, "guest", PROBE)[0] == "204", timeout=5)
    print(
        f"after the permit: the API said captive: false at {api_s:.2f} s, the probe got 204 at "
        f"{time.monotonic() - permitted_at:.2f} s"
    )
    assert home.fetch("guest", "http://www.example.test/") == "200"


def test_a_paused_device_is_told_it_is_paused(home):
    home.add("kid")
    home.dhcp("kid")
    home.permit("kid")
    home.dhcp("kid")
    mac = home.mac("kid")
    assert home.api("POST", f"pause/{mac}")[0] == 200
    assert captive_api(home, "kid") == {"captive": True, "user-portal-url": PORTAL}
    status, page = curl(home, "kid", PORTAL)
    assert status.startswith("200") and "Paused until someone at home resumes it." in page, page
    assert curl(home, "kid", PROBE)[0] == f"302 {PORTAL}"
    assert home.fetch("kid", "http://www.example.test/", timeout=3) == "000"
    # Resumed: online again, and the page says so.
    assert home.api("POST", f"resume/{mac}")[0] == 200
    assert captive_api(home, "kid") == {"captive": False}
    assert "You are online" in curl(home, "kid", PORTAL)[1]
    wait_for("the probe's 204", lambda: curl(home, "kid", PROBE)[0] == "204", timeout=5)
