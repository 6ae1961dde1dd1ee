"""Log lines leave the caller at once and are written by the writer thread, after a burst, or at exit."""

import subprocess
import sys

SCRIPT = """
import logging, sys, time
from homework_controller.edge.feeds import log_writer
log_writer.configure("INFO", sys.stdout)
logging.getLogger("dhcp").info("answered %s", "02:00:00:00:00:aa")
print("caller went on", flush=True)
time.sleep(log_writer.GATHER_S * 3)
logging.getLogger("dhcp").debug("below the level")
logging.getLogger("dhcp").warning("exiting")
"""


def test_a_line_is_written_by_the_writer_thread_and_what_waits_at_exit_is_written_too():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out[0] == "caller went on"  # the caller only handed the line over
    assert out[1].endswith(" INFO dhcp: answered 02:00:00:00:00:aa")  # then the writer wrote it
    assert out[2].endswith(" WARNING dhcp: exiting")  # logged just before the exit, still written
    assert len(out) == 3  # the level still holds: no DEBUG line
