"""The slice policy and the accounting, without sockets."""

from __future__ import annotations

import ipaddress

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from isp_flowvisor import codec, policy
from isp_flowvisor.accounting import RuleBook, TokenBucket
from isp_flowvisor.model import Household, InvalidHousehold, check_disjoint

C = codec.CODEC
ALICE = Household("alice", 1, (ipaddress.IPv4Network("100.64.1.0/24"),), ports=(2,))
BOB = Household("bob", 2, (ipaddress.IPv4Network("100.64.2.0/24"),), ports=(3,))


def slice_of(household: Household) -> policy.Slice:
    return policy.Slice(household, frozenset({1}))


def add(match: dict, actions: list, **kwargs):
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    return parser.OFPFlowMod(C, match=parser.OFPMatch(**match), instructions=inst + kwargs.pop("extra", []), **kwargs)


def test_own_rule_is_scoped_to_the_household_and_queue_becomes_dscp():
    out = slice_of(ALICE).requests.flow_mod(
        add(
            {"eth_type": 0x800, "ipv4_dst": ("100.64.1.0", "255.255.255.128")},
            [parser.OFPActionSetQueue(1)],
            cookie=9,
            priority=10,
            table_id=1,
            extra=[parser.OFPInstructionGotoTable(2), parser.OFPInstructionMeter(3)],
        )
    )
    assert out.cookie == (1 << 40) | 9 and out.priority == 11 and out.table_id == 2
    assert dict(out.match.items())["metadata"] == 1
    actions = out.instructions[0].actions
    assert (actions[0].key, actions[0].value) == ("ip_dscp", policy.DSCP_OF_QUEUE[1])
    assert actions[1].queue_id == (1 << 2) | 1
    assert out.instructions[1].table_id == 3 and out.instructions[2].meter_id == (1 << 4) | 2


@pytest.mark.parametrize(
    "match, actions, error",
    [
        ({"eth_type": 0x800, "ipv4_dst": "100.64.2.5"}, [], ofp.OFPET_BAD_MATCH),
        ({"eth_type": 0x800, "ipv4_dst": ("100.64.0.0", "255.255.0.0")}, [], ofp.OFPET_BAD_MATCH),  # wider than hers
        ({"eth_type": 0x800, "ipv4_src": "100.64.2.5"}, [], ofp.OFPET_BAD_MATCH),  # a neighbour's only
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5", "metadata": 2}, [], ofp.OFPET_BAD_MATCH),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5", "in_port": 3}, [], ofp.OFPET_BAD_MATCH),
        (
            {"eth_type": 0x800, "ipv4_dst": "100.64.1.5"},
            [parser.OFPActionSetField(ipv4_dst="100.64.2.5")],
            ofp.OFPET_BAD_ACTION,
        ),
        (
            {"eth_type": 0x800, "ipv4_src": "100.64.1.5"},
            [parser.OFPActionSetField(ipv4_src="100.64.2.5")],
            ofp.OFPET_BAD_ACTION,
        ),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionSetField(ip_dscp=46)], ofp.OFPET_BAD_ACTION),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionSetField(tunnel_id=1)], ofp.OFPET_BAD_ACTION),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionOutput(3)], ofp.OFPET_BAD_ACTION),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionOutput(ofp.OFPP_LOCAL)], ofp.OFPET_BAD_ACTION),
        (
            {"eth_type": 0x800, "ipv4_dst": "100.64.1.5"},
            [parser.OFPActionOutput(ofp.OFPP_IN_PORT)],
            ofp.OFPET_BAD_ACTION,
        ),
        ({"eth_type": 0x800, "ipv4_src": "100.64.1.5"}, [parser.OFPActionSetQueue(2)], ofp.OFPET_BAD_ACTION),
        ({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionGroup(17)], ofp.OFPET_GROUP_MOD_FAILED),
    ],
)
def test_anything_outside_the_slice_is_refused(match, actions, error):
    with pytest.raises(policy.Refused) as refused:
        slice_of(ALICE).requests.flow_mod(add(match, actions))
    assert refused.value.err_type == error


def test_the_same_rules_are_fine_for_the_household_that_owns_the_addresses():
    bob = slice_of(BOB)
    bob.requests.flow_mod(add({"eth_type": 0x800, "ipv4_dst": "100.64.2.5"}, [parser.OFPActionOutput(3)]))
    bob.requests.flow_mod(
        add({"eth_type": 0x800, "ipv4_dst": "100.64.2.5"}, [parser.OFPActionSetField(ipv4_dst="100.64.2.6")])
    )
    bob.requests.flow_mod(add({"eth_type": 0x806, "arp_tpa": "100.64.2.5"}, [parser.OFPActionOutput(ofp.OFPP_NORMAL)]))


def test_wide_delete_needs_no_address_but_stays_in_the_slice():
    out = slice_of(BOB).requests.flow_mod(
        parser.OFPFlowMod(
            C,
            command=ofp.OFPFC_DELETE,
            table_id=ofp.OFPTT_ALL,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(),
        )
    )
    assert out.table_id == ofp.OFPTT_ALL and dict(out.match.items()) == {"metadata": 2}
    assert out.cookie == 2 << 40 and out.cookie_mask == policy.COOKIE_SLOT_MASK


def test_ids_beyond_the_households_range_are_refused():
    alice = slice_of(ALICE)
    for msg in (
        add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [], cookie=1 << 40),
        add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [], priority=0xFFFF),
        add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [], table_id=policy.HOUSEHOLD_TABLES),
        add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [], table_id=2, extra=[parser.OFPInstructionGotoTable(1)]),
    ):
        with pytest.raises(policy.Refused):
            alice.requests.flow_mod(msg)
    with pytest.raises(policy.Refused):
        alice.requests.meter_mod(parser.OFPMeterMod(C, command=ofp.OFPMC_ADD, meter_id=policy.METERS_PER_HOUSEHOLD + 1))
    assert [m.meter_id for m in alice.requests.meter_mod(parser.OFPMeterMod(C, command=ofp.OFPMC_ADD, meter_id=1))] == [
        16
    ]


def test_replies_are_translated_back_and_others_are_hidden():
    alice, bob = slice_of(ALICE), slice_of(BOB)
    physical = alice.requests.flow_mod(
        add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, [parser.OFPActionSetQueue(2)], cookie=3, priority=5)
    )
    stats = parser.OFPFlowStats(
        table_id=physical.table_id,
        duration_sec=0,
        duration_nsec=0,
        priority=physical.priority,
        idle_timeout=0,
        hard_timeout=0,
        flags=0,
        cookie=physical.cookie,
        packet_count=0,
        byte_count=0,
        match=physical.match,
        instructions=physical.instructions,
    )
    seen = alice.reports.flow_stats(stats)
    assert (seen.cookie, seen.priority, seen.table_id) == (3, 5, 0)
    assert [type(a).__name__ for a in seen.instructions[0].actions] == ["OFPActionSetQueue"]
    assert seen.instructions[0].actions[0].queue_id == 2
    assert bob.reports.flow_stats(stats) is None


def test_households_may_not_overlap():
    with pytest.raises(InvalidHousehold):
        check_disjoint([ALICE, Household("eve", 3, (ipaddress.IPv4Network("100.64.1.128/25"),))])
    with pytest.raises(InvalidHousehold):
        Household.from_dict({"name": "Bad Name", "addresses": ["10.0.0.0/8"]})
    check_disjoint([ALICE, BOB])


def test_token_bucket_limits_to_rate_after_the_burst():
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=5, clock=lambda: now[0])
    assert bucket.available() == 5
    bucket.take(5)
    assert bucket.available() == 0 and bucket.seconds_until_available() == pytest.approx(0.1)
    now[0] += 1.0
    assert bucket.available() == 5  # capped at the burst, not 10


def test_rule_book_counts_distinct_rules_against_the_quota():
    book = RuleBook()
    book.add(("a",), b"1")
    book.add(("a",), b"2")  # replacing the same rule
    assert len(book) == 1 and not book.would_exceed(("a",), 1) and book.would_exceed(("b",), 1)
    book.remove(("a",))
    assert not book.would_exceed(("b",), 1)


def test_dispatch_rules_send_a_households_traffic_to_its_tables_and_clear_dscp_downlink():
    rules = policy.dispatch_rules(ALICE)
    down = [r for r in rules if "ipv4_dst" in dict(r.match.items())][0]
    actions = down.instructions[0].actions
    assert (actions[0].key, actions[0].value) == ("ip_dscp", 0)
    assert down.instructions[1].metadata == 1 and down.instructions[2].table_id == policy.FIRST_HOUSEHOLD_TABLE


def test_a_table_miss_entry_says_no_match_in_its_packet_ins_and_reads_back_as_written():
    alice = slice_of(ALICE)
    to_controller = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, 128)]
    physical = alice.requests.flow_mod(add({}, to_controller, priority=0))
    (action,) = physical.instructions[0].actions
    assert isinstance(action, parser.NXActionController) and action.reason == ofp.OFPR_NO_MATCH
    assert dict(physical.match.items()) == {"metadata": 1}  # still only her traffic
    stats = parser.OFPFlowStats(
        table_id=physical.table_id,
        duration_sec=0,
        duration_nsec=0,
        priority=physical.priority,
        idle_timeout=0,
        hard_timeout=0,
        flags=0,
        cookie=physical.cookie,
        packet_count=0,
        byte_count=0,
        match=physical.match,
        instructions=physical.instructions,
    )
    (seen,) = alice.reports.flow_stats(stats).instructions[0].actions
    assert (type(seen), seen.port, seen.max_len) == (parser.OFPActionOutput, ofp.OFPP_CONTROLLER, 128)
    # Any other rule's output to the controller is passed as it is.
    other = alice.requests.flow_mod(add({"eth_type": 0x800, "ipv4_dst": "100.64.1.5"}, to_controller, priority=0))
    assert isinstance(other.instructions[0].actions[0], parser.OFPActionOutput)


def test_a_meter_may_drop_but_not_remark_dscp_which_is_the_queue_choice():
    alice = slice_of(ALICE)
    remark = parser.OFPMeterMod(C, ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 1, [parser.OFPMeterBandDscpRemark(1000, 100, 1)])
    with pytest.raises(policy.Refused) as refused:
        alice.requests.meter_mod(remark)
    assert (refused.value.err_type, refused.value.err_code) == (ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_BAND)
    drop = parser.OFPMeterMod(C, ofp.OFPMC_ADD, ofp.OFPMF_KBPS, 1, [parser.OFPMeterBandDrop(1000, 100)])
    assert [m.meter_id for m in alice.requests.meter_mod(drop)] == [16]
