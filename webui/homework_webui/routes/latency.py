"""The "latency under load" check: its recent results with the router's shaper, and running one."""

from __future__ import annotations

import time

from flask import Blueprint, g

from ..controller import ControllerDownError, ControllerError
from ..errors import ApiError
from ..hwdb import HwdbError, quote
from ..latency import CheckRunning, TargetError
from ..live import APP_ROLES
from ..security import access
from ..services import services
from .common import limited

bp = Blueprint("latency", __name__)

LATENCY_UNCONFIGURED = (
    "The connection check is not configured on this router: it needs a test server "
    "(the web UI's --latency-target option)."
)
# A check loads the home's uplink for its duration: a member's page (or script) looping on it
# gets this many per account in ten minutes; one runs at a time router-wide.
LATENCY_RUNNING = "Someone in the home is already running a connection check; try again when it has finished."
LATENCY_CHECKS_PER_ACCOUNT = 3
LATENCY_HISTORY = 5
LATENCY_COLUMNS = ("grade", "idle_ms", "loaded_ms", "loaded_p90_ms", "added_ms", "down_kbit", "up_kbit", "loss_pct")


@bp.get("/api/latency-check")
@access(*APP_ROLES)
def latency_history():
    svc = services()
    rows = svc.hwdb.query(
        f"select tstamp, {', '.join(LATENCY_COLUMNS)} from LatencyChecks " f"[rows {LATENCY_HISTORY}]"
    ).rows
    results = [{"time": r.pop("tstamp") / 1e9, **r} for r in reversed(rows)]
    check = svc.latency_check
    state = {"configured": check is not None, "results": results, "qos": _shaper()}
    if check is None:
        return {**state, "message": LATENCY_UNCONFIGURED}
    return {**state, "running": check.running, "duration_s": check.duration, "target": check.target.address}


@bp.post("/api/latency-check")
@access(*APP_ROLES)
def run_latency_check():
    svc = services()
    check, checks = svc.latency_check, svc.latency_checks
    if check is None:
        raise ApiError(501, LATENCY_UNCONFIGURED, code="latency-unconfigured")
    key = str(g.user["id"])
    limited(checks.retry_after(key))
    if check.running:
        raise ApiError(409, LATENCY_RUNNING, code="latency-running")
    checks.charge(key)
    try:
        result = check.run()
    except CheckRunning:
        checks.refund(key)
        raise ApiError(409, LATENCY_RUNNING, code="latency-running") from None
    except TargetError as exc:
        raise ApiError(502, f"The connection check could not run: {exc}.", code="latency-target") from None
    try:
        svc.hwdb.query(
            "insert into LatencyChecks values ({}, {}, {}, {}, {}, {}, {}, {})".format(
                quote(result["grade"]),
                *(float(result[c]) for c in LATENCY_COLUMNS[1:5]),
                int(result["down_kbit"]),
                int(result["up_kbit"]),
                float(result["loss_pct"]),
            )
        )
        recorded = True
    except HwdbError:
        recorded = False  # the household still sees the result it waited for
    return {"result": {"time": time.time(), **result}, "recorded": recorded}


def _shaper() -> dict | None:
    """Which queue discipline the router's shaper uses, when the controller says."""
    try:
        qos = services().controller.health().get("qos")
    except (ControllerDownError, ControllerError, AttributeError):
        return None
    # The controller reports each shaped link: {"uplink": {"shaped_kbit", "leaf_qdisc", ...}, "downlink": ...}
    reported = [(way, qos.get(way)) for way in ("uplink", "downlink")] if isinstance(qos, dict) else []
    links: dict[str, dict] = {
        way: link
        for way, link in reported
        if isinstance(link, dict) and isinstance(link.get("leaf_qdisc"), str) and link["leaf_qdisc"]
    }
    if not links:
        return None
    rates = {
        f"{way}_kbit": link["shaped_kbit"]
        for way, link in links.items()
        if isinstance(link.get("shaped_kbit"), int) and not isinstance(link["shaped_kbit"], bool)
    }
    return {"leaf": next(iter(links.values()))["leaf_qdisc"][:32], **rates}
