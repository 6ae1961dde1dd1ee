"""The switch's own per-connection records (issue 26): IPFIX as this machine's Open vSwitch sends it.

Unit tests parse datagrams captured from the real OVS (tests/data/ovs_ipfix.json) and mutations of
them; the switch tests bring up a private OVS with hosts in namespaces (controller/tools/
export_burst.py) and need root and OVS.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from homework_controller.flow_export import Collector, ExportParser, FlowRecord, MalformedExport, tcp_totals

sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))

FIXTURE = json.loads((Path(__file__).parent / "data" / "ovs_ipfix.json").read_text())
DATAGRAMS = [bytes.fromhex(d) for d in FIXTURE["datagrams"]]
EXPORTER = "127.0.0.1:40000"


def parse_all(datagrams: list[bytes]) -> list[FlowRecord]:
    parser = ExportParser()
    return [r for d in datagrams for r in parser.parse(d, EXPORTER)]


def test_real_datagrams_give_each_direction_what_the_wire_carried():
    records = parse_all(DATAGRAMS)
    expected = {(s, sp, d, dp): [packets, octets] for s, sp, d, dp, packets, octets in FIXTURE["wire"]}
    assert tcp_totals(records) == expected  # each direction once (egress only), exact
    for r in records:
        assert 0 < r.end - r.start < 10 and abs(r.end - time.time()) < 10 * 365 * 86400


def test_records_before_their_template_are_not_guessed_and_arrive_once_it_is_known():
    data_only = DATAGRAMS[1:]  # the first datagram carries the templates
    assert parse_all(data_only) == []
    assert len(parse_all(DATAGRAMS)) == len(FIXTURE["wire"])


def mutations(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        base = bytearray(rng.choice(DATAGRAMS))
        kind = n % 4
        if kind == 0:  # truncated
            out.append(bytes(base[: rng.randrange(len(base))]))
        elif kind == 1:  # flipped bytes, header kept so it reaches the parser
            for _ in range(rng.randint(1, 8)):
                base[rng.randrange(16, len(base))] = rng.randrange(256)
            out.append(bytes(base))
        elif kind == 2:  # lengths rewritten (message, set, template field counts)
            pos = rng.choice([2, 16 + 2, rng.randrange(16, len(base) - 1)])
            base[pos : pos + 2] = rng.randrange(65536).to_bytes(2, "big")
            out.append(bytes(base))
        else:  # garbage with an IPFIX version
            out.append(b"\x00\x0a" + rng.randbytes(rng.randrange(0, 1500)))
    return out


def test_thousands_of_corrupt_datagrams_cost_only_themselves():
    parser = ExportParser()
    parser.parse(DATAGRAMS[0], EXPORTER)
    malformed = 0
    for data in mutations(seed=26, count=4000):
        try:
            records = parser.parse(data, EXPORTER)
        except MalformedExport:
            malformed += 1
            continue
        for r in records:
            assert 0 <= r.proto <= 255 and 0 <= r.sport <= 65535 and r.packets >= 0 and r.octets >= 0
    assert malformed > 400  # truncations and garbage are counted, not swallowed
    # positive control: the same parser still reads the real datagrams afterwards
    fresh = [r for d in DATAGRAMS for r in parser.parse(d, EXPORTER)]
    expected = {(s, sp, d, dp): [p, o] for s, sp, d, dp, p, o in FIXTURE["wire"]}
    assert tcp_totals(fresh) == expected


def template_datagram(template_id: int, fields: int) -> bytes:
    specs = b"".join((1 + i % 200).to_bytes(2, "big") + (4).to_bytes(2, "big") for i in range(fields))
    template_set = (2).to_bytes(2, "big") + (8 + len(specs)).to_bytes(2, "big")
    template_set += template_id.to_bytes(2, "big") + fields.to_bytes(2, "big") + specs
    header = (10).to_bytes(2, "big") + (16 + len(template_set)).to_bytes(2, "big") + bytes(12)
    return header + template_set


def test_templates_are_bounded_in_number_and_size():
    parser = ExportParser(max_templates=64, max_template_fields=128)
    for n in range(5000):  # new template ids from ever new exporters
        parser.parse(template_datagram(256 + n % 60000, 4), f"127.0.0.1:{n}")
    assert len(parser.templates) == 64
    parser.parse(template_datagram(300, 2000), EXPORTER)  # one huge template
    assert all(len(fields) <= 128 for fields, _ in parser.templates.templates.values())
    # positive control: a template of a sane size is kept
    parser.parse(template_datagram(301, 50), EXPORTER)
    assert parser.templates.get(EXPORTER, 0, 301)[0]


def test_only_loopback():
    with pytest.raises(ValueError, match="loopback only"):
        Collector(lambda batch: None, host="0.0.0.0")
    Collector(lambda batch: None, host="127.0.0.1").stop()  # positive control


def send(port: int, datagrams: list[bytes], exporter: socket.socket | None = None) -> None:
    """From `exporter` (templates are kept per exporter: its address and port), else a new one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if exporter is None else exporter.dup() as s:
        for d in datagrams:
            s.sendto(d, ("127.0.0.1", port))


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_collector_delivers_real_records_and_counts_garbage():
    batches: list[list[FlowRecord]] = []
    collector = Collector(batches.append).start()
    try:
        send(collector.port, [b"junk", *DATAGRAMS, b"\x00\x0a" + bytes(40)])
        wait_for(lambda: collector.stats()["datagrams"] == len(DATAGRAMS) + 2)
        stats = collector.stats()
        assert stats["malformed"] == 2
        expected = {(s, sp, d, dp): [p, o] for s, sp, d, dp, p, o in FIXTURE["wire"]}
        assert tcp_totals([r for b in batches for r in b]) == expected
    finally:
        collector.stop()


def test_a_failing_callback_costs_only_its_batch():
    calls = []

    def flaky(batch: list[FlowRecord]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("the controller said no")

    collector = Collector(flaky).start()
    exporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        send(collector.port, DATAGRAMS, exporter)
        wait_for(lambda: collector.stats()["datagrams"] == len(DATAGRAMS))
        time.sleep(0.3)
        send(collector.port, DATAGRAMS[1:], exporter)  # the exporter's templates are kept: its data parses
        wait_for(lambda: len(calls) >= 2)
        assert collector.stats()["callback_errors"] == 1
    finally:
        exporter.close()
        collector.stop()


def test_a_flood_while_the_callback_is_stuck_cannot_grow_memory():
    release = threading.Event()
    collector = Collector(lambda batch: release.wait(30), queue_size=256).start()
    try:
        tracemalloc.start()
        flood = mutations(seed=7, count=2000) + DATAGRAMS * 200
        for _ in range(3):
            send(collector.port, flood)
        wait_for(lambda: collector.stats()["dropped"] > 1000)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert collector.queue.qsize() <= 256
        assert peak < 8 * 1024 * 1024, peak  # 256 queued datagrams of at most 1.5 KB and the parser
        release.set()
        # positive control: once the callback returns, records flow again
        wait_for(lambda: collector.stats()["records"] > 0)
    finally:
        release.set()
        collector.stop()


def test_parsing_is_held_to_its_rate_and_the_excess_dropped_and_counted():
    collector = Collector(lambda batch: None, queue_size=256, max_rate=500).start()
    try:
        started = time.monotonic()
        for _ in range(30):
            send(collector.port, DATAGRAMS * 10)  # 4,530 datagrams, as fast as loopback takes them
        time.sleep(1.0)
        parsed, elapsed = collector.stats()["datagrams"], time.monotonic() - started
        assert parsed <= 256 + 500 * elapsed + 64  # a queue's worth at once, then the rate
        assert collector.stats()["dropped"] > 1000
        assert parsed > 256  # positive control: it goes on parsing at its rate
    finally:
        collector.stop()


# --- against the real switch -------------------------------------------------------------------


@pytest.fixture(scope="module")
def switch(tmp_path_factory):
    if shutil.which("ovs-vswitchd") is None:
        pytest.skip("Open vSwitch is not installed")
    from isp_flowvisor.testing import private_ovs_fixture

    yield from private_ovs_fixture(tmp_path_factory)


def home_with(switch, tmp_path: Path, hosts: int):
    from export_burst import BRIDGE, BurstHome

    home = BurstHome(switch, tmp_path, hosts).start()
    return home, BRIDGE


def stop_home(switch, home, bridge: str) -> None:
    home.stop()
    switch.vsctl("--if-exists", "del-br", bridge)
    switch.bridges.remove(bridge)


def test_every_connection_of_a_burst_is_reported_with_its_packets_and_bytes(switch, tmp_path):
    from export_burst import Sink, await_reports, collector_in, unaccounted

    home, bridge = home_with(switch, tmp_path, hosts=1)
    try:
        sink = Sink()
        with collector_in(switch, sink) as collector:
            # negative control first: with export off, the same burst reports nothing
            with home.capture():
                quiet = home.burst(80, 40)
            time.sleep(3)
            assert all(c.ok for c in quiet) and len(quiet) == 80
            assert sink.records == [] and collector.stats()["datagrams"] == 0

            home.enable_ipfix(collector.port)
            time.sleep(1)
            with home.capture() as wire:
                made = home.burst(80, 40)
                await_reports(made, sink, within=15)
            assert all(c.ok for c in made) and len(made) == 80
            assert unaccounted(made, sink.totals(), wire) == []
            assert collector.stats()["malformed"] == 0
    finally:
        stop_home(switch, home, bridge)


def test_five_hosts_bursting_at_once_are_all_reported(switch, tmp_path):
    from export_burst import Sink, await_reports, collector_in, unaccounted

    home, bridge = home_with(switch, tmp_path, hosts=5)
    try:
        sink = Sink()
        with collector_in(switch, sink) as collector:
            home.enable_ipfix(collector.port)
            time.sleep(1)
            with home.capture() as wire:
                made = home.burst(80, 40)
                await_reports(made, sink, within=15)
            assert len(made) == 400 and all(c.ok for c in made)
            assert unaccounted(made, sink.totals(), wire) == []
    finally:
        stop_home(switch, home, bridge)
