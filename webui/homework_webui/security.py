"""Secrets on disk, rate limiting, and the access declarations every view must carry."""
from __future__ import annotations

import ipaddress
import os
import secrets
import tempfile
import threading
import time
from collections import deque


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
    """At most `limit` failures per key in `window` seconds; a success clears the key."""

    def __init__(self, limit: int = 5, window: float = 300.0):
        self.limit, self.window = limit, window
        self._fails: dict[str, deque] = {}
        self._lock = threading.Lock()

    def retry_after(self, key: str) -> int:
        """Seconds to wait before the next attempt; 0 if allowed now."""
        now = time.monotonic()
        with self._lock:
            q = self._fails.get(key)
            if not q:
                return 0
            while q and q[0] < now - self.window:
                q.popleft()
            if len(q) < self.limit:
                return 0
            return int(q[0] + self.window - now) + 1

    def fail(self, key: str) -> None:
        with self._lock:
            self._fails.setdefault(key, deque()).append(time.monotonic())
            if len(self._fails) > 10000:  # bounded memory when many addresses try
                self._fails.pop(next(iter(self._fails)))

    def succeed(self, key: str) -> None:
        with self._lock:
            self._fails.pop(key, None)


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
