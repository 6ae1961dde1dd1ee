"""Applications: each app's usage over the last hour or day, its priority (the household's
choice over the router's), overload alerts, and setting a priority."""

from __future__ import annotations

import time

from flask import Blueprint, request

from ..controller import ControllerDownError, ControllerError
from ..errors import ApiError
from ..hwdb import APP_RE, PRIORITIES
from ..live import APP_ROLES, OVERLOAD_KIND
from ..security import access
from ..services import services
from .common import body

bp = Blueprint("apps", __name__)

APP_RANGES = {"hour": (3600, 60), "day": (86400, 96)}


@bp.get("/api/apps")
@access(*APP_ROLES)
def list_apps():
    hwdb = services().hwdb
    span = request.args.get("range", "hour")
    if span not in APP_RANGES:
        raise ApiError(400, f"range is one of {', '.join(APP_RANGES)}")
    seconds, nbuckets = APP_RANGES[span]
    width = seconds / nbuckets
    now = time.time()
    start = now - seconds
    series: dict[str, list[int]] = {}
    for tstamp, app_name, nbytes in hwdb.query(
        f"select tstamp, app, bytes from AppTimeseries [range {seconds} seconds]"
    ).tuples:
        idx = min(nbuckets - 1, max(0, int((tstamp / 1e9 - start) / width)))
        series.setdefault(app_name, [0] * nbuckets)[idx] += nbytes
    current = {
        r["app"]: r["b"]
        for r in hwdb.query("select app, sum(bytes) as b from AppTimeseries [range 10 seconds] group by app").rows
    }
    priorities = {**_router_priorities(), **hwdb.priorities()}  # the household's own choice wins
    alerts = [
        {"time": r["tstamp"] / 1e9, "kind": r["kind"], "message": r["message"]}
        for r in hwdb.query(
            f"select tstamp, kind, message from Events [range 1 hours] " f"where kind = '{OVERLOAD_KIND}'"
        ).rows
    ]
    names = set(series) | set(priorities)
    apps = [
        {
            "app": a,
            "priority": priorities.get(a, "default"),
            "bytes_per_s": round(current.get(a, 0) / 10),
            "total_bytes": sum(series.get(a, [])),
            "series": series.get(a, [0] * nbuckets),
        }
        for a in names
    ]
    apps.sort(key=lambda a: (-a["total_bytes"], a["app"].lower()))
    return {"range": span, "start": start, "bucket_seconds": width, "apps": apps, "alerts": alerts[-5:]}


def _router_priorities() -> dict[str, str]:
    """What the router's app table gives each app until the household chooses (a call is High)."""
    try:
        listed = services().controller.apps()
    except (ControllerDownError, ControllerError):
        return {}
    return {
        a["app"]: a["priority"]
        for a in listed
        if isinstance(a, dict)
        and isinstance(a.get("app"), str)
        and APP_RE.match(a["app"])
        and a.get("priority") in PRIORITIES
    }


@bp.put("/api/apps/<path:app_name>/priority")
@access(*APP_ROLES)
def set_priority(app_name):
    if not APP_RE.match(app_name):
        raise ApiError(400, "not an application name")
    priority = body().get("priority")
    if priority not in PRIORITIES:
        raise ApiError(400, f"priority is one of {', '.join(PRIORITIES)}")
    services().hwdb.set_priority(app_name, priority)
    return {"app": app_name, "priority": priority}
