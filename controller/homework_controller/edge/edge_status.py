"""ws.v1's `health` and `counters`: the I/O edge's own state (the switch, sockets, threads, the lock)
beside the router's, read from the os-ken app under its lock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import CONFIG

if TYPE_CHECKING:
    from .ofapp import HomeworkController


def health(app: HomeworkController) -> dict:
    """switch_ready: the switch is connected and holds this controller's rules."""
    router = app.router
    return {
        "switch_ready": app.switch_ready,
        "devices": len(router.devices),
        "store": {"recovered": router.store.recovered, "write_errors": router.store.errors},
        "hwdb": {"address": CONFIG.hwdb, "rows_written": app.hwdb.written, "rows_dropped": app.hwdb.dropped},
        "resolver": app.dns.health(),
        "dhcp": app.dhcp_port.health(),
        "qos": {
            **{way: s.health() for way, s in app.shapers.items()},
            "app_feed": None
            if app.app_feed is None
            else {"subscribed": app.app_feed.subscribed, "restored": app.app_feed.restored.is_set()},
            "app_priorities": dict(sorted(router.priorities.chosen.items())),
            "demoted_devices": sorted(router.priorities.demoted),
        },
        "slice": None if app.slice_link is None else app.slice_link.health(),
    }


def counters(app: HomeworkController) -> dict:
    """What was dropped, refused or failed, and the lock's longest hold."""
    return dict(
        app.router.counters,
        packet_in_dropped=app.from_devices.dropped,
        packet_ins=app.packet_ins,
        dhcp_frames_malformed=app.dhcp_port.malformed,
        dhcp_before_switch=app.dhcp_before_switch,
        dhcp_socket_dropped=app.dhcp_port.dropped(),
        dhcp_answers_dropped=app.dhcp_port.answers.dropped,
        store_write_errors=app.router.store.errors,
        hwdb_rows_written=app.hwdb.written,
        hwdb_rows_dropped=app.hwdb.dropped,
        agent_rows_rejected=0 if app.app_feed is None else app.app_feed.rejected_reports.count,
        app_priority_rows_rejected=0 if app.app_feed is None else app.app_feed.rejected_priorities.count,
        **{f"flow_export_{name}": value for name, value in app.flow_export.stats().items()},
        lock_max_hold_ms=round(app.lock.max_hold_s * 1000, 1),
        lock_max_hold_by=app.lock.max_hold_by,
        # The same since the phase started (ws.v1 `counters-phase`; time.monotonic(), the machine's clock).
        lock_phase_started=round(app.lock.phase_started, 3),
        lock_phase_max_hold_ms=round(app.lock.phase_max_hold_s * 1000, 2),
        lock_phase_max_hold_by=app.lock.phase_max_hold_by,
        **app.dns.counters,
    )
