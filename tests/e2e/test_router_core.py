"""The router core with real clients: dhclient, ping, curl, dig through real Open vSwitch."""
from __future__ import annotations

import re
import subprocess
import time

from conftest import HOMENET, INTERNET_IP, REPO, sh

PY = str(REPO / ".venv" / "bin" / "python")


def test_new_device_gets_its_own_slash30_a_30s_lease_and_no_connectivity(home):
    home.add("newcomer")
    addr = home.dhcp("newcomer")
    m = re.fullmatch(r"10\.2\.(\d+)\.(\d+)/30", addr)
    assert m and int(m.group(2)) % 4 == 2, addr
    gateway = f"10.2.{m.group(1)}.{int(m.group(2)) - 1}"
    assert f"default via {gateway}" in home.run("newcomer", "ip", "route").stdout
    assert 20 <= home.lease_left("newcomer") <= 30
    assert home.fetch("newcomer", f"http://{INTERNET_IP}/", timeout=3).stdout != "200"
    assert home.run("newcomer", "ping", "-c", "2", "-W", "1", INTERNET_IP, check=False).returncode != 0


def test_permitted_device_renews_for_an_hour_and_reaches_the_internet_by_name(home):
    home.add("guestphone")
    home.dhcp("guestphone")
    assert home.permit("guestphone")["state"] == "permitted"
    # dhclient renews by itself at half the 30 s lease; the renewal must bring the hour-long lease.
    home.wait_for_lease_left("guestphone", 3500, timeout=25)
    time.sleep(1)  # dhclient-script rewrites resolv.conf just after the renewal: let it finish
    assert home.fetch("guestphone").stdout == "200"
    answer = home.run("guestphone", "dig", "+short", "+time=2", "+tries=1", "www.example.test").stdout.split()
    assert answer == [INTERNET_IP]


def test_two_permitted_devices_reach_each_other_only_through_the_router(home):
    for name in ("alice", "bob"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
    bob_ip = home.run("bob", "ip", "-4", "-o", "addr", "show", "wlan0").stdout.split()[3].split("/")[0]

    def packets_routed_to_bob():
        # The routing table's rule for traffic that came in from the air and goes back out to Bob.
        [count] = re.findall(rf"n_packets=(\d+).*in_port=1,nw_dst={re.escape(bob_ip)} ", home.flows(2))
        return int(count)

    before = packets_routed_to_bob()
    out = home.run("alice", "ping", "-c", "5", "-i", "0.2", "-W", "2", bob_ip).stdout
    assert " 0% packet loss" in out
    # The router decremented the TTL: Bob's replies arrive with 63, not 64.
    assert "ttl=63" in out
    # OVS folds datapath counters into rule statistics every few hundred milliseconds.
    deadline = time.time() + 5
    while packets_routed_to_bob() - before < 5 and time.time() < deadline:
        time.sleep(0.2)
    assert packets_routed_to_bob() - before >= 5


def test_deny_cuts_a_permitted_device_off_at_once_even_mid_download(home):
    home.add("laptop")
    home.dhcp("laptop")
    home.permit("laptop")
    assert home.fetch("laptop").stdout == "200"
    # A slow download (1 MB at 200 kB/s: 5 s if left alone) is in progress when the household says no.
    download = subprocess.Popen([HOMENET, "client", "exec", "laptop", "--", "curl", "-sS", "-m", "12",
                                 "--limit-rate", "200k", "-o", "/dev/null", "-w", "%{size_download}",
                                 f"http://{INTERNET_IP}/big.bin"], stdout=subprocess.PIPE, text=True)
    time.sleep(2)
    home.deny("laptop")
    out, _ = download.communicate(timeout=30)
    assert download.returncode != 0, "the download finished although the device was denied"
    assert int(out or 0) < 800_000
    assert home.run("laptop", "ping", "-c", "2", "-W", "1", INTERNET_IP, check=False).returncode != 0


def test_permitted_devices_stay_permitted_with_the_same_slash30_across_a_controller_restart(home):
    home.add("tv")
    addr = home.dhcp("tv")
    home.permit("tv")
    sh(HOMENET, "restart", "controller", timeout=90)
    status, body = home.api("GET", f"status/{home.mac('tv')}")
    assert status == 200 and body["state"] == "permitted" and f"{body['ip']}/30" == addr
    assert home.fetch("tv").stdout == "200"   # rules are back without the device doing anything
    assert home.dhcp("tv") == addr            # and it renews into the same /30, for an hour
    assert home.lease_left("tv") > 3500


def test_a_device_forging_another_devices_address_gets_nothing_through(home):
    home.add("honest")
    home.dhcp("honest")
    home.permit("honest")
    honest_ip = home.run("honest", "ip", "-4", "-o", "addr", "show", "wlan0").stdout.split()[3].split("/")[0]
    mallory_mac = home.add("mallory")
    home.dhcp("mallory")
    home.permit("mallory")
    capture = subprocess.Popen(["ip", "netns", "exec", "hw-inet", "tcpdump", "-nli", "eth0",
                                "icmp and icmp[icmptype] = icmp-echo"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(1.5)
    forge = (
        "from scapy.all import Ether, IP, ICMP, sendp\n"
        f"sendp(Ether(src='{mallory_mac}', dst='02:48:57:00:00:01') / IP(src='{honest_ip}', dst='{INTERNET_IP}')"
        " / ICMP(id=4242), iface='wlan0', count=10, inter=0.05, verbose=False)\n")
    home.run("mallory", PY, "-c", forge)
    # One honest ping from mallory's own address shows the capture does see what gets through.
    home.run("mallory", "ping", "-c", "1", "-W", "2", INTERNET_IP)
    time.sleep(1)
    capture.terminate()
    out, _ = capture.communicate(timeout=10)
    assert len(out.strip().splitlines()) == 1, f"forged packets reached the internet:\n{out}"


def test_malformed_dhcp_is_dropped_without_harming_service_to_others(home):
    home.add("fuzzer")
    mac = home.mac("fuzzer")
    fuzz = (
        "import random\n"
        "from scapy.all import Ether, IP, UDP, BOOTP, DHCP, Raw, sendp\n"
        f"mac = '{mac}'\n"
        "base = Ether(src=mac, dst='ff:ff:ff:ff:ff:ff') / IP(src='0.0.0.0', dst='255.255.255.255') / UDP(sport=68, dport=67)\n"
        "good = bytes(BOOTP(op=1, chaddr=bytes.fromhex(mac.replace(':', ''))) / DHCP(options=[('message-type', 'discover'), 'end']))\n"
        "frames = [base / Raw(good[:60]), base / Raw(good[:240] + b'\\x35\\x09\\x01'),\n"
        "          base / Raw(good[:236] + b'\\x00' * 4 + good[240:]), base / Raw(b'\\xff' * 300)]\n"
        "rng = random.Random(1)\n"
        "for _ in range(200):\n"
        "    b = bytearray(good)\n"
        "    for _ in range(8): b[rng.randrange(len(b))] = rng.randrange(256)\n"
        "    frames.append(base / Raw(bytes(b)))\n"
        "sendp(frames, iface='wlan0', verbose=False)\n")
    home.run("fuzzer", PY, "-c", fuzz)
    home.add("bystander")
    started = time.monotonic()
    assert home.dhcp("bystander").startswith("10.2.")
    assert time.monotonic() - started < 10
    status, counters = home.api("GET", "counters")
    assert status == 200 and counters["dhcp_malformed"] >= 3
