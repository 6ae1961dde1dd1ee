"""The DHCP server as a client sees it: per-device /30s, lease times by state, RFC 2131 answers."""

import random
import struct

import dpkt
import pytest
from dhcp_frames import client_frame, frame, reply_of
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from homework_controller.effects import AnswerDhcp
from homework_controller.wire import dhcp_wire, packets
from homework_controller.wire.lan import Subnet

PHONE = "02:00:00:00:00:aa"
TABLET = "02:00:00:00:00:bb"


def answers(effects):
    return [reply_of(e.data) for e in effects if isinstance(e, AnswerDhcp)]


def join(router, mac, hostname=b"phone"):
    """DISCOVER + REQUEST, as dhclient does; returns the ACK's (packet, options)."""
    [(offer, opts)] = answers(router.joining.on_dhcp(frame(mac, "discover", options=[("hostname", hostname)])))
    [(ack, ack_opts)] = answers(
        router.joining.on_dhcp(
            frame(
                mac,
                "request",
                options=[("server_id", opts["server_id"]), ("requested_addr", offer[DHCP].underlayer.yiaddr)],
            )
        )
    )
    return ack, ack_opts


def test_new_device_gets_its_own_slash30_and_a_short_pending_lease(router):
    ack, opts = join(router, PHONE)
    assert opts["message-type"] == 5  # ACK
    ip = ack["BOOTP"].yiaddr
    assert ip.startswith("10.2.") and int(ip.split(".")[3]) % 4 == 2
    gateway = ip.rsplit(".", 1)[0] + "." + str(int(ip.split(".")[3]) - 1)
    assert opts["router"] == gateway and opts["server_id"] == gateway and opts["name_server"] == gateway
    assert opts["subnet_mask"] == "255.255.255.252"
    assert opts["lease_time"] == 30
    assert router.status(PHONE)["state"] == "pending"


def test_two_devices_get_different_subnets_and_the_same_mac_gets_the_same_one_back(router):
    first, _ = join(router, PHONE)
    other, _ = join(router, TABLET)
    again, _ = join(router, PHONE)
    assert first["BOOTP"].yiaddr != other["BOOTP"].yiaddr
    assert again["BOOTP"].yiaddr == first["BOOTP"].yiaddr


def test_permitted_device_renews_for_an_hour(router):
    ack, _ = join(router, PHONE)
    router.decisions.permit(PHONE)
    ip = ack["BOOTP"].yiaddr
    # RENEWING: unicast, ciaddr set, no server id / requested address.
    [(renew, opts)] = answers(
        router.joining.on_dhcp(frame(PHONE, "request", ciaddr=ip, src_ip=ip, dst_ip=opts_gateway(ip)))
    )
    assert opts["message-type"] == 5 and opts["lease_time"] == 3600
    assert renew[IP].dst == ip and renew[Ether].dst == PHONE  # unicast back to the renewing client
    assert router.status(PHONE)["lease_seconds_left"] == 3600


def opts_gateway(ip):
    a, b, c, d = ip.split(".")
    return f"{a}.{b}.{c}.{int(d) - 1}"


def test_offer_goes_to_broadcast_when_client_asks(router):
    [(offer, _)] = answers(router.joining.on_dhcp(frame(PHONE, "discover", flags=0x8000)))
    assert offer[IP].dst == "255.255.255.255" and offer[Ether].dst == "ff:ff:ff:ff:ff:ff"


def test_init_reboot_for_a_wrong_address_is_nakked(router):
    join(router, PHONE)
    [(nak, opts)] = answers(router.joining.on_dhcp(frame(PHONE, "request", options=[("requested_addr", "10.2.99.2")])))
    assert opts["message-type"] == 6
    assert nak[IP].dst == "255.255.255.255"


def test_unknown_device_rebooting_with_an_old_address_is_nakked(router):
    [(_, opts)] = answers(router.joining.on_dhcp(frame(PHONE, "request", options=[("requested_addr", "10.2.0.6")])))
    assert opts["message-type"] == 6


def test_denied_device_gets_no_offer_and_a_nak(router):
    ack, _ = join(router, PHONE)
    router.decisions.deny(PHONE)
    assert answers(router.joining.on_dhcp(frame(PHONE, "discover"))) == []
    [(_, opts)] = answers(router.joining.on_dhcp(frame(PHONE, "request", ciaddr=ack["BOOTP"].yiaddr)))
    assert opts["message-type"] == 6


def test_release_ends_the_lease_but_keeps_the_subnet(router):
    ack, _ = join(router, PHONE)
    ip = ack["BOOTP"].yiaddr
    router.joining.on_dhcp(frame(PHONE, "release", ciaddr=ip, src_ip=ip))
    assert router.dhcp_status() == []
    again, _ = join(router, PHONE)
    assert again["BOOTP"].yiaddr == ip


def test_inform_gets_configuration_without_a_lease(router):
    ack, _ = join(router, PHONE)
    ip = ack["BOOTP"].yiaddr
    [(reply, opts)] = answers(router.joining.on_dhcp(frame(PHONE, "inform", ciaddr=ip, src_ip=ip)))
    assert opts["message-type"] == 5 and "lease_time" not in opts
    assert reply["BOOTP"].yiaddr == "0.0.0.0" and reply[IP].dst == ip


def test_decline_tells_the_household_and_keeps_the_subnet(router):
    ack, _ = join(router, PHONE)
    effects = router.joining.on_dhcp(frame(PHONE, "decline", options=[("requested_addr", ack["BOOTP"].yiaddr)]))
    assert any(getattr(e, "kind", "") == "address-conflict" for e in effects)
    assert router.status(PHONE)["ip"] == ack["BOOTP"].yiaddr


def test_hostname_and_vendor_class_are_recorded_and_sanitised(router):
    router.joining.on_dhcp(
        frame(
            PHONE, "discover", options=[("hostname", b"Tom's\x00\x07 tablet"), ("vendor_class_id", b"android-dhcp-14")]
        )
    )
    status = router.status(PHONE)
    assert status["hostname"] == "Tom's tablet"
    assert status["vendor_class"] == "android-dhcp-14"


def test_new_device_is_announced_to_the_household(router):
    effects = router.joining.on_dhcp(frame(PHONE, "discover", options=[("hostname", b"grandmas-ipad")]))
    assert [e.message for e in effects if getattr(e, "kind", "") == "new-device"] == [
        f"grandmas-ipad ({PHONE}) asks to join"
    ]


def test_a_device_cannot_ask_for_another_devices_lease(router):
    join(router, PHONE)
    # TABLET's frame carries PHONE's chaddr: it would be handed PHONE's address.
    effects = router.joining.on_dhcp(frame(TABLET, "discover", chaddr=PHONE))
    assert effects == []
    assert router.counters["dhcp_spoofed_chaddr"] == 1


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:100],  # truncated header
        lambda b: b[:-1][: len(b) - 20],  # options cut off before END
        lambda b: b[:236] + b"\x00\x00\x00\x00" + b[240:],  # no magic cookie
        lambda b: b[:240] + b"\x35\x05\x01",  # message type with a lying length
        lambda b: b[:240] + b"\x0c\x01\xff\x35",  # 0xff only inside a value; a last tag without length
        lambda b: b"\x02" + b[1:],  # a BOOTREPLY from a "client"
    ],
)
def test_malformed_requests_are_dropped_and_counted(router, mangle):
    good = client_frame(PHONE, "discover")
    # A well-formed frame (scapy sets the IP and UDP lengths) carrying a malformed DHCP message.
    wire = bytes(
        Ether(good[:14]) / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67) / Raw(mangle(good[42:]))
    )
    assert router.joining.on_dhcp(packets.parse(wire)) == []
    assert router.counters["dhcp_malformed"] == 1
    assert PHONE not in router.devices  # nothing was allocated for it
    # ...and the next good client is served as usual, as is the same device with a good message.
    assert join(router, TABLET)[1]["message-type"] == 5
    assert join(router, PHONE)[1]["message-type"] == 5


def test_a_frame_whose_lengths_lie_is_refused_before_dhcp_sees_it():
    good = client_frame(PHONE, "discover")
    with pytest.raises(packets.MalformedFrame):
        packets.parse(good[:42] + good[42:100])  # the UDP header promises more than the frame holds
    assert packets.parse(good).payload == good[42:]


def test_random_garbage_never_raises():
    rng = random.Random(7)
    good = client_frame(PHONE, "request", options=[("hostname", b"x" * 30)])[42:]
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 12)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data[: rng.randint(0, len(data))]) if rng.random() < 0.3 else bytes(data)
        try:
            dhcp_wire.decode_request(data)
        except dhcp_wire.MalformedDhcp:
            pass


def test_an_answer_carries_the_checksums_a_client_that_checks_them_verifies(router):
    [offer] = [e.data for e in router.joining.on_dhcp(frame(PHONE, "discover")) if isinstance(e, AnswerDhcp)]

    def sums(data):
        pkt = Ether(data)
        return pkt[IP].chksum, pkt[UDP].chksum

    def recomputed(data):  # what scapy works out for the same octets
        pkt = Ether(data)
        del pkt[IP].chksum, pkt[UDP].chksum
        return sums(bytes(pkt))

    assert sums(offer) == recomputed(offer)
    changed = offer[:-2] + bytes([offer[-2] ^ 0x5A]) + offer[-1:]
    assert sums(changed)[1] != recomputed(changed)[1]  # an octet changed on the way would be caught


def test_the_checksum_is_dpkts():
    """packets.internet_checksum (one big-integer remainder, for speed) against dpkt.in_cksum, the reference:
    random octets of every length up to a large DHCP answer, odd ones included, and the sums' edge cases (all
    zeros, all ones, nothing at all)."""
    rng = random.Random(1071)
    cases = [b"", b"\x00", b"\xff", bytes(20), b"\xff" * 20, b"\xff\xfe\x00\x01"]
    cases += [rng.randbytes(rng.randrange(600)) for _ in range(5000)]
    assert [packets.internet_checksum(c) for c in cases] == [dpkt.in_cksum(c) for c in cases]
    assert len({packets.internet_checksum(c) for c in cases}) > 1000  # not one value for everything


def test_encoded_reply_round_trips_through_scapy():
    reply = dhcp_wire.DhcpReply(
        msg_type=dhcp_wire.OFFER,
        xid=99,
        flags=0,
        chaddr=PHONE,
        ciaddr="0.0.0.0",
        yiaddr="10.2.0.6",
        server_ip="10.2.0.5",
        dst_ip="10.2.0.6",
        dst_mac=PHONE,
        lease_seconds=30,
        subnet=Subnet(1),
    )
    bootp = BOOTP(dhcp_wire.encode_reply(reply))
    opts = dict(o for o in bootp[DHCP].options if isinstance(o, tuple) and len(o) == 2)
    assert bootp.xid == 99 and bootp.yiaddr == "10.2.0.6"
    assert opts["renewal_time"] == 15 and opts["rebinding_time"] == 26


def test_the_struct_parsers_read_frames_and_requests_as_dpkt_does():
    """packets.parse and dhcp_wire.decode_request unpack with struct for speed (a DHCP storm); dpkt stays
    the reference. Thousands of mutated client frames (lengths, flags, options, truncations) are read
    the same way by both, or refused by both."""
    rng = random.Random(1305)
    seeds = [
        client_frame(PHONE, t, options=[("hostname", "phone"), ("requested_addr", "10.2.0.6")])
        for t in ("discover", "request")
    ]

    def by_dpkt(data):
        try:
            eth = dpkt.ethernet.Ethernet(data)
            ip = eth.data
            if not isinstance(ip, dpkt.ip.IP) or ip.offset or not isinstance(ip.data, dpkt.udp.UDP):
                return "malformed"  # no DHCP in it
            udp = ip.data
            if udp.ulen < 8 or udp.ulen - 8 > len(udp.data):
                return "malformed"
            payload = bytes(udp.data[: udp.ulen - 8])
            msg = dpkt.dhcp.DHCP(payload)
            return (msg.xid, msg.flags, msg.chaddr[:6].hex(":"), dict(msg.opts).get(53))
        except (dpkt.UnpackError, ValueError, IndexError, struct.error):
            return "malformed"

    def ours(data):
        try:
            f = packets.parse(data)
        except packets.MalformedFrame:
            return "malformed"
        try:
            req = dhcp_wire.decode_request(f.payload)
        except dhcp_wire.MalformedDhcp:
            return "malformed"
        return (req.xid, req.flags, req.chaddr, bytes([req.msg_type]))

    compared = 0
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            if len(data) < 2:
                break
            at = rng.randrange(1, len(data))
            if rng.random() < 0.1:
                del data[at:]
            else:
                data[at] = rng.randrange(256)
        mine, reference = ours(bytes(data)), by_dpkt(bytes(data))
        if mine != "malformed" and reference != "malformed":
            assert mine == reference, bytes(data).hex()
            compared += 1
        elif mine != "malformed":
            # Accepted here, refused by dpkt: only for what decode_request checks itself (dpkt's
            # option parser gives up on a cut-off option that ours keeps as far as it goes).
            assert reference == "malformed", bytes(data).hex()
    assert compared > 1000  # most mutations leave a readable request: the comparison is real
