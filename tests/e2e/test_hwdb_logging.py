"""hwdb as the household's tools see it: the router's leases, flows, links and events."""
from __future__ import annotations

import json
import signal
import os
import time

from conftest import HOMENET, INTERNET_IP, REPO, RUN, sh

HWDB = str(REPO / "hwdb" / "target" / "release" / "hwdb")


def query(text):
    return json.loads(sh(HOMENET, "router", "exec", "--", "hwdb", "query", "--json", text).stdout)


def rows(text):
    result = query(text)
    names = [c["name"] for c in result["columns"]]
    return [dict(zip(names, row)) for row in result["rows"]]


def wait_for_rows(text, predicate, timeout=15):
    deadline = time.time() + timeout
    found = []
    while time.time() < deadline:
        found = [r for r in rows(text) if predicate(r)]
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no row of `{text}` matched within {timeout}s; last rows: {rows(text)[-5:]}")


def test_a_devices_lease_traffic_link_and_arrival_are_in_hwdb(home):
    mac = home.add("reader")
    sh(HOMENET, "client", "radio", "reader", "--rssi", "-67", "--retries", "2")
    ip = home.dhcp("reader").split("/")[0]
    [granted] = wait_for_rows("select * from Leases [range 1 minutes]", lambda r: r["mac"] == mac)
    assert (granted["ip"], granted["hostname"], granted["action"], granted["state"]) == \
        (ip, "reader", "granted", "pending")
    [event] = wait_for_rows("select * from Events [range 1 minutes]", lambda r: r["mac"] == mac)
    assert event["kind"] == "new-device" and "reader" in event["message"]
    home.permit("reader")
    assert home.fetch("reader").stdout == "200"
    flows = wait_for_rows("select * from Flows [range 1 minutes]",
                          lambda r: r["saddr"] == ip and r["daddr"] == INTERNET_IP and r["dport"] == 80)
    assert sum(f["bytes"] for f in flows) > 0
    links = wait_for_rows("select * from Links [range 10 seconds]", lambda r: r["mac"] == mac)
    assert links[-1]["rssi"] == -67 and sum(l["retries"] for l in links) > 0


def test_hwdb_killed_comes_back_with_its_persistent_tables_and_the_router_keeps_logging(home):
    sh(HOMENET, "router", "exec", "--", "hwdb", "query", "insert into AppPriority values ('video-call', 'high')")
    pid = int((RUN / "hwdb.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    # The router keeps routing while its memory is gone.
    mac = home.add("latecomer")
    home.dhcp("latecomer")
    sh(HOMENET, "restart", "hwdb")
    assert {"app": "video-call", "priority": "high"}.items() <= rows("select * from AppPriority")[-1].items()
    home.permit("latecomer")
    home.dhcp("latecomer")  # a renewal after the restart is logged again
    wait_for_rows("select * from Leases [range 1 minutes]", lambda r: r["mac"] == mac and r["state"] == "permitted")
