"""hwdb as the household's tools see it: the router's leases, flows, links and events."""

from __future__ import annotations

import ipaddress
import os
import signal

from homenet import INTERNET_IP, WaitTimeout, wait_until


def rows_matching(home, query, predicate):
    return [r for r in home.hwdb(query) if predicate(r)]


def test_a_devices_lease_traffic_link_and_arrival_are_in_hwdb(home):
    mac = home.add("reader", rssi=-67, retries=2)
    address = ipaddress.ip_interface(home.dhcp("reader"))
    ip = str(address.ip)
    # It uses its address at once, as a real device does (its first packet asks for its gateway): the
    # router announces a newcomer then even within a minute of a storm (the forged MACs the test before
    # this one sends), which without it it does only as it comes back, half its lease on.
    home.exec("reader", "ping", "-c1", "-W1", str(next(address.network.hosts())), check=False)
    [granted] = wait_until(
        "the lease in hwdb",
        lambda: rows_matching(home, "select * from Leases [range 1 minutes]", lambda r: r["mac"] == mac),
        15,
        0.5,
    )
    assert (granted["ip"], granted["hostname"], granted["action"], granted["state"]) == (
        ip,
        "reader",
        "granted",
        "pending",
    )
    [event] = wait_until(
        "the new-device event",
        lambda: rows_matching(home, "select * from Events [range 1 minutes]", lambda r: r["mac"] == mac),
        15,
        0.5,
    )
    assert event["kind"] == "new-device" and "reader" in event["message"]
    home.permit("reader")
    assert home.fetch("reader") == "200"
    flows = wait_until(
        "the page fetch in Flows",
        lambda: rows_matching(
            home,
            "select * from Flows [range 1 minutes]",
            lambda r: r["saddr"] == ip and r["daddr"] == INTERNET_IP and r["dport"] == 80,
        ),
        15,
        0.5,
    )
    assert sum(f["bytes"] for f in flows) > 0
    links = wait_until(
        "the link in hwdb",
        lambda: rows_matching(home, "select * from Links [range 10 seconds]", lambda r: r["mac"] == mac),
        15,
        0.5,
    )
    assert links[-1]["rssi"] == -67
    wait_until(
        "retries counted",
        lambda: sum(
            r["retries"]
            for r in rows_matching(home, "select * from Links [range 10 seconds]", lambda r: r["mac"] == mac)
        )
        > 0,
        10,
        0.5,
    )


def test_every_short_connection_of_every_device_gets_its_flows_row(home):
    """Connections that end within milliseconds, from devices permitted a moment ago: none missed."""
    devices = {}
    for n in range(6):
        name = f"short{n}"
        home.add(name)
        devices[name] = home.dhcp(name).split("/")[0]
        home.permit(name)
    fetched = set()
    for name, ip in devices.items():
        for _ in range(5):
            # A fresh source port each time: each fetch is a connection (and a flow) of its own.
            out = home.exec(
                name,
                "curl",
                "-sS",
                "-m",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{local_port} %{http_code}",
                f"http://{INTERNET_IP}/",
            ).stdout.split()
            assert out[1] == "200"
            fetched.add((ip, int(out[0])))

    def counted():
        return {
            (r["saddr"], r["sport"])
            for r in home.hwdb("select * from Flows [range 2 minutes]")
            if r["daddr"] == INTERNET_IP and r["dport"] == 80
        }

    try:
        wait_until("every fetch in Flows", lambda: fetched <= counted(), 20, 0.5)
    except WaitTimeout:
        missing = fetched - counted()
        raise AssertionError(
            f"{len(missing)} of {len(fetched)} connections have no Flows row: " f"{sorted(missing)}"
        ) from None


def test_hwdb_killed_comes_back_with_its_persistent_tables_and_the_router_keeps_logging(home):
    home.hwdb("insert into AppPriority values ('video-call', 'high')")
    os.kill(home.processes.pid("hwdb"), signal.SIGKILL)
    wait_until("hwdb to be gone", lambda: home.processes.pid("hwdb") is None, 5)
    # The router keeps routing while its memory is gone.
    mac = home.add("latecomer")
    home.dhcp("latecomer")
    home.restart("hwdb")
    assert {"app": "video-call", "priority": "high"}.items() <= home.hwdb("select * from AppPriority")[-1].items()
    home.permit("latecomer")
    home.dhcp("latecomer")  # a renewal after the restart is logged again
    wait_until(
        "the renewal in Leases",
        lambda: rows_matching(
            home, "select * from Leases [range 1 minutes]", lambda r: r["mac"] == mac and r["state"] == "permitted"
        ),
        15,
        0.5,
    )
