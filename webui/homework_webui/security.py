"""Secrets on disk, rate limiting, and the access declarations every view must carry."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import tempfile
import threading
import time
from collections import deque
from urllib.parse import urlsplit

LOG = logging.getLogger(__name__)


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write-to-temp, fsync, rename: a crash leaves the old file or the new one, never half."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_or_create_secret(state_dir: str) -> bytes:
    path = os.path.join(state_dir, "session_secret")
    try:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) >= 32:
            return data
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(32)
    write_atomic(path, data)
    return data


class RateLimiter:
    """At most `limit` attempts per key in `window` seconds.

    Attempts are charged before the slow check they guard (a password hash), so a burst of
    concurrent requests cannot slip past the count; a success refunds or clears its charge."""

    def __init__(self, limit: int, window: float = 300.0):
        self.limit, self.window = limit, window
        self._attempts: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._attempts.get(key) or deque()
        while q and q[0] < now - self.window:
            q.popleft()
        return q

    def count(self, key: str) -> int:
        with self._lock:
            return len(self._recent(key, time.monotonic()))

    def retry_after(self, key: str) -> int:
        """Seconds to wait before the next attempt; 0 if allowed now."""
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            if len(q) < self.limit:
                return 0
            return int(q[-self.limit] + self.window - now) + 1

    def charge(self, key: str) -> None:
        with self._lock:
            self._charge(key, time.monotonic())

    def take(self, key: str) -> int:
        """Charge an attempt if one is allowed now, as one step (concurrent requests cannot all
        see room for one more): 0 if charged, else the seconds to wait."""
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            if len(q) >= self.limit:
                return int(q[-self.limit] + self.window - now) + 1
            self._charge(key, now)
            return 0

    def _charge(self, key: str, now: float) -> None:
        self._attempts.setdefault(key, deque()).append(now)
        if len(self._attempts) > 10000:  # bounded memory when many addresses try
            self._attempts.pop(next(iter(self._attempts)))

    def refund(self, key: str) -> None:
        with self._lock:
            q = self._attempts.get(key)
            if q:
                q.pop()

    def clear(self, key: str) -> None:
        with self._lock:
            self._attempts.pop(key, None)


class SignInGuard:
    """Wrong passwords are held back per device, so a guest's guesses cost only that guest.

    Guessing from many devices is held back per account too, but that limit applies only to
    devices that have themselves failed recently: a household device that has not failed
    is never locked out of its own account by someone else's failures."""

    def __init__(self, per_device: int = 5, per_account: int = 20, window: float = 300.0):
        self.devices = RateLimiter(per_device, window)
        self.accounts = RateLimiter(per_account, window)
        self._lock = threading.Lock()

    def take(self, device: str, username: str) -> int:
        """Charge an attempt if one is allowed now, as one step: 0 if charged, else the seconds
        to wait (see RateLimiter.take)."""
        with self._lock:
            wait = self.retry_after(device, username)
            if not wait:
                self.attempt(device, username)
            return wait

    def retry_after(self, device: str, username: str) -> int:
        wait = self.devices.retry_after(device)
        if not wait and self.devices.count(device):
            wait = self.accounts.retry_after(_account_key(username))
        return wait

    def attempt(self, device: str, username: str) -> None:
        self.devices.charge(device)
        self.accounts.charge(_account_key(username))

    def succeeded(self, device: str, username: str) -> None:
        self.devices.clear(device)
        # Only this attempt's charge: others' failures against the account still count.
        self.accounts.refund(_account_key(username))


class HeldBack:
    """Which requests come from a client already held back: a POST to one of these paths from
    an address its limiter refuses. Such a request gets 429 whatever it carries, so it is
    answered before any other work (see app._refuse_held_back and serving.HeldBackLane)."""

    def __init__(self, limiters: dict[str, RateLimiter]):
        self.limiters = limiters

    def wait(self, method: str, path: str, addr: str) -> int:
        """Seconds the client must wait; 0 if the request may go ahead."""
        limiter = self.limiters.get(path) if method == "POST" else None
        return limiter.retry_after(addr) if limiter else 0


def _account_key(username: str) -> str:
    return username.strip().lower()


# Codes people type: no look-alikes (0/O, 1/I/L).
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


def random_code(length: int) -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))


def normalise_code(typed: str) -> str:
    """What the person meant: case, spaces and dashes do not matter."""
    return "".join(typed.split()).replace("-", "").upper()


class SetupCode:
    """The one-time code that lets the household, and only it, create the first owner.

    It is read from `provisioned_path` when the firmware image provides one (printed on the
    router's label and console); otherwise generated once into `<state_dir>/setup-code`
    (0600), which the router's console and `make demo` show. It is spent once an owner exists."""

    GROUPS, GROUP_LENGTH = 3, 4

    def __init__(self, state_dir: str, provisioned_path: str | None = None):
        self.provisioned = bool(provisioned_path and os.path.exists(provisioned_path))
        self.path = provisioned_path if provisioned_path and self.provisioned else os.path.join(state_dir, "setup-code")

    def issue(self) -> None:
        """No owner yet: make sure there is a code, and say where (never the code itself)."""
        if not self.provisioned and not os.path.exists(self.path):
            code = random_code(self.GROUPS * self.GROUP_LENGTH)
            groups = [code[i : i + self.GROUP_LENGTH] for i in range(0, len(code), self.GROUP_LENGTH)]
            write_atomic(self.path, ("-".join(groups) + "\n").encode())
        LOG.warning("no owner yet: the first-run setup code is in %s", self.path)

    def matches(self, typed: str) -> bool:
        try:
            with open(self.path) as f:
                expected = normalise_code(f.read())
        except FileNotFoundError:
            return False
        return bool(expected) and hmac.compare_digest(normalise_code(typed).encode(), expected.encode())

    def spend(self) -> None:
        if not self.provisioned:  # a provisioned code is on a label: nothing to delete
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def host_name(host: str | None) -> str | None:
    """The name or address part of a Host header or origin (or a bare address), normalised;
    None if malformed."""
    try:
        return ipaddress.ip_address(host or "").compressed
    except ValueError:
        pass
    try:
        parts = urlsplit(host if host and "//" in host else f"//{host or ''}")
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        return None
    name = (parts.hostname or "").rstrip(".")
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        return name or None


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether the Origin header names this page: same scheme, name and port."""
    try:
        got, want = urlsplit(origin), urlsplit(f"{scheme}://{host}")
        default = {"http": 80, "https": 443}
        return (got.scheme, host_name(origin), got.port or default.get(got.scheme)) == (
            want.scheme,
            host_name(host),
            want.port or default.get(want.scheme),
        )
    except ValueError:
        return False


PUBLIC = "public"
SIGNED_IN = ("owner", "member", "kiosk")


def access(*roles: str):
    """Declare who may call a view. Views without a declaration are refused to everyone
    (see app.before_request), so a new endpoint cannot be exposed by forgetting this."""

    def mark(view):
        view.access = PUBLIC if roles == (PUBLIC,) else frozenset(roles)
        return view

    return mark


def is_loopback(addr: str | None) -> bool:
    try:
        return ipaddress.ip_address(addr or "").is_loopback
    except ValueError:
        return False
