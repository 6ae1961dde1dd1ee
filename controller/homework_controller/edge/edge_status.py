"""ws.v1's `health` and `counters`: the I/O edge's own state (the switch, sockets, threads, the lock)
beside the router's, read from the os-ken app and the edge's parts (`assembly.Edge`) under the lock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import CONFIG

if TYPE_CHECKING:
    from .ofapp import HomeworkController


def health(app: HomeworkController) -> dict:
    """switch_ready: the switch is connected and holds this controller's rules."""
    router, edge = app.router, app.edge
    return {
        "switch_ready": app.switch_ready,
        "devices": len(router.devices),
        "store": {"recovered": router.store.recovered, "write_errors": router.store.errors},
        "hwdb": {"address": CONFIG.hwdb, "rows_written": edge.hwdb.written, "rows_dropped": edge.hwdb.dropped},
        "resolver": edge.dns.health(),
        "dhcp": edge.dhcp_port.health(),
        "qos": {
            **{way: s.health() for way, s in edge.shapers.items()},
            "app_feed": None
            if edge.app_feed is None
            else {"subscribed": edge.app_feed.subscribed, "restored": edge.app_feed.restored.is_set()},
            "app_priorities": dict(sorted(router.priorities.chosen.items())),
            "demoted_devices": sorted(router.priorities.demoted),
        },
        "slice": None if edge.slice_link is None else edge.slice_link.health(),
    }


def counters(app: HomeworkController) -> dict:
    """What was dropped, refused or failed, and the lock's longest hold."""
    edge = app.edge
    return dict(
        app.router.counters,
        packet_in_dropped=edge.fair.from_devices.dropped,
        packet_ins=app.packet_ins,
        dhcp_frames_malformed=edge.dhcp_port.malformed,
        dhcp_before_switch=edge.fair.dhcp_before_switch,
        dhcp_socket_dropped=edge.dhcp_port.dropped(),
        dhcp_answers_dropped=edge.dhcp_port.answers.dropped,
        store_write_errors=app.router.store.errors,
        hwdb_rows_written=edge.hwdb.written,
        hwdb_rows_dropped=edge.hwdb.dropped,
        agent_rows_rejected=0 if edge.app_feed is None else edge.app_feed.rejected_reports.count,
        app_priority_rows_rejected=0 if edge.app_feed is None else edge.app_feed.rejected_priorities.count,
        **{f"flow_export_{name}": value for name, value in edge.flow_export.stats().items()},
        lock_max_hold_ms=round(app.lock.max_hold_s * 1000, 1),
        lock_max_hold_by=app.lock.max_hold_by,
        # The same since the phase started (ws.v1 `counters-phase`; time.monotonic(), the machine's clock).
        lock_phase_started=round(app.lock.phase_started, 3),
        lock_phase_max_hold_ms=round(app.lock.phase_max_hold_s * 1000, 2),
        lock_phase_max_hold_by=app.lock.phase_max_hold_by,
        **edge.dns.counters,
    )
