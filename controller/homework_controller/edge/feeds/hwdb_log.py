"""What the router writes to hwdb: batched, off the packet path, never blocking it.

Rows are queued by the controller's threads and sent by one writer thread as multi-row
inserts (one request per table every BATCH_SECONDS). If hwdb is down, rows are dropped and
counted (the router keeps routing), and the writer logs that once until it is back.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

LOG = logging.getLogger(__name__)

BATCH_SECONDS = 0.2
QUEUE_LIMIT = 20000


def literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def insert_statement(table: str, rows: list[tuple]) -> str:
    return f"insert into {table} values " + ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)


class HwdbLog:
    def __init__(self, address: str | None, client_factory=None):
        self.address = address
        # A SimpleQueue: putting a row costs the packet path far less than a Queue's locks and conditions.
        self.rows: queue.SimpleQueue = queue.SimpleQueue()
        self.dropped = 0
        self.written = 0
        self._client_factory = client_factory
        self._client = None
        self._healthy = True
        if address:
            threading.Thread(target=self._run, name="hwdb-writer", daemon=True).start()

    def write(self, table: str, row: tuple) -> None:
        if not self.address:
            return
        if self.rows.qsize() >= QUEUE_LIMIT:
            self.dropped += 1
            return
        self.rows.put_nowait((table, row))

    def _connect(self):
        if self._client is None:
            if self._client_factory is None:
                from hwdb_client import HwdbClient  # imported late: a router without hwdb never needs it

                assert self.address is not None, "nothing is written when no hwdb is configured"
                host, port = self.address.rsplit(":", 1)
                self._client_factory = lambda: HwdbClient(host, int(port), timeout=2.0)
            self._client = self._client_factory()
        return self._client

    def _run(self):
        while True:
            first = self.rows.get()
            time.sleep(BATCH_SECONDS)  # let a burst (a DHCP storm, a stats poll) gather
            batch: dict[str, list[tuple]] = {first[0]: [first[1]]}
            while True:
                try:
                    table, row = self.rows.get_nowait()
                except queue.Empty:
                    break
                batch.setdefault(table, []).append(row)
            for table, rows in batch.items():
                self._send(table, rows)

    def _send(self, table: str, rows: list[tuple]) -> None:
        try:
            self._connect().query(insert_statement(table, rows))
        except Exception as exc:  # hwdb down, timed out, or refused the rows
            self.dropped += len(rows)
            self._client = None
            if self._healthy:
                LOG.warning("hwdb at %s unavailable (%s); dropping rows until it is back", self.address, exc)
            self._healthy = False
            return
        self.written += len(rows)
        if not self._healthy:
            LOG.info("hwdb at %s is back", self.address)
        self._healthy = True
