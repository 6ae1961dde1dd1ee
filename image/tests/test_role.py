"""The satellite role at first boot (homework_image.role): the role file, the first-run page's request taken as
root, the units each role starts, the satellite's network and what its health check and console say."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import build
import homework_deploy
from homework_deploy import systemd
from homework_image import console, health, network, role

SETTINGS = build.SETTINGS
ROLE_FILE = str(role.ROLE_FILE)
ROOTFS = build.IMAGE_DIR / "rootfs"
ROUTER_SERVICES = {"hwdb", "hostapd", "controller", "webui", "wan-pd", "radio-refresh"}


def unit_lines(text: str, key: str) -> list[str]:
    return [line.partition("=")[2] for line in text.splitlines() if line.startswith(key + "=")]


def image_units() -> dict[str, str]:
    services = homework_deploy.load(SETTINGS, platform="image")
    return systemd.render_all(services, str(SETTINGS["PYTHON"]), role_file=ROLE_FILE)


# ---- the role file


def test_the_role_file_says_the_access_points_name_and_channel_and_nothing_else():
    assert role.parse("") == role.SatelliteRole("Access point", None)
    assert role.parse("# made at first run\nname = Landing \nchannel=11\n") == role.SatelliteRole("Landing", 11)
    assert role.parse(role.render(role.SatelliteRole("Attic", 36))) == role.SatelliteRole("Attic", 36)
    for bad in ("ssid=Other", "name", "channel=eleven", "channel=0", "name=" + "x" * 33, "name=a\u200bb"):
        with pytest.raises(role.RoleError):
            role.parse(bad)


def test_a_box_is_a_router_unless_the_role_file_exists_and_a_damaged_one_keeps_it_a_satellite(tmp_path, capsys):
    path = tmp_path / "satellite"
    assert not role.is_satellite(path) and role.satellite_role(path) is None
    path.write_text("name=Landing\n")
    assert role.is_satellite(path) and role.satellite_role(path) == role.SatelliteRole("Landing")
    # The units go by the file's presence: a box whose file cannot be read is still a satellite, with defaults.
    path.write_text("what is this\n")
    assert role.satellite_role(path) == role.SatelliteRole() and "defaults" in capsys.readouterr().err


# ---- the first-run page's request, taken as root


def spool_with(tmp_path: Path, doc: object) -> Path:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    (spool / role.REQUEST).write_text(json.dumps(doc))
    return spool


def test_the_first_run_pages_choice_writes_the_code_then_the_role_root_only_and_restarts(tmp_path):
    spool = spool_with(tmp_path, {"role": "satellite", "code": "ABCD-EFGH", "name": "Landing"})
    role_file, state = tmp_path / "config" / "satellite", tmp_path / "satellite"
    (tmp_path / "config").mkdir()
    state.mkdir()
    (state / "session.json").write_text('{"cookie": "another router\'s"}')
    restarts = []
    said = role.take(spool, role_file, state, restart=lambda: restarts.append(role_file.exists()))
    assert "Landing" in said and restarts == [True]  # restarted once the role was on the disk
    assert (state / role.CODE_FILE).read_text() == "ABCD-EFGH\n"
    assert role.parse(role_file.read_text()) == role.SatelliteRole("Landing")
    for path in (state / role.CODE_FILE, role_file):
        assert oct(path.stat().st_mode & 0o777) == "0o600" and path.stat().st_uid == os.geteuid()
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    assert not (state / "session.json").exists()  # a session with another router is not this code's
    assert not list(spool.iterdir())  # taken
    # A second request once the box is a satellite changes nothing (and does not restart it again).
    spool_with(tmp_path, {"role": "satellite", "code": "WXYZ-2345"})
    assert "already" in role.take(spool, role_file, state, restart=lambda: restarts.append("again"))
    assert (state / role.CODE_FILE).read_text() == "ABCD-EFGH\n" and restarts == [True]


@pytest.mark.parametrize(
    "doc",
    [
        {"role": "router", "code": "ABCD-EFGH"},
        {"role": "satellite"},
        {"role": "satellite", "code": "has spaces"},
        {"role": "satellite", "code": "x" * 65},
        {"role": "satellite", "code": "ABCD-EFGH", "name": "y" * 33},
        ["satellite", "ABCD-EFGH"],
    ],
)
def test_a_request_that_is_not_one_is_dropped_and_makes_nothing(tmp_path, doc):
    spool = spool_with(tmp_path, doc)
    role_file = tmp_path / "config" / "satellite"
    with pytest.raises(role.RoleError):
        role.take(spool, role_file, tmp_path / "satellite", restart=lambda: pytest.fail("restarted"))
    assert not role_file.exists() and not (tmp_path / "satellite").exists() and not list(spool.iterdir())


def test_the_request_is_read_without_following_a_link_the_web_ui_left(tmp_path):
    """The spool is the web UI's: a link there must not make root read (or drop) another file."""
    secret = tmp_path / "secret"
    secret.write_text(json.dumps({"role": "satellite", "code": "ABCD-EFGH"}))
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / role.REQUEST).symlink_to(secret)
    with pytest.raises(role.RoleError):
        role.take(spool, tmp_path / "satellite-role", tmp_path / "state", restart=lambda: pytest.fail("restarted"))
    assert secret.exists() and not (tmp_path / "satellite-role").exists()


# ---- the units of each role


def test_the_routers_services_start_only_without_the_role_file_and_the_agent_only_with_it():
    units = image_units()
    for name in ROUTER_SERVICES:
        assert unit_lines(units[systemd.unit_name(name)], "ConditionPathExists") == [f"!{ROLE_FILE}"], name
    assert unit_lines(units["homework-radio-refresh.path"], "ConditionPathExists") == [f"!{ROLE_FILE}"]
    agent = units["homework-satellite.service"]
    assert unit_lines(agent, "ConditionPathExists") == [ROLE_FILE]
    assert systemd.unit_name("satellite") in systemd.enabled_units(homework_deploy.load(SETTINGS, platform="image"))
    # A starter with one role (the emulated home, a unit rendered without a role file) gets no condition.
    plain = systemd.render_all(homework_deploy.load(SETTINGS, platform="image"), "python3")
    assert not any("ConditionPathExists" in text for text in plain.values())
    # What the router role runs is otherwise the same unit it was.
    for name in ROUTER_SERVICES - {"radio-refresh"}:
        with_role = units[systemd.unit_name(name)].replace(f"ConditionPathExists=!{ROLE_FILE}\n", "")
        assert with_role == plain[systemd.unit_name(name)].replace("python3", str(SETTINGS["PYTHON"])), name


def test_the_satellites_agent_is_sandboxed_as_the_others_and_writes_only_its_own_files():
    agent = image_units()["homework-satellite.service"]
    assert unit_lines(agent, "ProtectSystem") == ["strict"] and unit_lines(agent, "NoNewPrivileges") == ["yes"]
    assert unit_lines(agent, "ReadWritePaths") == ["-/var/lib/homework/satellite", "-/run/homework/satellite"]
    # hostapd, its child, serves the radio and makes it a port of the bridge: hostapd's capabilities and device.
    assert unit_lines(agent, "CapabilityBoundingSet") == ["CAP_NET_ADMIN CAP_NET_BIND_SERVICE CAP_NET_RAW"]
    assert unit_lines(agent, "DeviceAllow") == ["/dev/rfkill rw"] and unit_lines(agent, "Restart") == ["on-failure"]
    # No readiness wait: it waits for the router as long as the router is away, the boot does not.
    assert unit_lines(agent, "Type") == ["exec"] and not unit_lines(agent, "ExecStartPost")
    assert "homework_image.role agent" in unit_lines(agent, "ExecStart")[0]
    # Nobody else writes its session with the router.
    others = {n: t for n, t in image_units().items() if n != "homework-satellite.service" and n.endswith(".service")}
    for name, text in others.items():
        writable = [p.lstrip("-") for p in unit_lines(text, "ReadWritePaths")]
        read_only = [p.lstrip("-") for p in unit_lines(text, "ReadOnlyPaths")]
        if any("/var/lib/homework/satellite".startswith(p) for p in writable):
            assert "/var/lib/homework/satellite" in read_only, name


def test_only_the_image_may_declare_a_role_other_than_the_routers(tmp_path):
    toml = tmp_path / "services.toml"
    toml.write_text('[settings]\n\n[services.ap]\ncommand = ["true"]\nroles = ["satellite"]\n')
    with pytest.raises(homework_deploy.ServicesError, match="platforms"):
        homework_deploy.load({}, toml)
    toml.write_text('[settings]\n\n[services.ap]\ncommand = ["true"]\nroles = ["mesh"]\n')
    with pytest.raises(homework_deploy.ServicesError, match="roles"):
        homework_deploy.load({}, toml)
    toml.write_text('[settings]\n\n[services.ap]\ncommand = ["true"]\nroles = ["satellite"]\nplatforms = ["image"]\n')
    assert homework_deploy.load({}, toml)["ap"].roles == {"satellite"}


def test_the_switch_nat_and_the_first_run_watch_are_the_routers_alone():
    """Debian's units the router role needs are skipped in the satellite role by the image's drop-ins, on the
    same file the rendered units go by; the web UI's spool for the choice is its own."""
    for unit in ("openvswitch-switch", "ovs-vswitchd", "ovsdb-server", "ovs-record-hostname", "nftables"):
        dropin = (ROOTFS / f"etc/systemd/system/{unit}.service.d/homework-role.conf").read_text()
        assert f"ConditionPathExists=!{ROLE_FILE}" in dropin.splitlines(), unit
    # nftables starts before local file systems are mounted unless told: its condition would then always hold.
    nftables = (ROOTFS / "etc/systemd/system/nftables.service.d/homework-role.conf").read_text().splitlines()
    assert f"RequiresMountsFor={role.STATE}" in nftables
    watch = (ROOTFS / "usr/lib/systemd/system/homework-role.path").read_text()
    assert f"PathExists={role.ROLE_SPOOL}/{role.REQUEST}" in watch.splitlines()
    assert f"ConditionPathExists=!{ROLE_FILE}" in watch.splitlines()
    assert "homework-role.path" in build.SYSTEM_UNITS
    assert SETTINGS["ROLE_SPOOL"] == role.ROLE_SPOOL
    tmpfiles = (ROOTFS / "etc/tmpfiles.d/homework.conf").read_text().splitlines()
    assert f"d {role.ROLE_SPOOL} 0700 homework-webui homework-webui -" in tmpfiles
    networkd = (ROOTFS / "etc/systemd/network/20-satellite.network").read_text()
    assert f"Name={role.SATELLITE_BRIDGE}" in networkd and "DHCP=ipv4" in networkd


# ---- the satellite's network, health and console


def test_the_satellites_bridge_spans_both_ports_with_the_lan_nics_mac():
    wan = network.Nic("enp0s3", "52:54:00:00:aa:02", "/sys/devices/pci0000:00/0000:00:03.0")
    lan = network.Nic("enp0s4", "52:54:00:00:bb:02", "/sys/devices/pci0000:00/0000:00:04.0")
    plan = network.satellite_bridge(wan, lan)
    assert plan == network.SatelliteBridge("br0", "52:54:00:00:bb:02", ("enp0s4", "enp0s3"))
    # Not named `wan`/`lan`: networkd's WAN file (DHCP on `wan`) must not match a port of the bridge.
    assert network.WAN_IFACE not in plan.ports and network.LAN_PORT not in plan.ports


def test_the_satellites_health_is_its_bridge_and_its_agent_not_the_routers_switch():
    checks = health.satellite_checks({"satellite": {}})
    assert set(checks) == {"satellite ready", "bridge br0", "satellite running"}
    assert not {"ovs bridge", "controller connected"} & set(checks)


def test_the_console_says_the_box_is_an_access_point_and_how_to_undo_it():
    text = console.satellite_banner("7", "a", role.SatelliteRole("Landing"), paired=False)
    assert "access point" in text and "'Landing'" in text and "(slot A)" in text and "pairs with the router" in text
    assert f"rm {role.ROLE_FILE}" in text
    assert "paired with the router" in console.satellite_banner("7", "b", role.SatelliteRole(), paired=True)
    # A router's first run offers the choice beside the setup code.
    assert "access point of your router" in console.banner("7", "a", "ABCD-EFGH-JKLM", None)


def test_the_agent_waits_for_its_address_and_the_router_then_runs_and_a_refused_code_waits_for_a_new_one(
    tmp_path, monkeypatch
):
    from homework_image import satellite

    addresses = iter([None, None, "10.2.0.6"])
    answers = iter([False, True, True])
    monkeypatch.setattr(role, "bridge_address", lambda bridge: next(addresses, "10.2.0.6"))
    monkeypatch.setattr(role, "router_answers", lambda url: next(answers, True))
    state = tmp_path / "satellite"
    state.mkdir()
    (state / role.CODE_FILE).write_text("SPENT-CODE\n")
    role_file = tmp_path / "role"
    role_file.write_text("name=Landing\nchannel=11\n")
    runs: list[list[str]] = []
    results = iter([1, 0])  # refused, then (a new code written) paired and stopped

    def fake_main(argv: list[str]) -> int:
        runs.append(argv)
        return next(results)

    monkeypatch.setattr(satellite, "main", fake_main)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(runs) == 1 and len(slept) == 10:  # the household writes a new code while it waits
            (state / role.CODE_FILE).write_text("NEW-CODE-1\n")

    argv = ["--state", str(state), "--run", str(tmp_path / "run"), "--role-file", str(role_file)]
    assert role.agent(argv, sleep=sleep) == 0
    assert len(runs) == 2
    assert runs[0][runs[0].index("--router") + 1] == f"http://{role.ROUTER_LAN_IP}" == role.ROUTER_URL
    assert runs[0][runs[0].index("--code-file") + 1] == str(state / role.CODE_FILE)
    assert runs[0][runs[0].index("--name") + 1] == "Landing" and runs[0][runs[0].index("--channel") + 1] == "11"
    assert sum(slept) < role.RETRY_S  # the new code was tried at once, not after the retry's wait
