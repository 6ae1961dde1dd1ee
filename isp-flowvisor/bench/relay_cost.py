"""CPU cost of relaying one flow-mod, in-process: decode -> policy check -> translate -> encode -> write.

    .venv/bin/python isp-flowvisor/bench/relay_cost.py [--count 20000] [--profile 25]

A slicer without sockets (`isp_flowvisor.testing.socketless_slicer`) serves household frames as the relay
does (`Slicer._serve`, then one event-loop iteration so the batched writes go out). CPU time, not
wall time, so a busy machine changes the numbers less. The loads:

- `repeated`: the bench's load, one flow-mod sent over and over (every cache hits);
- `distinct`: the router's queue rules (controller/homework_controller/edge/feeds/slice_link.py), each for
  another remote address and port, as a household installs them when calls and downloads start:
  only the fields a household repeats (eth_type, ip_proto, its own address) hit the caches;
- `repeated6`, `distinct6`: the same for the router's IPv6 queue rules (remote address to a device's
  global address inside the household's delegated prefix);
- `windows` (`--windows`): `slicer_bench.py`'s load, 100 households, each with a window of 20
  flow-mods (its own rule, repeated) and a barrier queued, served in round-robin turns as the relay
  serves them (`Slicer._turn`), the switch's barrier replies fed back (`Slicer._from_switch`). What
  the running slicer spends beyond it is its sockets and asyncio's.

`--runs N` prints the median of N runs of each load; `--profile N` prints cProfile's top N functions
by own time for the distinct load (`--profile-load` another); `--stages` the
CPU per flow-mod of each step, on os-ken's path (decode, the policy's check and translation, the rule
key, encode) and on the fast path (its check and translation, the rule key, the frame);
`--os-ken-only` relays without the fast path (`isp_flowvisor.fastpath`), as before it.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ipaddress
import pstats
import statistics
import sys
import time

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, fastpath, policy, relay
from isp_flowvisor.model import Household
from isp_flowvisor.session import BatchedWriter
from isp_flowvisor.testing import socketless_slicer

HOUSEHOLD = Household(
    "bench", 1, (ipaddress.IPv4Network("100.64.1.0/24"), ipaddress.IPv6Network("2001:db8:100::/56")), flow_quota=10**9
)
PUBLIC_ADDRESS = "100.64.1.7"
DEVICE_ADDRESS = "2001:db8:100:1::7"  # a device's global address in the household's delegated prefix


def queue_rule(remote: str, port: int, queue: int, xid: int) -> bytes:
    """The router's downlink queue rule for one flow (what slice_link.py installs), IPv4 or IPv6 as
    the remote address is."""
    if ":" in remote:
        match = parser.OFPMatch(eth_type=0x86DD, ipv6_dst=DEVICE_ADDRESS, ip_proto=6, tcp_src=port, ipv6_src=remote)
    else:
        match = parser.OFPMatch(eth_type=0x0800, ip_proto=6, ipv4_src=remote, tcp_src=port, ipv4_dst=PUBLIC_ADDRESS)
    actions = [parser.OFPActionSetQueue(queue), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
    rule = parser.OFPFlowMod(
        codec.CODEC,
        cookie=0x486F6D65,
        priority=100,
        match=match,
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
    )
    return codec.encode(rule, xid)


def loads(count: int) -> dict[str, list[bytes]]:
    repeated = queue_rule("192.0.2.1", 443, 2, 1)
    distinct = [
        queue_rule(str(ipaddress.IPv4Address(0x0A000000 + i)), 1024 + i % 60000, 1 + i % 2, i) for i in range(count)
    ]
    distinct6 = [
        queue_rule(str(ipaddress.IPv6Address((0x2A00 << 112) + i * 0x10001)), 1024 + i % 60000, 1 + i % 2, i)
        for i in range(count)
    ]
    return {
        "repeated": [repeated] * count,
        "distinct": distinct,
        "repeated6": [queue_rule("2a00:1450::1", 443, 2, 1)] * count,
        "distinct6": distinct6,
    }


async def relay_all(frames: list[bytes]) -> float:
    """CPU seconds to serve every frame; fails unless each was relayed to the switch."""
    slicer, session, _, switch = socketless_slicer(HOUSEHOLD)
    start = time.process_time()
    for i, frame in enumerate(frames):
        slicer._serve(session, frame)
        if i % 32 == 31:  # the relay's writes go out once per round of turns
            await asyncio.sleep(0)
    await asyncio.sleep(0)
    spent = time.process_time() - start
    assert len(switch.frames) == len(frames), (len(switch.frames), len(frames))
    return spent


class _Sink:
    """A peer that takes whatever it is sent."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def serve_windows(rounds: int, households: int = 100, window: int = 20) -> float:
    """CPU µs per flow-mod at slicer_bench.py's load (see the module's docstring)."""
    loop = asyncio.get_running_loop()
    records = [
        Household(f"h{i}", i + 1, (ipaddress.IPv4Network(f"10.0.{i}.0/24"),), msg_rate=1e9, msg_burst=10**9)
        for i in range(households)
    ]
    slicer, _, _, _ = socketless_slicer(records[0])
    slicer._switch_out = BatchedWriter(_Sink())  # type: ignore[arg-type]
    windows = []
    for i, household in enumerate(records):
        session = slicer.sessions.get(household.name) or slicer.register(household)
        session.connect(None, _Sink())  # type: ignore[arg-type]
        rule = parser.OFPFlowMod(
            codec.CODEC,
            priority=10,
            match=parser.OFPMatch(eth_type=0x0800, ipv4_dst=f"10.0.{i}.7"),
            instructions=[
                parser.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionSetQueue(1), parser.OFPActionOutput(ofp.OFPP_NORMAL)]
                )
            ],
        )
        windows.append(
            (session, codec.encode(rule, 1) * window + codec.encode(parser.OFPBarrierRequest(codec.CODEC), 2))
        )
    barrier_reply = codec.encode(parser.OFPBarrierReply(codec.CODEC), 0)
    start = time.process_time()
    for _ in range(rounds):
        for session, sent in windows:
            assert session.connection is not None
            session.connection.inbox.extend(codec.split_frames(bytearray(sent)))
            slicer._wake(session)
        while (name := slicer._rotation.next()) is not None:
            slicer._turn(name, loop)
        await asyncio.sleep(0)  # the turns' writes go out
        replies = b"".join(codec.renumbered(barrier_reply, xid) for xid in slicer._awaiting)
        for frame in codec.split_frames(bytearray(replies)):
            slicer._from_switch(codec.decode(frame), slicer._switch_out)
        await asyncio.sleep(0)
    spent = time.process_time() - start
    assert not slicer._awaiting, "a barrier went unanswered"
    return spent / (rounds * households * window) * 1e6


def stages(frames: list[bytes]) -> dict[str, float]:
    """CPU µs per flow-mod of each step of relaying, frame by frame (the clock read between steps
    costs well under a µs)."""
    slice_ = policy.Slice(HOUSEHOLD, frozenset({1}))  # as socketless_slicer: port 1 is shared
    spent = dict.fromkeys(("decode", "policy", "rule key", "encode"), 0)
    clock = time.process_time_ns
    for frame in frames:
        t0 = clock()
        msg = codec.decode_request(frame)
        t1 = clock()
        translated = slice_.requests.flow_mod(msg)
        t2 = clock()
        policy.rule_key(translated.table_id, translated.priority, translated.match)
        t3 = clock()
        codec.encode(translated, 1)
        t4 = clock()
        for step, ns in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[step] += ns
    return {step: ns / len(frames) / 1e3 for step, ns in spent.items()}


def fast_stages(frames: list[bytes]) -> dict[str, float]:
    """The same for the fast path; every frame must take it."""
    slice_ = policy.Slice(HOUSEHOLD, frozenset({1}))
    spent = dict.fromkeys(("fast check+translate+rule key", "frame"), 0)
    clock = time.process_time_ns
    for frame in frames:
        t0 = clock()
        translated = fastpath.flow_mod(slice_, frame)
        t1 = clock()
        assert translated is not None, frame.hex()
        translated.frame(1)
        t2 = clock()
        for step, ns in zip(spent, (t1 - t0, t2 - t1), strict=True):
            spent[step] += ns
    return {step: ns / len(frames) / 1e3 for step, ns in spent.items()}


def main() -> int:
    args = argparse.ArgumentParser(prog="relay_cost", description=__doc__.split("\n")[0])
    args.add_argument("--count", type=int, default=20000)
    args.add_argument("--runs", type=int, default=1, help="the median of this many runs of each load")
    args.add_argument("--profile", type=int, default=0, metavar="N")
    args.add_argument("--profile-load", default="distinct", choices=("repeated", "distinct", "repeated6", "distinct6"))
    args.add_argument("--stages", action="store_true")
    args.add_argument("--os-ken-only", action="store_true", help="relay without the fast path")
    args.add_argument("--windows", action="store_true", help="also slicer_bench.py's load, served in turns")
    options = args.parse_args()
    if options.os_ken_only:
        relay.fastpath.flow_mod = lambda *_: None
    for name, frames in loads(options.count).items():
        asyncio.run(relay_all(frames[:1000]))  # warm the caches os-ken and the slicer keep
        spent = statistics.median(asyncio.run(relay_all(frames)) for _ in range(options.runs))
        print(f"{name:9} {spent / len(frames) * 1e6:6.1f} us CPU per flow-mod  ({len(frames) / spent:,.0f}/s)")
    if options.windows:
        asyncio.run(serve_windows(5))  # warm the caches
        best = min(asyncio.run(serve_windows(20)) for _ in range(5))
        print(
            f"windows   {best:6.1f} us CPU per flow-mod  (best of 5; 100 households, 20 flow-mods and a barrier each)"
        )
    if options.stages:
        for name, frames in loads(options.count).items():
            stages(frames[:1000])  # warm the caches
            steps = stages(frames)
            print(f"{name:9}", "  ".join(f"{step} {us:5.1f} us" for step, us in steps.items()))
            if not options.os_ken_only:
                fast_stages(frames[:1000])
                steps = fast_stages(frames)
                print(f"{name:9}", "  ".join(f"{step} {us:5.1f} us" for step, us in steps.items()))
    if options.profile:
        profile = cProfile.Profile()
        frames = loads(options.count)[options.profile_load]
        profile.runcall(asyncio.run, relay_all(frames))
        pstats.Stats(profile).sort_stats("tottime").print_stats(options.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
