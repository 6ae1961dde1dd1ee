"""Log lines formatted and written by a thread of their own, once a burst is over.

The controller logs under its lock (a household event as a DHCP answer goes out, say), where
formatting a line and writing it to stderr cost more than the rest of the answer. So a record is
only handed over there; every `GATHER_S` the writer thread formats and writes all that has come
(mostly after a burst: a hundred devices asking at once are answered within it), as hwdb_log
gathers rows. Each line keeps the time it was logged at; what is still waiting when
the interpreter exits is written then.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import threading
import time
from typing import TextIO

GATHER_S = 0.2
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _HandOver(logging.handlers.QueueHandler):
    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # formatted by the writer thread, not here (QueueHandler would format it now)


def configure(level: int | str, stream: TextIO) -> None:
    """Every logger's records go to `stream`, formatted and written by the writer thread."""
    # What FORMAT does not show is not gathered for each record either (the logging HOWTO's "Optimization"): the
    # caller's file and line (a walk up the stack), its thread and process. A storm's "event new-device" lines are
    # made on the DHCP path, where gathering those cost more than the rest of an answer's bookkeeping.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    records: queue.SimpleQueue = queue.SimpleQueue()
    out = logging.StreamHandler(stream)
    out.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=level, handlers=[_HandOver(records)], force=True)
    threading.Thread(target=_write, args=(records, out), name="log-writer", daemon=True).start()
    atexit.register(_write_waiting, records, out)


def _write(records: queue.SimpleQueue, out: logging.Handler) -> None:
    while True:
        time.sleep(GATHER_S)
        _write_waiting(records, out)


def _write_waiting(records: queue.SimpleQueue, out: logging.Handler) -> None:
    while True:
        try:
            out.handle(records.get_nowait())
        except queue.Empty:
            return
