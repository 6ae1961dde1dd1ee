from homework_controller.fairness import FairQueue


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
