"""The live stream (Server-Sent Events) every signed-in page keeps open."""

from __future__ import annotations

import json
import queue
import time

from flask import Blueprint, Response, g, request, session

from ..errors import ApiError
from ..security import SIGNED_IN, access
from ..services import services
from .common import seen

bp = Blueprint("events", __name__)

KEEPALIVE_SECONDS = 15.0


@bp.get("/api/events")
@access(*SIGNED_IN)
def events():
    svc = services()
    hub, accounts = svc.hub, svc.accounts
    role, sid = g.user["role"], session["sid"]
    client = hub.register(role, sid, g.user["id"])
    if client is None:
        raise ApiError(429, "too many live pages are open; close some and this one will reconnect", retry_after=5)
    first = [("health", hub.health), ("devices", seen(hub.devices()))]
    # waitress reads ahead on the connection, so it knows when the page has gone: the
    # stream's slot is given back within a second rather than at the next write.
    disconnected = request.environ.get("waitress.client_disconnected", lambda: False)

    def stream():
        yield "retry: 2000\n\n"
        for name, data in first:
            yield f"event: {name}\ndata: {json.dumps(data)}\n\n"
        next_keepalive = time.monotonic() + KEEPALIVE_SECONDS
        while not client.ended and not disconnected():
            try:
                message = client.queue.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() < next_keepalive:
                    continue
                # Sign-out and deletion end streams at once; this catches expiry.
                if accounts.session(sid) is None:
                    return
                next_keepalive = time.monotonic() + KEEPALIVE_SECONDS
                message = ": keepalive\n\n"
            if message is None:
                return
            yield message

    resp = Response(
        stream(), mimetype="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    # The server closes every response it was given, even one it never started to send.
    resp.call_on_close(lambda: hub.unregister(client))
    return resp
