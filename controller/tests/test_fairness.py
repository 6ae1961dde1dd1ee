from homework_controller.edge.switch.fair_serving import NEWCOMERS, UNDECIDED, queue_key
from homework_controller.edge.switch.fairness import FairQueue
from homework_controller.model import State

# The devices the router knows, by MAC (the fair queue reads their states without the controller's lock).
STATES = {"02:00:00:00:00:aa": State.PERMITTED, "02:00:00:00:00:cc": State.PERMITTED}


def put(q: FairQueue, mac: str, item, from_router: bool = False, about: str | None = None) -> bool:
    key, member = queue_key(mac, STATES.get, from_router, about)
    return q.put(key, item, member)


def test_a_flooding_device_does_not_delay_a_quiet_one():
    q = FairQueue(per_key_limit=1000)
    for i in range(500):
        q.put("flooder", ("flood", i))
    q.put("phone", ("dhcp", 0))
    served = [q.pop() for _ in range(3)]
    assert ("dhcp", 0) in served  # served within one round, not after 500 flood packets


def test_a_full_queue_drops_only_that_devices_packets():
    q = FairQueue(per_key_limit=2)
    assert q.put("flooder", 1) and q.put("flooder", 2)
    assert not q.put("flooder", 3)
    assert q.put("phone", "dhcp")
    assert q.dropped == 1 and len(q) == 3


def test_one_key_may_hold_more_than_the_others():
    q = FairQueue(per_key_limit=2, limits={"newcomers": 4})
    assert all(q.put("newcomers", i) for i in range(4))
    assert not q.put("newcomers", 4)
    assert q.put("phone", 0) and q.put("phone", 1) and not q.put("phone", 2)


def test_neither_a_newcomers_storm_nor_a_device_cycling_addresses_drops_the_routers_solicitations():
    """Issue 39 finding 8: the router's stack's neighbour solicitations (and ARP) for devices' addresses
    came from a MAC the router does not know as a device, so they waited in the newcomers' queue, which a
    storm of forged MACs keeps full: the router could not find the devices it routes to. They have queues
    of their own now, one per device asked about, so a device cycling addresses in its /64 (each one
    solicited by the router's stack) fills only the one of questions about itself."""
    router_mac, phone, laptop = "02:48:57:00:00:01", "02:00:00:00:00:aa", "02:00:00:00:00:cc"
    q = FairQueue(per_key_limit=4, limits={NEWCOMERS: 8})
    storm = [put(q, f"06:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}", "storm") for i in range(100)]
    cycling = [put(q, router_mac, "where is the phone", True, phone) for _ in range(100)]
    assert storm.count(True) == 8 and cycling.count(True) == 4
    assert put(q, router_mac, "where is the laptop", True, laptop)
    assert put(q, router_mac, "the router's ARP", True)
    assert {"where is the laptop", "the router's ARP"} <= {q.pop() for _ in range(4)}  # served within a round
    # Positive controls: a decided device has its own queue; the router's MAC forged by a device is a newcomer's.
    assert queue_key(phone, STATES.get) == (phone, None)
    assert queue_key(router_mac, STATES.get) == (UNDECIDED, NEWCOMERS)


def test_a_storm_of_pending_devices_takes_one_turn_per_round_and_a_real_newcomer_still_gets_its_share():
    """Issue 39: a lease-completing storm is hundreds of forged MACs, each a pending device once it has its offer.
    With a queue each, a permitted device's DHCP waited a turn for every one of them (its p99 7.5x quiet's).
    Together they take one turn per round; within it each pending device (a real newcomer among them) and the
    newcomers' queue are served in turn."""
    q = FairQueue(per_key_limit=4, limits={NEWCOMERS: 8})
    storm = [f"06:00:00:00:00:{i:02x}" for i in range(100)]
    STATES.update(dict.fromkeys(storm, State.PENDING))
    real_newcomer = "02:00:00:00:00:bb"
    STATES[real_newcomer] = State.PENDING
    try:
        for mac in storm[:50]:
            assert put(q, mac, ("storm", mac))
        assert put(q, real_newcomer, "its REQUEST")
        for mac in storm[50:]:
            assert put(q, mac, ("storm", mac))
        assert put(q, "02:00:00:00:00:aa", "the phone's DHCP")  # permitted: its own queue
        assert "the phone's DHCP" in [q.pop() for _ in range(2)]  # after one storm frame, not a hundred
        served = [q.pop() for _ in range(len(q))]
        assert served.index("its REQUEST") == 49  # after the 49 storm frames queued before it, not after all
    finally:
        for mac in [*storm, real_newcomer]:
            del STATES[mac]
