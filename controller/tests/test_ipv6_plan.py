"""The IPv6 prefix plan: the home's ULA /48 made once and kept, each device's /64s, global /64s shared out
in order of permission when the ISP delegates fewer than there are devices."""

import ipaddress
import os

import pytest

from homework_controller.concerns import ipv6
from homework_controller.edge.lan import ipv6_files
from homework_controller.model import Device, State
from homework_controller.wire import prefixes
from homework_controller.wire.lan import Subnet

ULA = prefixes.ula_prefix(0x12_3456_789A)


def device(mac_last: int, index: int) -> Device:
    return Device(mac=f"02:00:00:00:00:{mac_last:02x}", state=State.PERMITTED, subnet=Subnet(index))


def test_ula_is_rfc4193_fd_with_the_global_id():
    assert str(ULA) == "fd12:3456:789a::/48"
    assert ULA.is_private


def test_the_ula_is_made_once_and_kept_beside_the_database(tmp_path):
    first = ipv6_files.load_or_make_ula(tmp_path, random_id=lambda: 0xABCDEF0123)
    assert str(first) == "fdab:cdef:123::/48"
    assert (tmp_path / ipv6_files.ULA_ID_FILE).read_text() == "abcdef0123\n"
    # A restart reads it back: a different random ID would renumber every device.
    again = ipv6_files.load_or_make_ula(tmp_path, random_id=lambda: 0x1111111111)
    assert again == first


def test_a_corrupt_ula_file_is_a_clear_error_not_a_new_prefix(tmp_path):
    (tmp_path / ipv6_files.ULA_ID_FILE).write_text("not hex\n")
    with pytest.raises(prefixes.BadPrefix, match="remove it"):
        ipv6_files.load_or_make_ula(tmp_path)
    # positive control: a good file is read
    (tmp_path / ipv6_files.ULA_ID_FILE).write_text("0000000001\n")
    assert str(ipv6_files.load_or_make_ula(tmp_path)) == "fd00:0:1::/48"


@pytest.mark.parametrize("text", ["fd00::/56", "fe80::/64", "2001:db8::/40", "2001:db8::/65", "10.0.0.0/8", "nonsense"])
def test_a_delegated_prefix_must_be_a_global_48_to_64(text):
    with pytest.raises(prefixes.BadPrefix):
        prefixes.parse_delegated(text)


def test_a_delegated_prefix_is_read():
    assert str(prefixes.parse_delegated("2001:db8:100::/56")) == "2001:db8:100::/56"  # the emulated ISP's
    assert str(prefixes.parse_delegated("2a00:1450:100::/56")) == "2a00:1450:100::/56"
    assert prefixes.parse_delegated("") is None


def test_the_delegated_prefix_is_read_from_beside_the_database(tmp_path):
    assert ipv6_files.read_delegated(tmp_path) is None
    path = tmp_path / ipv6_files.DELEGATED_FILE
    path.parent.mkdir()
    path.write_text("2001:db8:100::/56\n")  # the one-line format: no lifetimes
    assert ipv6_files.read_delegated(tmp_path) == prefixes.Delegation(ipaddress.IPv6Network("2001:db8:100::/56"))
    # With the ISP's preferred and valid lifetimes: until then, counted from when the client wrote the file.
    path.write_text("2001:db8:100::/56 300 600\n")
    os.utime(path, (1_000_000, 1_000_000))
    assert ipv6_files.read_delegated(tmp_path) == prefixes.Delegation(
        ipaddress.IPv6Network("2001:db8:100::/56"), (1_000_300, 1_000_600)
    )
    path.write_text("\n")  # the delegation ended
    assert ipv6_files.read_delegated(tmp_path) is None
    path.write_text("fd00::/48\n")
    with pytest.raises(prefixes.BadPrefix, match=ipv6_files.DELEGATED_FILE):
        ipv6_files.read_delegated(tmp_path)


@pytest.mark.parametrize("text", ["2001:db8:100::/56 300", "2001:db8:100::/56 600 300", "2001:db8:100::/56 x 600"])
def test_lifetimes_are_two_whole_seconds_preferred_no_longer_than_valid(text):
    with pytest.raises(prefixes.BadPrefix):
        prefixes.parse_delegation(text, 0.0)
    # positive control: the same prefix with sound lifetimes
    assert prefixes.parse_delegation("2001:db8:100::/56 300 600", 0.0) is not None


def test_each_device_has_its_ula_64_numbered_as_its_30():
    plan = prefixes.PrefixPlan(ULA)
    addrs = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    assert addrs.prefixes_of(device(1, 1), True) == ("fd12:3456:789a:1::/64",)
    assert addrs.prefixes_of(device(2, 300), True) == ("fd12:3456:789a:12c::/64",)
    # The last /30 still fits in the /48.
    assert plan.ula_of(16383) == "fd12:3456:789a:3fff::/64"


def test_a_pending_or_denied_device_has_no_prefix():
    addrs = ipv6.Ipv6Addresses(prefixes.PrefixPlan(ULA, ipaddress.IPv6Network("2a00:1:2:300::/56")), clock=lambda: 0.0)
    assert addrs.prefixes_of(device(1, 1), False) == ()
    assert addrs.prefixes_of(device(1, 1), True) == ("2a00:1:2:301::/64", "fd12:3456:789a:1::/64")


def test_global_64s_prefer_the_30s_number_so_a_restart_keeps_them():
    plan = prefixes.PrefixPlan(ULA, ipaddress.IPv6Network("2a00:1:2:300::/56"))
    before = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    after = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    a, b = device(1, 5), device(2, 9)
    first = (before.prefixes_of(a, True), before.prefixes_of(b, True))
    # After a restart the devices are seen in another order: same /64s.
    assert (after.prefixes_of(a, True), after.prefixes_of(b, True)) == first
    assert after.prefixes_of(b, True)[0] == "2a00:1:2:309::/64"


def test_with_fewer_64s_than_devices_the_first_permitted_get_global_the_rest_ula_only():
    plan = prefixes.PrefixPlan(ULA, ipaddress.IPv6Network("2a00:1:2:30::/60"))  # 16 /64s: 15 for devices
    assert plan.global_slots == 15
    addrs = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    devices = [device(n, 100 + n) for n in range(17)]  # indexes beyond the /60: lowest free /64 in turn
    got = [addrs.prefixes_of(d, True) for d in devices]
    assert [len(p) for p in got] == [2] * 15 + [1, 1]
    assert len({p[0] for p in got[:15]}) == 15
    assert got[0][0] == "2a00:1:2:31::/64"  # /64 number 0 is the router's own
    assert got[15] == (plan.ula_of(115),)
    # One of the first stops forwarding (denied): its global /64 goes to the next device that asks.
    assert addrs.prefixes_of(devices[3], False) == ()
    assert addrs.prefixes_of(devices[16], True)[0] == got[3][0]


def test_with_only_a_64_delegated_devices_are_ula_only():
    plan = prefixes.PrefixPlan(ULA, ipaddress.IPv6Network("2a00:1:2:3::/64"))
    assert plan.global_slots == 0
    addrs = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    assert addrs.prefixes_of(device(1, 1), True) == ("fd12:3456:789a:1::/64",)


def test_forgetting_a_device_frees_its_global_64():
    plan = prefixes.PrefixPlan(ULA, ipaddress.IPv6Network("2a00:1:2:2::/63"))  # one /64 for devices
    addrs = ipv6.Ipv6Addresses(plan, clock=lambda: 0.0)
    a, b = device(1, 1), device(2, 2)
    assert len(addrs.prefixes_of(a, True)) == 2
    assert len(addrs.prefixes_of(b, True)) == 1
    addrs.forget(a.mac)
    assert not addrs.knows(a.mac)
    assert addrs.prefixes_of(b, True)[0] == "2a00:1:2:3::/64"  # the /63s second


def test_gateway_is_the_64s_first_address():
    assert prefixes.gateway_of("2a00:1:2:301::/64") == "2a00:1:2:301::1"
