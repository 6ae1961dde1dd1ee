"""The end-host agent on a household computer: the router learns which program owns a
connection, and classifies the connection by it; a computer can speak only for itself."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from homenet import INTERNET_IP, REPO, wait_until
from homenet.home import HWDB_BIN

AGENT = REPO / "endhost-agent" / "bin" / "endhost-agent"
MARKED_HIGH = "ip[1] & 0xfc == 0xb8"  # DSCP 46 (EF) in the TOS byte: the High class's mark
PACED = f"http://{INTERNET_IP}/paced/big.bin"  # 10 s at 100 kB/s: a connection that stays open


@pytest.fixture
def laptop(home):
    for name in ("laptop", "phone"):
        home.add(name)
        home.dhcp(name)
        home.permit(name)
        home.dhcp(name)
    agent = home.spawn(
        "laptop", AGENT, "--host", "laptop", "--interval", "100ms", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    yield "laptop"
    agent.terminate()
    agent.wait(timeout=10)


def gateway(home, name: str) -> str:
    return home.exec(name, "ip", "route", "show", "default").stdout.split()[2]


def download_as(home, device: str, program: str, programs_dir: Path) -> subprocess.Popen:
    """curl under another name: what the agent reports is the program's name."""
    binary = programs_dir / program
    if not binary.exists():
        shutil.copy(shutil.which("curl") or "/usr/bin/curl", binary)
    return home.spawn(device, binary, "-s", "-o", "/dev/null", PACED, stdout=subprocess.DEVNULL)


def test_a_program_named_by_the_agent_is_classified_by_its_name(home, laptop):
    home.hwdb("insert into AppPriority values ('video-call', 'high')")
    address = home.address(laptop)
    with tempfile.TemporaryDirectory() as tmp:
        programs = Path(tmp)
        # The port alone says "web" (80); the agent says the program is zoom, a video call.
        with home.internet_capture(f"tcp dst port 80 and {MARKED_HIGH}") as marked:
            call = download_as(home, laptop, "zoom", programs)
            wait_until(
                "the agent's report of zoom's connection in AppTuples",
                lambda: home.hwdb(f"select * from AppTuples where saddr = '{address}' and app = 'zoom'"),
                10,
            )
            wait_until("zoom's packets to leave marked High", lambda: len(marked()) >= 5, 5)
            call.terminate()
        # Positive control: the same download under its own name stays "web", unmarked.
        with (
            home.internet_capture(f"tcp dst port 80 and {MARKED_HIGH}") as marked,
            home.internet_capture("tcp dst port 80") as everything,
        ):
            web = download_as(home, laptop, "curl", programs)
            wait_until(
                "curl's report in AppTuples",
                lambda: home.hwdb(f"select * from AppTuples where saddr = '{address}' and app = 'curl'"),
                10,
            )
            time.sleep(2)
            web.terminate()
            assert len(everything()) >= 5 and marked() == []


def test_a_computer_may_report_only_its_own_connections(home, laptop):
    own, other = home.address(laptop), home.address("phone")
    server = f"{gateway(home, laptop)}:987"

    def report(saddr: str) -> subprocess.CompletedProcess:
        statement = f"insert into AppTuples values (6, '{saddr}', 40000, '{INTERNET_IP}', 443, 'zoom', 'laptop')"
        return home.exec(laptop, HWDB_BIN, "query", "--server", server, "--timeout", "2", statement, check=False)

    forged = report(other)
    assert forged.returncode != 0 and "forbidden" in forged.stderr + forged.stdout
    assert not home.hwdb(f"select * from AppTuples where saddr = '{other}'")
    assert report(own).returncode == 0  # positive control: about its own address
    assert home.hwdb(f"select * from AppTuples where saddr = '{own}' and sport = 40000")
