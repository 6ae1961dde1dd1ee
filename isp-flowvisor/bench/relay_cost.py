"""CPU cost of relaying one flow-mod, in-process: decode -> policy check -> translate -> encode -> write.

    .venv/bin/python isp-flowvisor/bench/relay_cost.py [--count 20000] [--profile 25]

A slicer without sockets (`isp_flowvisor.testing.socketless_slicer`) serves household frames as the relay
does (`Slicer._serve`, then one event-loop iteration so the batched writes go out). CPU time, not
wall time, so a busy machine changes the numbers less. Two loads:

- `repeated`: the bench's load, one flow-mod sent over and over (every cache hits);
- `distinct`: the router's queue rules (controller/homework_controller/slice_link.py), each for
  another remote address and port, as a household installs them when calls and downloads start:
  only the fields a household repeats (eth_type, ip_proto, its own address) hit the caches.

`--profile N` prints cProfile's top N functions by own time for the distinct load; `--stages` the
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
import sys
import time

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, fastpath, policy, relay
from isp_flowvisor.model import Household
from isp_flowvisor.testing import socketless_slicer

HOUSEHOLD = Household("bench", 1, (ipaddress.IPv4Network("100.64.1.0/24"),), flow_quota=10**9)
PUBLIC_ADDRESS = "100.64.1.7"


def queue_rule(remote: str, port: int, queue: int, xid: int) -> bytes:
    """The router's downlink queue rule for one flow (what slice_link.py installs)."""
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
    return {"repeated": [repeated] * count, "distinct": distinct}


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
        translated = slice_.flow_mod(msg)
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
    args.add_argument("--profile", type=int, default=0, metavar="N")
    args.add_argument("--stages", action="store_true")
    args.add_argument("--os-ken-only", action="store_true", help="relay without the fast path")
    options = args.parse_args()
    if options.os_ken_only:
        relay.fastpath.flow_mod = lambda *_: None
    for name, frames in loads(options.count).items():
        asyncio.run(relay_all(frames[:1000]))  # warm the caches os-ken and the slicer keep
        spent = asyncio.run(relay_all(frames))
        print(f"{name:9} {spent / len(frames) * 1e6:6.1f} us CPU per flow-mod  ({len(frames) / spent:,.0f}/s)")
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
        frames = loads(options.count)["distinct"]
        profile.runcall(asyncio.run, relay_all(frames))
        pstats.Stats(profile).sort_stats("tottime").print_stats(options.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
