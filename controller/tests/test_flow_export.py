"""The switch's own per-connection records (issue 26): IPFIX as this machine's Open vSwitch sends it.

Unit tests parse datagrams captured from the real OVS (tests/data/ovs_ipfix.json) and mutations of
them; the switch tests bring up a private OVS with hosts in namespaces (controller/tools/
export_burst.py) and need root and OVS.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from homework_controller.edge.feeds.flow_export import (
    Collector,
    ConnectionTotals,
    Direction,
    ExportParser,
    FlowRecord,
    MalformedExport,
    tcp_totals,
)
from homework_controller.flows import FiveTuple

FIXTURE = json.loads((Path(__file__).parent / "data" / "ovs_ipfix.json").read_text())
DATAGRAMS = [bytes.fromhex(d) for d in FIXTURE["datagrams"]]
EXPORTER = "127.0.0.1:40000"


def summed(records: list[FlowRecord]) -> dict[Direction, list[int]]:
    totals = ConnectionTotals()
    totals.add(records)
    return totals.take()


def parse_all(datagrams: list[bytes]) -> list[FlowRecord]:
    parser = ExportParser()
    return [r for d in datagrams for r in parser.parse(d, EXPORTER)]


def test_real_datagrams_give_each_direction_what_the_wire_carried():
    records = parse_all(DATAGRAMS)
    expected = {(s, sp, d, dp): [packets, octets] for s, sp, d, dp, packets, octets in FIXTURE["wire"]}
    assert tcp_totals(summed(records)) == expected  # each direction once (egress only), exact
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
    assert tcp_totals(summed(fresh)) == expected


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


class Batches:
    """The collector's callback in tests: every batch of totals, summed."""

    def __init__(self) -> None:
        self.totals: dict[FiveTuple, list[int]] = {}
        self.count = 0

    def __call__(self, batch: dict[FiveTuple, list[int]]) -> None:
        self.count += 1
        for flow, (pkts, octets) in batch.items():
            total = self.totals.setdefault(flow, [0, 0])
            total[0] += pkts
            total[1] += octets


def test_collector_delivers_real_records_summed_and_counts_garbage():
    batches = Batches()
    collector = Collector(batches, interval_s=0.2).start()
    try:
        send(collector.port, [b"junk", *DATAGRAMS, b"\x00\x0a" + bytes(40)])
        wait_for(lambda: collector.stats()["datagrams"] == len(DATAGRAMS) + 2)
        stats = collector.stats()
        assert stats["malformed"] == 2 and stats["running"] == 1 and stats["restarts"] == 0
        expected = {(s, sp, d, dp): [p, o] for s, sp, d, dp, p, o in FIXTURE["wire"]}
        assert tcp_totals(batches.totals) == expected
        # the process's start (the interpreter, its imports) is not counted as reading datagrams
        assert stats["start_cpu_ns"] > stats["cpu_ns"] > 0
    finally:
        collector.stop()


def test_a_failing_callback_costs_only_its_batch():
    calls = []

    def flaky(batch: dict[FiveTuple, list[int]]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("the controller said no")

    collector = Collector(flaky, interval_s=0.2).start()
    exporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        send(collector.port, DATAGRAMS, exporter)
        wait_for(lambda: collector.stats()["datagrams"] == len(DATAGRAMS) and calls)
        send(collector.port, DATAGRAMS[1:], exporter)  # the exporter's templates are kept: its data parses
        wait_for(lambda: any(calls[1:]))
        assert collector.stats()["callback_errors"] == 1
    finally:
        exporter.close()
        collector.stop()


def woken(pid: int) -> int:
    """How often the process has gone to sleep and been woken again."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_datagrams_arriving_one_by_one_are_all_counted_without_a_wake_up_each():
    batches = Batches()
    collector = Collector(batches, interval_s=0.2).start()
    exporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert collector.child is not None
        send(collector.port, DATAGRAMS[:1], exporter)  # the templates
        wait_for(lambda: collector.stats()["datagrams"] == 1)
        before = woken(collector.child.pid)
        rounds = 50  # 600 datagrams, one every millisecond, as OVS sends records that end apart
        for _ in range(rounds):
            for datagram in DATAGRAMS[1:]:
                exporter.sendto(datagram, ("127.0.0.1", collector.port))
                time.sleep(0.001)
        sent = 1 + rounds * (len(DATAGRAMS) - 1)
        wait_for(lambda: collector.stats()["datagrams"] == sent)
        wake_ups = woken(collector.child.pid) - before
        # every record counted, none lost: each round's datagrams carry what the wire carried
        wait_for(
            lambda: tcp_totals(batches.totals)
            == {(s, sp, d, dp): [rounds * p, rounds * o] for s, sp, d, dp, p, o in FIXTURE["wire"]}
        )
        assert collector.stats()["dropped"] == 0
        # it read them in batches, not woken for each (a wake-up costs more than a datagram's parse)
        assert wake_ups < (sent - 1) / 3, wake_ups
    finally:
        exporter.close()
        collector.stop()


def test_datagrams_the_socket_could_not_hold_are_counted_as_dropped():
    collector = Collector(Batches(), interval_s=0.2).start()
    try:
        assert collector.child is not None
        collector.child.send_signal(signal.SIGSTOP)  # behind: nothing is read while the burst comes
        big = b"\x00\x0a" + bytes(60000)  # malformed: each costs only itself once read
        sent = 600  # 36 MB, past the receive buffer
        send(collector.port, [big] * sent)
        collector.child.send_signal(signal.SIGCONT)
        wait_for(lambda: collector.stats()["datagrams"] + collector.stats()["dropped"] == sent)
        stats = collector.stats()
        assert stats["dropped"] > 0 and stats["datagrams"] > 0, stats  # positive control: most were read
        assert stats["malformed"] == stats["datagrams"]
    finally:
        collector.stop()


def test_totals_between_hand_overs_are_bounded_and_the_rest_counted_by_address():
    device = "10.2.0.6"
    flood = [FlowRecord(17, device, 5000, f"198.51.{i // 250}.{i % 250}", 53, 1, 100, 0, 0) for i in range(5000)]
    replies = [FlowRecord(17, f"203.0.{i // 250}.{i % 250}", 53, device, 5000, 1, 80, 0, 0) for i in range(50)]
    totals = ConnectionTotals(max_directions=100, max_addresses=6000)
    totals.add(flood + replies)
    taken = totals.take()
    # every byte the device sent is in a row that names it as the source: per connection or as a whole
    sent = [total for (_, saddr, _, daddr, _), total in taken.items() if saddr == device and daddr != "0.0.0.0"]
    assert sum(octets for _, octets in sent) == 100 * 100
    assert taken[FiveTuple(0, device, 0, "0.0.0.0", 0)] == [4900, 4900 * 100]
    # what came to it: past the directions' bound, counted by its destination address
    assert taken[FiveTuple(0, "0.0.0.0", 0, device, 0)] == [50, 50 * 80]
    assert totals.lost == 0 and totals.take() == {}
    # the address tables are bounded too: beyond them, records are lost and counted
    tight = ConnectionTotals(max_directions=100, max_addresses=10)
    tight.add(flood + replies)
    assert len(tight.take()) <= 100 + 2 * 10
    assert tight.lost == 50 - 9  # the replies whose source still had a place (the device took the first)
    # positive control: within the bounds each direction is its own
    small = ConnectionTotals(max_directions=100)
    small.add(flood[:10])
    assert set(small.take()) == {FiveTuple(17, device, 5000, r.daddr, 53) for r in flood[:10]}


def children_of(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out |= {int(c) for c in (task / "children").read_text().split()}
    return out


def test_the_collector_process_is_started_again_when_it_dies_and_the_export_made_afresh():
    batches = Batches()
    export_made_afresh = threading.Event()
    collector = Collector(batches, interval_s=0.2, on_restart=export_made_afresh.set).start()
    exporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        first = collector.child
        assert first is not None
        send(collector.port, DATAGRAMS[:2], exporter)
        wait_for(lambda: collector.stats()["datagrams"] == 2)
        assert not export_made_afresh.is_set()  # a running child keeps its templates
        first.kill()
        wait_for(lambda: collector.stats()["restarts"] == 1 and collector.stats()["running"] == 1)
        assert collector.child is not first and collector.child is not None
        assert export_made_afresh.wait(5), "the switch was not asked to send its templates again"
        send(collector.port, DATAGRAMS, exporter)  # the new process learns the templates afresh
        wait_for(lambda: tcp_totals(batches.totals))
        assert collector.stats()["datagrams"] == 2 + len(DATAGRAMS)  # the dead child's counts are kept
    finally:
        exporter.close()
        collector.stop()
    assert collector.child is not None and collector.child.poll() is not None  # stop ends it


def test_the_collector_process_dies_with_the_controller(tmp_path):
    script = (
        "import sys, time\n"
        "from homework_controller.edge.feeds.flow_export import Collector\n"
        "c = Collector(lambda t: None).start()\n"
        "print(c.child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    controller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout is not None
        child = int(controller.stdout.readline())
        assert child in children_of(controller.pid)  # positive control: it runs while the controller does
        controller.kill()  # SIGKILL: no clean-up runs in the controller
        controller.wait()
        wait_for(
            lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
        )
    finally:
        controller.kill()


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
            assert sink.summed == {} and collector.stats()["datagrams"] == 0

            home.enable_ipfix(collector.port)
            time.sleep(1)
            with home.capture() as wire:
                made = home.burst(80, 40)
                await_reports(made, sink, within=30)
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
                await_reports(made, sink, within=30)
            assert len(made) == 400 and all(c.ok for c in made)
            assert unaccounted(made, sink.totals(), wire) == []
    finally:
        stop_home(switch, home, bridge)
