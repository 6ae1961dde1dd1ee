from homework_controller.edge.switch.fairness import FairQueue


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
    from homework_controller.edge.switch.fair_serving import NEWCOMERS, queue_key

    router_mac, phone, laptop = "02:48:57:00:00:01", "02:00:00:00:00:aa", "02:00:00:00:00:cc"
    known = {phone, laptop}.__contains__
    q = FairQueue(per_key_limit=4, limits={NEWCOMERS: 8})
    storm = [q.put(queue_key(f"06:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}", known), "storm") for i in range(100)]
    cycling = [q.put(queue_key(router_mac, known, True, phone), "where is the phone") for _ in range(100)]
    assert storm.count(True) == 8 and cycling.count(True) == 4
    assert q.put(queue_key(router_mac, known, True, laptop), "where is the laptop")
    assert q.put(queue_key(router_mac, known, True), "the router's ARP")
    assert {"where is the laptop", "the router's ARP"} <= {q.pop() for _ in range(4)}  # served within a round
    # Positive controls: a known device has its own queue; the router's MAC forged by a device is a newcomer's.
    assert queue_key(phone, known) == phone
    assert queue_key(router_mac, known) == NEWCOMERS
