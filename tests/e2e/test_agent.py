"""The end-host agent on a household computer: the router learns which program owns a
connection, and classifies the connection by it; a computer can speak only for itself, and the
agent reports only to the router that proves it holds the household's key."""

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


def router_key_file(home) -> Path:
    """The household's agent key, which hwdb makes in its directory of the router's state (what
    the owner copies from the web UI into the agent)."""
    return home.run_dir / "hwdb" / "agent.key"


def start_agent(home, device: str, *key_args: str) -> subprocess.Popen:
    return home.spawn(
        device,
        AGENT,
        "--host",
        device,
        "--interval",
        "100ms",
        *key_args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(agent: subprocess.Popen) -> str:
    """Stop the agent; its log."""
    agent.terminate()
    return agent.communicate(timeout=10)[1]


def join(home, *names: str) -> None:
    for name in names:
        home.add(name)
        home.dhcp(name)
        home.permit(name)
        home.dhcp(name)


@pytest.fixture
def laptop(home):
    join(home, "laptop", "phone")
    agent = start_agent(home, "laptop", "--router-key-file", str(router_key_file(home)))
    yield "laptop"
    stop(agent)


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


def test_the_agent_reports_only_to_the_router_that_proves_the_households_key(home):
    join(home, "tablet")
    address = home.address("tablet")
    right = router_key_file(home).read_text().strip()
    wrong = ("0" if right[0] != "0" else "1") + right[1:]
    reported = f"select * from AppTuples where saddr = '{address}' and app = 'zoom'"
    with tempfile.TemporaryDirectory() as tmp:
        call = download_as(home, "tablet", "zoom", Path(tmp))  # open for 10 s
        try:
            # A wrong key (as if this were another household's router): nothing is reported.
            agent = start_agent(home, "tablet", "--router-key", wrong)
            time.sleep(3)  # 30 scans, each of which would have reported the open connection
            log = stop(agent)
            assert "not paired with this router" in log and "--router-key from the router's web UI" in log, log
            assert not home.hwdb(f"select * from AppTuples where saddr = '{address}'")
            # Positive control: the router's own key, and the same connection is reported.
            agent = start_agent(home, "tablet", "--router-key", right)
            try:
                wait_until("the tablet's report of zoom in AppTuples", lambda: home.hwdb(reported), 10)
            finally:
                stop(agent)
        finally:
            call.terminate()
