"""The app table (data) and the classifier: each source, and their precedence agent > DNS > port > behaviour."""

import pytest

from homework_controller import flows
from homework_controller.policy import apps

TABLE = apps.load_table()
PHONE_IP, ZOOM_IP, WEB_IP = "10.2.0.6", "198.51.100.7", "198.51.100.80"
UDP, TCP = flows.PROTO_UDP, flows.PROTO_TCP


def conn(proto=TCP, dport=443, daddr=ZOOM_IP, sport=40000):
    return flows.FiveTuple(proto, PHONE_IP, sport, daddr, dport)


def test_the_agents_report_names_the_connection_first_and_a_known_program_maps_to_its_app():
    assert apps.classify(TABLE, conn(), "zoom", TABLE.app_of_names(["www.example.test"])) == ("video-call", apps.AGENT)
    assert apps.classify(TABLE, conn(), "Firefox") == ("web", apps.AGENT)  # process names compared lower-case
    # A program no app lists is an app of its own (the household can give it a priority by that name).
    assert apps.classify(TABLE, conn(), "backup-tool") == ("backup-tool", apps.AGENT)


def test_the_names_the_device_looked_up_come_next_before_the_port():
    assert apps.classify(TABLE, conn(), None, TABLE.app_of_names(["us04web.zoom.us"])) == ("video-call", apps.DNS)
    assert apps.classify(TABLE, conn(), None, TABLE.app_of_names(["zoom.us"])) == ("video-call", apps.DNS)
    assert apps.classify(TABLE, conn(), None, TABLE.app_of_names(["Us04Web.ZOOM.us."])) == (
        "video-call",
        apps.DNS,
    )  # as DNS compares
    # "*.zoom.us" does not match a name that merely ends in "zoom.us".
    assert apps.classify(TABLE, conn(), None, TABLE.app_of_names(["notzoom.us"])) == ("web", apps.PORT)
    assert apps.classify(TABLE, conn(), None, TABLE.app_of_names(["rr3.googlevideo.com"])) == ("streaming", apps.DNS)


def test_the_service_port_either_way_then_behaviour_then_other():
    assert apps.classify(TABLE, conn(TCP, 443)) == ("web", apps.PORT)
    reply = flows.FiveTuple(TCP, WEB_IP, 443, PHONE_IP, 40000)
    assert apps.classify(TABLE, reply) == ("web", apps.PORT)
    assert apps.classify(TABLE, conn(UDP, 19305)) == ("video-call", apps.PORT)  # a range
    assert apps.classify(TABLE, conn(UDP, 8805)) == ("video-call", apps.PORT)
    assert apps.classify(TABLE, conn(TCP, 22)) == ("ssh", apps.PORT)
    unknown = conn(UDP, 40001)
    assert apps.classify(TABLE, unknown) == (apps.OTHER, apps.UNKNOWN)
    steady_small = apps.FlowRates(pps=50, previous_pps=45, mean_packet_bytes=120)
    assert apps.classify(TABLE, unknown, rates=steady_small) == ("interactive", apps.BEHAVIOUR)
    long_fast = apps.FlowRates(pps=900, previous_pps=850, mean_packet_bytes=1400)
    assert apps.classify(TABLE, unknown, rates=long_fast) == ("bulk", apps.BEHAVIOUR)
    # Not yet judged: a burst (no earlier poll), or an unsteady rate.
    assert apps.classify(TABLE, unknown, rates=apps.FlowRates(900, 0, 1400)) == (apps.OTHER, apps.UNKNOWN)
    assert apps.classify(TABLE, unknown, rates=apps.FlowRates(50, 5, 120)) == (apps.OTHER, apps.UNKNOWN)
    # Behaviour never overrides what a port says.
    assert apps.classify(TABLE, conn(TCP, 443), rates=long_fast) == ("web", apps.PORT)


def test_the_shipped_table_keeps_the_old_port_tables_knowledge():
    expected = {
        (TCP, 80): "web",
        (TCP, 8080): "web",
        (TCP, 25): "email",
        (TCP, 993): "email",
        (TCP, 1935): "streaming",
        (TCP, 3074): "games",
        (TCP, 5222): "messaging",
        (TCP, 853): "dns",
        (UDP, 53): "dns",
        (UDP, 443): "web",
        (UDP, 123): "time",
        (UDP, 3478): "video-call",
        (UDP, 5060): "video-call",
        (UDP, 27015): "games",
        (UDP, 16400): "video-call",
        (UDP, 5353): "local",
    }
    for (proto, port), app in expected.items():
        assert TABLE.app_of_ports(flows.FiveTuple(proto, PHONE_IP, 40000, WEB_IP, port)) == app
    assert TABLE.default_priority("video-call") == "high" and TABLE.default_priority("web") == "default"
    assert TABLE.default_priority("not-in-the-table") == "default"


def test_a_table_of_ones_own_replaces_the_shipped_one(tmp_path):
    path = tmp_path / "apps.toml"
    path.write_text('[apps.homework]\npriority = "high"\nnames = ["*.example.test"]\ntcp = ["8000-8002"]\n')
    table = apps.load_table(str(path))
    assert apps.classify(table, conn(TCP, 8001)) == ("homework", apps.PORT)
    assert apps.classify(table, conn(TCP, 443), by_name=table.app_of_names(["a.example.test"])) == (
        "homework",
        apps.DNS,
    )
    assert apps.classify(table, conn(TCP, 443)) == (apps.OTHER, apps.UNKNOWN)  # the old table is gone


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("[apps.x]\npriority = 'urgent'\n", "priority must be one of"),
        ("[apps.x]\ntcp = ['80-']\n", "a port is a number"),
        ("[apps.x]\nudp = [70000]\n", "out of 1-65535"),
        ("[apps.x]\nport = [80]\n", "unknown keys"),
        ("[apps.x\n", "not TOML"),
        ("[behaviour]\nbulk_min_pps = 5\n", "no [apps.NAME]"),
        ("[apps.x]\n[behaviour]\nbulk_pps = 5\n", "[behaviour]"),
    ],
)
def test_a_bad_table_is_refused_saying_what_is_wrong(text, complaint):
    with pytest.raises(apps.BadAppTable, match=complaint.replace("[", r"\[")):
        apps.parse_table(text)


def test_the_name_memory_is_per_device_and_bounded():
    memory = apps.NameMemory(TABLE.app_of_names, max_entries=2)
    memory.learn(PHONE_IP, "us04web.zoom.us", ZOOM_IP)
    assert memory.names(PHONE_IP, ZOOM_IP) == ("us04web.zoom.us",)
    assert memory.app_of(PHONE_IP, ZOOM_IP) == "video-call"  # worked out once, when it was learnt
    assert memory.app_of("10.2.0.10", ZOOM_IP) is None
    assert memory.names("10.2.0.10", ZOOM_IP) == ()  # another device's lookup names nothing of the phone's
    memory.learn(PHONE_IP, "a.test", "198.51.100.1")
    memory.learn(PHONE_IP, "b.test", "198.51.100.2")
    assert memory.names(PHONE_IP, ZOOM_IP) == ()  # the least recently learnt went first


def test_one_devices_answers_cannot_erase_anothers_names():
    """Issue 39 finding 8: the memory's entries were shared by all devices, so a device resolving names in
    a zone it controls pushed out every other device's, and with them its apps' marks. Now each device
    holds at most `per_device` (all its addresses together: an IPv6 device cycling addresses in its /64
    is one device), and a full memory takes from the device holding the most."""
    laptop_ip, tablet_ip = "10.2.0.10", "10.2.0.14"
    owners = {PHONE_IP: "phone", laptop_ip: "laptop", tablet_ip: "tablet"}

    def owner_of(ip):
        return "laptop" if ip.startswith("2001:db8:1:2:") else owners[ip]

    memory = apps.NameMemory(TABLE.app_of_names, max_entries=7, per_device=4, owner_of=owner_of)
    memory.learn(PHONE_IP, "us04web.zoom.us", ZOOM_IP)
    for n in range(1000):  # the laptop, from its IPv4 address and from ever new addresses in its /64
        memory.learn(laptop_ip if n % 2 else f"2001:db8:1:2::{n:x}", f"{n}.evil.test", f"198.18.{n // 250}.{n % 250}")
    assert memory.app_of(PHONE_IP, ZOOM_IP) == "video-call"
    assert len(memory) == 5  # the phone's one, the laptop's four (its most recent)
    assert memory.names(laptop_ip, "198.18.3.249") == ("999.evil.test",)
    # A full memory: the tablet's learning takes from the laptop, the device holding the most.
    for n in range(3):
        memory.learn(tablet_ip, f"{n}.shop.test", f"203.0.113.{n}")
    assert len(memory) == 7 and memory.app_of(PHONE_IP, ZOOM_IP) == "video-call"
    assert [memory.names(tablet_ip, f"203.0.113.{n}") for n in range(3)] == [(f"{n}.shop.test",) for n in range(3)]
    assert memory.names("2001:db8:1:2::3e4", "198.18.3.246") == ()  # the laptop's oldest went
    assert memory.names(laptop_ip, "198.18.3.247") == ("997.evil.test",)
