"""Issue 21's quota doubling: rules added while a wide delete's flow dump is on its way still count."""

from __future__ import annotations

import asyncio
import ipaddress
import itertools

from conftest import ALICE
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser
from test_relay import flow, to

from isp_flowvisor import codec, switchside
from isp_flowvisor.model import Household
from isp_flowvisor.testing import socketless_slicer

C = codec.CODEC
NORMAL = [parser.OFPActionOutput(ofp.OFPP_NORMAL)]


def _wide_delete_of_nothing() -> parser.OFPFlowMod:
    """A non-strict delete (the slicer must read the household's rules back) that removes no rule."""
    return parser.OFPFlowMod(
        C,
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        cookie=0xDEAD,
        cookie_mask=0xFFFF,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(),
    )


def _hers_on_the_switch(ovs, bridge: str) -> int:
    return sum(1 for rule in ovs.flows(bridge) if "cookie=0x1000000" in rule)


def test_a_household_cannot_pass_its_quota_with_adds_behind_a_wide_delete(slicer, households, ovs):
    alice = households("alice")
    quota = ALICE["flow_quota"]
    new_rules = (flow({**to("100.64.1.10"), "ip_proto": 6, "tcp_dst": port}, NORMAL) for port in itertools.count(1))
    refused: list = []
    for _ in range(3):
        # One write of ten rounds: a delete, then a quota's worth of new rules, served while the
        # delete's flow dump is on its way.
        burst = [m for _ in range(10) for m in (_wide_delete_of_nothing(), *(next(new_rules) for _ in range(8)))]
        xids = list(range(alice.xid + 1, alice.xid + 1 + len(burst)))
        alice.xid = xids[-1]
        alice.send_raw(b"".join(codec.encode(m, x) for m, x in zip(burst, xids, strict=True)))
        alice.barrier()
        refused += [m for m in alice.received if isinstance(m, parser.OFPErrorMsg) and m.xid in xids]
        alice.received.clear()
    assert _hers_on_the_switch(ovs, slicer.bridge) == quota
    assert len(refused) == 3 * 10 * 8 - quota and {m.code for m in refused} == {ofp.OFPFMFC_TABLE_FULL}
    # Positive control: after a delete that frees rules, the freed room is hers again.
    delete_one = parser.OFPFlowMod(
        C,
        command=ofp.OFPFC_DELETE,
        table_id=ofp.OFPTT_ALL,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**to("100.64.1.10"), ip_proto=6, tcp_dst=1),
    )
    alice.no_error_for(alice.send(delete_one))
    alice.barrier()
    alice.no_error_for(alice.send(next(new_rules)))
    assert _hers_on_the_switch(ovs, slicer.bridge) == quota


def test_rules_added_after_the_dump_was_asked_for_stay_in_the_book():
    """The same sequence with the switch's reply held back until the adds are through (no sockets)."""
    household = Household("carol", 3, (ipaddress.IPv4Network("100.64.3.0/24"),), flow_quota=4)

    async def run() -> list[int]:
        slicer, session, household_end, switch = socketless_slicer(household)
        slicer._serve(session, codec.encode(_wide_delete_of_nothing(), 1))
        for _ in range(3):  # the slicer asks the switch for carol's rules; its writer sends the request
            await asyncio.sleep(0)
        dumps = [f for f in switch.frames if codec.header(f)[1] == ofp.OFPT_MULTIPART_REQUEST]
        dump_xid = codec.header(dumps[-1])[3]
        rules = (
            codec.encode(flow({**to("100.64.3.10"), "ip_proto": 6, "tcp_dst": port}, NORMAL), 100 + port)
            for port in itertools.count(1)
        )
        for _ in range(4):
            slicer._serve(session, next(rules))
        # The dump, taken before those adds reached the switch, holds none of them.
        (reply,) = switchside.multipart_reply(dump_xid, ofp.OFPMP_FLOW, [])
        slicer._from_switch(codec.decode(reply), slicer._switch_out)
        for _ in range(3):  # the slicer reads the dump into carol's rule book
            await asyncio.sleep(0)
        for _ in range(4):
            slicer._serve(session, next(rules))
        await asyncio.sleep(0)
        return [codec.decode(f).code for f in household_end.frames if codec.header(f)[1] == ofp.OFPT_ERROR]

    assert asyncio.run(run()) == [ofp.OFPFMFC_TABLE_FULL] * 4
