"""Firmware updates (owner): whether the router takes them here, starting one, and its pieces."""

from __future__ import annotations

from flask import Blueprint, request

from ..errors import ApiError
from ..gate import UPLOAD_PATH
from ..security import access
from ..services import services
from ..updates import CHUNK_BYTES, UpdateError
from .common import body

bp = Blueprint("updates", __name__)

UPDATES_UNCONFIGURED = (
    "Updates are installed from the router's console on this system "
    "(homework-update); the web UI has no installer to hand them to."
)


@bp.get("/api/update")
@access("owner")
def update_status():
    spool = services().update_spool
    if spool is None:
        return {"available": False, "message": UPDATES_UNCONFIGURED}
    return {"available": True, "max_bytes": spool.max_bytes, "chunk_bytes": CHUNK_BYTES, **spool.status()}


@bp.post("/api/update")
@access("owner")
def start_update():
    _update_call(lambda spool: spool.start(body().get("size")))
    return update_status(), 201


@bp.put(UPLOAD_PATH)
@access("owner")
def upload_update_piece():
    if request.mimetype != "application/octet-stream":
        raise ApiError(415, "Send the update bundle itself (application/octet-stream).", code="update-type")
    offset = request.args.get("offset", type=int)
    if offset is None or offset < 0:
        raise ApiError(400, "Say where this piece goes (?offset=N).", code="update-piece")
    # A piece is far larger than any other request this API takes.
    request.max_content_length = CHUNK_BYTES
    _update_call(lambda spool: spool.receive(offset, request.content_length, lambda: request.stream))
    return update_status()


def _update_call(call) -> None:
    spool = services().update_spool
    if spool is None:
        raise ApiError(501, UPDATES_UNCONFIGURED, code="updates-unconfigured")
    try:
        call(spool)
    except UpdateError as exc:
        raise ApiError(exc.status, str(exc), code=exc.code, **exc.extra) from None
