"""What every view works with, made once by `create_app` and reached through `current_app`:
the accounts, the controller and hwdb clients, the live hub, the rate limiters and the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flask import Flask, current_app

from .accounts import AccountStore
from .controller import ControllerClient
from .hwdb import Hwdb
from .latency import LatencyCheck
from .live import LiveHub
from .security import HeldBack, RateLimiter, SetupCode, SignInGuard
from .updates import UpdateSpool

KEY = "homework"


@dataclass
class Services:
    accounts: AccountStore
    controller: ControllerClient
    hwdb: Hwdb
    hub: LiveHub
    setup_code: SetupCode
    sign_ins: SignInGuard
    setup_guesses: RateLimiter
    pairing_guesses: RateLimiter
    latency_checks: RateLimiter
    latency_check: LatencyCheck | None
    update_spool: UpdateSpool | None
    agent_key_file: str | None
    dist_dir: str
    # Set by gate.install: what serving.py asks before it reads a request.
    held_back: HeldBack | None = None
    body_limit: Callable[[str, str, str], int] | None = None
    # Where the first-run page hands a choice to make this box an access point to the image's root job
    # (routes/accounts.py); None: the box is a router and nothing else.
    role_spool: str | None = None


def services(app: Flask | None = None) -> Services:
    """The application's services (the current one's inside a request)."""
    return (app or current_app).extensions[KEY]
