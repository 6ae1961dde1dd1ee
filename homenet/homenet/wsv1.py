"""A client of the router controller's control API, ws.v1 (HTTP + JSON on 127.0.0.1:8081), as the
household's tools call it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from .services import HomenetError

API = "http://127.0.0.1:8081/ws.v1"


class WsV1Client:
    def __init__(self, base: str = API, timeout: float = 5):
        self.base, self.timeout = base, timeout

    def call(self, verb: str, path: str, timeout: float | None = None) -> tuple[int, Any]:
        """One call, e.g. ("GET", "health"): (HTTP status, JSON body), errors included."""
        req = urllib.request.Request(f"{self.base}/{path}", method=verb)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout if timeout is None else timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def decide(self, method: str, mac: str) -> dict:
        """permit, deny, whitelist or blacklist a device by its MAC; the body, or HomenetError."""
        status, body = self.call("POST", f"{method}/{mac}")
        if status != 200:
            raise HomenetError(f"{method} {mac}: {status} {body}")
        return body

    def permit(self, mac: str) -> dict:
        return self.decide("permit", mac)

    def deny(self, mac: str) -> dict:
        return self.decide("deny", mac)
