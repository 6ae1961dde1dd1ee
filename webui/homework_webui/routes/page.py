"""The single-page app itself (its HTML, hashed assets and icon) and the public health answer."""

from __future__ import annotations

import os

from flask import Blueprint, request, send_from_directory

from ..errors import plain
from ..security import PUBLIC, access
from ..services import services

bp = Blueprint("page", __name__)


@bp.get("/")
@access(PUBLIC)
def index():
    dist_dir = services().dist_dir
    if not os.path.exists(os.path.join(dist_dir, "index.html")):
        return plain(503, "The web UI has not been built: run `make -C webui build`.")
    resp = send_from_directory(dist_dir, "index.html")
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/assets/<path:name>")
@access(PUBLIC)
def assets(name):
    resp = send_from_directory(os.path.join(services().dist_dir, "assets"), name)
    # Vite puts a content hash in every asset name, so they never change.
    resp.headers["Cache-Control"] = "public, max-age=31536000, immutable"
    return resp


@bp.get("/favicon.svg")
@access(PUBLIC)
def favicon():
    return send_from_directory(services().dist_dir, "favicon.svg")


# What makes the page an installable web app: its manifest and icons (from `frontend/public`).
@bp.get("/manifest.webmanifest")
@bp.get("/icon-192.png")
@bp.get("/icon-512.png")
@access(PUBLIC)
def web_app_file():
    name = request.path.lstrip("/")
    resp = send_from_directory(services().dist_dir, name)
    if name.endswith(".webmanifest"):
        resp.mimetype = "application/manifest+json"
    return resp


@bp.get("/sw.js")
@access(PUBLIC)
def service_worker():
    # At the root, so its scope is the whole page; checked for a new version on every load.
    resp = send_from_directory(services().dist_dir, "sw.js", mimetype="text/javascript")
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/api/health")
@access(PUBLIC)
def health():
    return {"health": services().hub.health}
