"""The Flask application factory: the services, the request gate and the API's blueprints."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import timedelta

from flask import Flask

from . import errors, gate
from .accounts import AccountStore
from .controller import PANEL, ControllerClient
from .hwdb import Hwdb
from .latency import LatencyCheck
from .live import LiveHub, StreamLimits
from .routes import BLUEPRINTS
from .routes.latency import LATENCY_CHECKS_PER_ACCOUNT
from .security import RateLimiter, SetupCode, SignInGuard, load_or_create_secret
from .services import KEY, Services
from .updates import UpdateSpool

DEFAULT_DIST = os.path.join(os.path.dirname(__file__), "..", "frontend", "dist")


def create_app(
    state_dir: str,
    controller_url: str = "http://127.0.0.1:8081",
    hwdb_addr: tuple = ("127.0.0.1", 987),
    dist_dir: str = DEFAULT_DIST,
    cookie_secure: bool = False,
    start_live: bool = True,
    hostnames: Iterable[str] = (),
    setup_code_file: str | None = None,
    stream_limits: StreamLimits = StreamLimits(),
    latency_check: LatencyCheck | None = None,
    update_spool: UpdateSpool | None = None,
    agent_key_file: str | None = None,
    role_spool: str | None = None,
) -> Flask:
    """`hostnames`: the names and addresses the router answers to besides loopback (its
    listen addresses, names like router.home). `setup_code_file`: a setup code provisioned
    by the firmware image, if any (see security.SetupCode). `latency_check`: the
    "latency under load" check, when a test server is configured. `update_spool`: where
    uploaded firmware updates go to the router's installer (updates.py), on the image.
    `agent_key_file`: the household's agent key, made by hwdb (read on each request, as it
    may appear after the UI starts). `role_spool`: where the first-run page hands the household's
    choice to make the box an access point of their router to the image (routes/accounts.py)."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o700)
    app = Flask(__name__, static_folder=None)
    app.config.update(
        SECRET_KEY=load_or_create_secret(state_dir),
        SESSION_COOKIE_NAME="hw_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=cookie_secure,
        # The cookie may live a year (a paired kiosk); the server-side session row decides
        # how long a sign-in really lasts (accounts.SESSION_TTL).
        PERMANENT_SESSION_LIFETIME=timedelta(days=365),
        MAX_CONTENT_LENGTH=gate.SMALL_BODY_BYTES,
        JSON_SORT_KEYS=False,
    )
    accounts = AccountStore(os.path.join(state_dir, "accounts.sqlite"))
    setup_code = SetupCode(state_dir, setup_code_file)
    setup_code.issue() if accounts.needs_setup() else setup_code.spend()
    controller, hwdb = ControllerClient(controller_url), Hwdb(*hwdb_addr)
    # The live board shows every signed-in role the devices, and the gate asks it about any LAN device
    # before anyone signs in: it reads the controller as the wall panel, the least role that sees them;
    # each device's status says what every role may do to it, and each page is given its own (`seen_by`).
    hub = LiveHub(
        controller.acting_as(PANEL),
        hwdb,
        limits=stream_limits,
        with_owners=accounts.with_owners,
        satellites=accounts.satellites,
    )
    svc = Services(
        accounts, controller, hwdb, hub, setup_code, SignInGuard(), RateLimiter(5), RateLimiter(5),
        RateLimiter(LATENCY_CHECKS_PER_ACCOUNT, 600), latency_check, update_spool, agent_key_file, dist_dir,
    )  # fmt: skip
    svc.role_spool = role_spool or None
    app.extensions[KEY] = svc
    gate.install(app, svc, hostnames)
    errors.register_handlers(app, controller_down=lambda: hub._set_health("controller", False))
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    if start_live:
        hub.start()
    return app
