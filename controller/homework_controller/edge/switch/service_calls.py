"""What the controller's services beside the switch ask of the router, from their own threads: the resolver's
verdicts and what its answers teach, the flow collector's totals, hwdb's feed of app priorities and agents'
reports, the slice link's snapshots. Each parses before it calls in: only decisions run under the lock, a few
at a hold where there are many.
"""

from __future__ import annotations

from collections.abc import Callable

from ... import flows
from ...api.server import TimedLock
from ...concerns.agent_reports import AgentReport
from ...core.router import HomeRouter
from ..feeds import hwdb_feed

# Connection directions merged per hold of the lock: 500 take ~1.5 ms alone, but the lock's longest hold
# under the hostile bench was 2,000 of them (41-51 ms on the loaded 2-CPU machine): every other device waits.
EXPORT_MERGE_CHUNK = 500


class ServiceCalls:
    """apply: how the router's effects are carried out (`FairServer.apply`)."""

    def __init__(self, router: HomeRouter, lock: TimedLock, apply: Callable[..., None]):
        self.router, self.lock, self.apply = router, lock, apply

    # ---- the resolver's threads

    def dns_verdict(self, client_ip: str, query):
        with self.lock:
            return self.router.dns_query(client_ip, query)

    def dns_learn(self, learnt, client_ip: str | None = None) -> None:
        with self.lock:
            self.apply(self.router.dns_answer(learnt, client_ip), at_once=True)

    # ---- the flow collector's thread

    def on_exported(self, totals: dict[flows.FiveTuple, list[int]]) -> None:
        """A second's records, summed per connection direction in the collector's process, merged under the lock
        a few hundred at a time (a flood's second is about 6,000)."""
        items = list(totals.items())
        for start in range(0, len(items), EXPORT_MERGE_CHUNK):
            with self.lock:
                self.router.flow_events.on_flow_export(dict(items[start : start + EXPORT_MERGE_CHUNK]))

    # ---- application priorities and agents' reports (hwdb's feed)

    def on_priorities(self, priorities: dict[str, str]) -> None:
        with self.lock:
            self.apply(self.router.set_app_priorities(priorities))

    def on_agent_reports(self, reports: list[AgentReport]) -> None:
        for part in hwdb_feed.in_turns(reports):
            with self.lock:
                self.apply(self.router.flow_events.agent_reported(part))

    # ---- the slice link (the ISP's slicer)

    def learnt_connections(self) -> list:
        """The slice link's snapshot: taken under the lock, turned into rules and sent outside it."""
        with self.lock:
            return self.router.learnt_connections()

    def slice_ahead(self) -> list:
        """What the slice marks ahead (ports, named addresses), taken under the lock like the snapshot."""
        with self.lock:
            return self.router.priorities.ahead.slice_ahead()

    def delegated_prefix(self):
        """The prefix the ISP delegated now (the slice's IPv6 rules name it), or None (no IPv6, or none yet)."""
        with self.lock:
            prefix, _ = self.router.ipv6.delegation()
            return prefix
