import json
import os
import queue
import threading
import time

import pytest
from stack import HomeOnFakeSwitch, HwdbServer

from homework_webui.app import create_app
from homework_webui.live import StreamLimits
from homework_webui.services import services

OWNER = ("owner", "correct horse battery")


@pytest.fixture
def hwdb(tmp_path):
    server = HwdbServer(str(tmp_path / "hwdb.sqlite")).start()
    yield server
    server.stop()


@pytest.fixture
def controller(tmp_path, hwdb):
    """The controller's core behind its ws.v1, on the fake switch (stack.HomeOnFakeSwitch)."""
    ctl = HomeOnFakeSwitch(str(tmp_path / "controller"), hwdb.port).start()
    yield ctl
    ctl.stop()


@pytest.fixture
def app(tmp_path, controller, hwdb):
    app = create_app(
        str(tmp_path / "state"), controller.url, ("127.0.0.1", hwdb.port), dist_dir=str(tmp_path / "nodist")
    )
    yield app
    services(app).hub.stop()


def make_app(tmp_path, controller, hwdb, name="state", **kw):
    return create_app(
        str(tmp_path / name), controller.url, ("127.0.0.1", hwdb.port), dist_dir=str(tmp_path / "nodist"), **kw
    )


@pytest.fixture
def small_app(tmp_path, controller, hwdb):
    """Stream limits small enough to reach in a test."""
    app = make_app(tmp_path, controller, hwdb, stream_limits=StreamLimits(max_total=6, per_session=2, per_account=4))
    yield app
    services(app).hub.stop()


class Api:
    """A browser: keeps its cookie and sends the CSRF token the page would."""

    def __init__(self, app, ip="127.0.0.1"):
        self.client = app.test_client()
        self.ip = ip
        self.csrf = None
        self.username = None

    def session(self):
        r = self.client.get("/api/session", environ_base={"REMOTE_ADDR": self.ip})
        if r.status_code == 200:
            self.csrf = r.json["csrf_token"]
        return r

    def call(self, method, url, json=None, csrf=True, headers=None):
        headers = {**({"X-CSRF-Token": self.csrf} if csrf and self.csrf else {}), **(headers or {})}
        r = self.client.open(url, method=method, json=json, headers=headers, environ_base={"REMOTE_ADDR": self.ip})
        if r.is_json and isinstance(r.json, dict) and r.json.get("csrf_token"):
            self.csrf = r.json["csrf_token"]
        return r

    def get(self, url, **kw):
        return self.call("GET", url, **kw)

    def post(self, url, json=None, **kw):
        return self.call("POST", url, json if json is not None else {}, **kw)

    def put(self, url, json=None, **kw):
        return self.call("PUT", url, json if json is not None else {}, **kw)

    def delete(self, url, **kw):
        return self.call("DELETE", url, None, **kw)


def setup_code(app) -> str:
    """What the household reads from the router's console: the one-time setup code."""
    with open(services(app).setup_code.path) as f:
        return f.read().strip()


def setup_owner(app) -> Api:
    api = Api(app)
    api.session()
    r = api.post("/api/setup", {"username": OWNER[0], "password": OWNER[1], "setup_code": setup_code(app)})
    assert r.status_code == 201, r.json
    return api


def signed_in(app, role, owner_api=None) -> Api:
    """An Api signed in with `role`, creating the account through the owner."""
    owner_api = owner_api or setup_owner(app)
    if role == "owner":
        return owner_api
    api = Api(app)
    api.session()
    if role == "kiosk":
        code = owner_api.post("/api/pairing-codes").json["code"]
        assert api.post("/api/pair", {"code": code, "name": "Hall panel"}).status_code == 201
    else:
        name = f"{role}-{os.urandom(3).hex()}"
        assert (
            owner_api.post(
                "/api/accounts", {"username": name, "password": "member password 1", "role": role}
            ).status_code
            == 201
        )
        assert api.post("/api/login", {"username": name, "password": "member password 1"}).status_code == 200
        api.username = name
    return api


@pytest.fixture
def owner(app):
    return setup_owner(app)


STREAM_END = "<end of stream>"


def sse(api):
    """Start reading /api/events; returns a queue of (event, data), then (STREAM_END, None)."""
    r = api.client.get("/api/events", buffered=False, environ_base={"REMOTE_ADDR": api.ip})
    assert r.status_code == 200 and r.mimetype == "text/event-stream"
    out = queue.Queue()

    def pump():
        buf = ""
        for chunk in r.response:
            buf += chunk.decode() if isinstance(chunk, bytes) else chunk
            while "\n\n" in buf:
                block, buf = buf.split("\n\n", 1)
                fields = dict(
                    line.split(": ", 1) for line in block.splitlines() if not line.startswith(":") and ": " in line
                )
                if "event" in fields:
                    out.put((fields["event"], json.loads(fields["data"])))
        out.put((STREAM_END, None))

    threading.Thread(target=pump, daemon=True).start()
    return out


def wait_for(q, pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            ev, data = q.get(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            break
        if pred(ev, data):
            return data
    raise AssertionError("event not seen in time")
