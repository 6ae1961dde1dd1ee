"""What can be checked of the OpenWrt feed without an OpenWrt SDK (none can be downloaded here): each
check runs on the feed as committed, and on a broken copy, which it must refuse."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from feedcheck import (
    UciError,
    built_packages,
    dependency_problems,
    keep_problems,
    makefile_problems,
    options_read,
    parse_uci,
    pin_problems,
    shell_problems,
    unset_options,
    variables,
)

from homework_deploy import SERVICES_FILE, ServicesError, load, procd, settings

FEED = Path(__file__).resolve().parents[1]
REPO = FEED.parent
MAKEFILES = sorted(FEED.glob("*/Makefile"))
SCRIPTS = sorted(FEED.glob("*/files/*.init")) + sorted(FEED.glob("*/files/*.uci-defaults"))
UCI_DEFAULTS = FEED / "homework-base" / "files" / "homework.config"
KEEP = FEED / "homework-base" / "files" / "homework.keep"


def feed_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "openwrt-feed"
    shutil.copytree(FEED, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return copy


# ---- package Makefiles


def test_the_feed_has_the_packages_the_router_needs():
    packages = {p for m in MAKEFILES for p in built_packages(m.read_text())}
    assert {
        "homework-base",
        "homework-hwdb",
        "homework-controller",
        "homework-webui",
        "python3-hwdb-client",
        "python3-os-ken",
        "python3-dnslib",
        "python3-flask",
    } <= packages


@pytest.mark.parametrize("makefile", MAKEFILES, ids=lambda m: m.parent.name)
def test_each_package_makefile_is_complete_and_installs_files_that_exist(makefile):
    assert makefile_problems(makefile.read_text(), makefile.parent) == []


@pytest.mark.parametrize(
    "breakage, expected",
    [
        (lambda t: re.sub(r"^PKG_LICENSE:=.*\n", "", t, flags=re.M), "PKG_LICENSE is not defined"),
        (
            lambda t: t.replace("include $(INCLUDE_DIR)/package.mk\n", ""),
            "does not `include $(INCLUDE_DIR)/package.mk`",
        ),
        (
            lambda t: t.replace("define Package/homework-hwdb/install", "define Package/homework-hwdb/installed"),
            "without `define Package/homework-hwdb/install`",
        ),
        (lambda t: t.replace("$(eval $(call BuildPackage,homework-hwdb))", ""), "builds no package"),
        (
            lambda t: t.replace("./files/homework-hwdb.init", "./files/homework-hwdb.initt"),
            "installs ./files/homework-hwdb.initt, which does not exist",
        ),
    ],
)
def test_a_broken_makefile_is_refused(breakage, expected):
    makefile = FEED / "homework-hwdb" / "Makefile"
    broken = breakage(makefile.read_text())
    assert any(expected in p for p in makefile_problems(broken, makefile.parent))


PYPI = tomllib.loads((FEED / "pypi.toml").read_text())
LOCK = (REPO / "requirements.lock").read_text()


def test_pypi_packages_are_pinned_to_the_lock_files_versions_with_a_sha256():
    assert pin_problems(PYPI, LOCK) == []
    pbr = (FEED / "host-pip-requirements" / "pbr.txt").read_text()
    assert f"pbr=={PYPI['pbr']['version']} --hash=sha256:{PYPI['pbr']['sha256']}" in pbr


def test_a_pin_that_differs_from_the_lock_file_is_refused():
    stale = {**PYPI, "dnslib": {**PYPI["dnslib"], "version": "0.9.25", "sha256": "abc"}}
    assert pin_problems(stale, LOCK) == [
        "dnslib 0.9.25: requirements.lock has 0.9.26",
        "dnslib: sha256 'abc' is not 64 hex digits",
    ]


def _needed() -> list[str]:
    return [
        dep
        for component in ("controller", "webui")
        for dep in tomllib.loads((REPO / component / "pyproject.toml").read_text())["project"]["dependencies"]
    ]


def test_every_python_dependency_is_packaged_here_or_in_the_packages_feed():
    assert dependency_problems(_needed(), [m.read_text() for m in MAKEFILES], FROM_PACKAGES_FEED) == []


def test_a_dependency_nobody_packages_is_named():
    makefiles = [m.read_text().replace("+python3-dnslib ", "+python3-dnslib2 ") for m in MAKEFILES]
    assert dependency_problems(_needed(), makefiles, FROM_PACKAGES_FEED) == [
        "nothing depends on python3-dnslib (dnslib)",
        "python3-dnslib2 is neither built here nor known in the packages feed",
    ]


# Found in openwrt/packages (lang/python/python-*, python3's own split packages, net/openvswitch).
FROM_PACKAGES_FEED = {
    "python3-light",
    "python3-sqlite3",
    "python3-logging",
    "python3-urllib",
    "python3-setuptools",
    "python3-eventlet",
    "python3-msgpack",
    "python3-packaging",
    "python3-lxml",
    "python3-paramiko",
    "python3-yaml",
    "python3-requests",
    "python3-six",
    "python3-sortedcontainers",
    "python3-dpkt",
    "python3-pyroute2",
    "python3-idna",
    "python3-werkzeug",
    "python3-jinja2",
    "python3-click",
    "python3-blinker",
}


@pytest.mark.parametrize(
    "package, source",
    [
        ("homework-hwdb", "hwdb/Cargo.toml"),
        ("homework-controller", "controller/pyproject.toml"),
        ("homework-webui", "webui/pyproject.toml"),
        ("python-hwdb-client", "hwdb/python/pyproject.toml"),
    ],
)
def test_our_packages_copy_sources_that_exist_at_their_version(package, source):
    makefile = (FEED / package / "Makefile").read_text()
    copied = re.search(r"Homework/CopySource,([^)]+)\)", makefile)
    assert copied, "no Homework/CopySource in Build/Prepare"
    for path in copied.group(1).split():
        assert (REPO / path).exists() or path == "webui/frontend/dist", f"{package} copies {path}: missing"
    manifest = tomllib.loads((REPO / source).read_text())
    version = (manifest.get("project") or manifest["package"])["version"]
    assert variables(makefile)["PKG_VERSION"] == version, f"{source} says {version}"


# ---- init scripts


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_init_scripts_pass_sh_n_and_shellcheck(script):
    assert shell_problems(script) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda t: t.replace("\n}\n", "\n", 1),  # sh -n: unclosed function
        lambda t: t.replace('"${lan_iface}"', "${lan_iface}", 1),  # shellcheck: unquoted (SC2086)
    ],
)
def test_a_broken_init_script_is_refused(tmp_path, breakage):
    script = FEED / "homework-hwdb" / "files" / "homework-hwdb.init"
    broken = tmp_path / script.name
    broken.write_text(breakage(script.read_text()))
    assert broken.read_text() != script.read_text()
    assert shell_problems(broken) != []


def test_init_scripts_start_in_services_toml_order_after_openvswitch_and_the_network():
    starts = {s.name: int(re.findall(r"^START=(\d+)$", s.read_text(), re.M)[0]) for s in FEED.glob("*/files/*.init")}
    assert starts["homework-switch.init"] > 15  # openvswitch
    assert 20 < starts["homework-hwdb.init"] < starts["homework-controller.init"] < starts["homework-webui.init"]


def test_committed_init_scripts_are_what_services_toml_renders():
    run = subprocess.run([sys.executable, str(FEED / "render.py"), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_stale_init_script_fails_the_check_and_says_how_to_regenerate(tmp_path):
    copy = feed_copy(tmp_path)
    script = copy / "homework-controller" / "files" / "homework-controller.init"
    script.write_text(script.read_text().replace("--of-port 6653", "--of-port 6633"))
    run = subprocess.run(
        [sys.executable, str(FEED / "render.py"), "--check", "--feed", str(copy)], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "homework-controller/files/homework-controller.init" in run.stderr
    assert "make -C openwrt-feed render" in run.stderr
    assert script.read_text().count("--of-port 6633") == 1  # --check changes nothing


def test_the_controller_script_runs_services_toml_command_with_uci_values():
    script = (FEED / "homework-controller" / "files" / "homework-controller.init").read_text()
    assert "USE_PROCD=1" in script and "procd_set_param respawn" in script
    command = re.findall(r"procd_set_param command (.*)", script)[0]
    assert command.startswith("/usr/bin/python3 -m homework_controller ")
    assert '--lan-iface "${lan_iface}"' in command and '--stations "iw:${lan_wlan_port}"' in command
    assert 'procd_append_param command --high-share "${qos_high_share}"' in script
    # Ahead of pages and logs when the cores are busy (services.toml's `nice`); the web UI as everyone else.
    assert re.findall(r"procd_set_param nice (.*)", script) == ["-5"]
    webui = (FEED / "homework-webui" / "files" / "homework-webui.init").read_text()
    assert "procd_set_param nice" not in webui


def test_a_setting_the_feed_does_not_map_is_refused_by_name(tmp_path):
    toml = tmp_path / "services.toml"
    toml.write_text(SERVICES_FILE.read_text().replace("\n[settings]\n", '\n[settings]\nSPOOL = "a new setting"\n', 1))
    with pytest.raises(ServicesError, match="SPOOL have no OpenWrt value"):
        procd.render(toml)
    assert procd.render(SERVICES_FILE)  # the same from the real file works


def test_hostapd_is_openwrts_own_and_gets_no_script():
    assert "hostapd" in load({name: "x" for name in settings()})  # the emulated home starts its own
    assert "homework-hostapd.init" not in procd.render()
    assert not list(FEED.glob("*/files/homework-hostapd*"))
    assert "+wpad" in (FEED / "homework-controller" / "Makefile").read_text()


# ---- UCI defaults and sysupgrade


def test_uci_defaults_parse_and_hold_every_option_an_init_script_reads():
    uci = parse_uci(UCI_DEFAULTS.read_text())
    read = set()
    for script in FEED.glob("*/files/*.init"):
        read |= options_read(script.read_text())
        assert unset_options(script.read_text(), uci) == [], script.name
    assert ("qos", "uplink_kbit") in read and ("lan", "iface") in read


def test_an_option_missing_from_the_defaults_is_named():
    uci = parse_uci(UCI_DEFAULTS.read_text().replace("\toption downlink_kbit '0'\n", ""))
    script = (FEED / "homework-controller" / "files" / "homework-controller.init").read_text()
    assert unset_options(script, uci) == ["homework.qos.downlink_kbit"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("option lonely 'x'\n", "before any config section"),
        ("config lan 'lan'\n\toption iface 'br-lan\n", "No closing quotation"),
        ("config lan 'lan'\n\toptoin iface 'br-lan'\n", "not `config TYPE"),
        ("config lan 'lan'\nconfig lan 'lan'\n", "appears twice"),
    ],
)
def test_a_broken_uci_file_is_refused_with_its_line(text, message):
    with pytest.raises(UciError, match=message):
        parse_uci(text)


def _state_files() -> list[str]:
    """What services.toml has the services OpenWrt runs write under ${STATE}."""
    values: dict[str, object] = {name: f"<{name}>" for name in settings()}
    services = load(values, platform="openwrt").values()
    paths = {arg.split("<STATE>/", 1)[1] for s in services for arg in s.command if "<STATE>/" in arg}
    return sorted(paths)


def test_sysupgrade_keeps_every_state_file_the_services_write():
    state_dir = parse_uci(UCI_DEFAULTS.read_text())["main"]["state_dir"]
    assert isinstance(state_dir, str)
    files = _state_files()
    assert {"hwdb/hwdb.sqlite", "hwdb/agent.key", "controller.sqlite", "webui"} <= set(files)
    assert keep_problems(KEEP.read_text(), files, state_dir) == []


HWDB_MOVE = FEED / "homework-hwdb" / "files" / "homework-hwdb.uci-defaults"


def run_hwdb_move(state_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The uci-defaults script as first boot runs it, with `uci` answering the state directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "uci").write_text(f"#!/bin/sh\necho '{state_dir}'\n")
    (bin_dir / "uci").chmod(0o755)
    return subprocess.run(["sh", str(HWDB_MOVE)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True)


def test_an_older_routers_hwdb_files_move_into_hwdbs_directory_once(tmp_path):
    state = tmp_path / "homework"
    state.mkdir()
    for name, text in (("hwdb.sqlite", "db"), ("hwdb.sqlite-wal", "wal"), ("agent.key", "key\n")):
        (state / name).write_text(text)
    (state / "agent.key").chmod(0o640)
    assert run_hwdb_move(state, tmp_path).returncode == 0
    moved = {p.name: p.read_text() for p in (state / "hwdb").iterdir()}
    assert moved == {"hwdb.sqlite": "db", "hwdb.sqlite-wal": "wal", "agent.key": "key\n"}
    assert (state / "hwdb" / "agent.key").stat().st_mode & 0o777 == 0o640
    # hwdb's own files, once it has them, are never overwritten by the old ones.
    (state / "hwdb" / "hwdb.sqlite").write_text("newer")
    assert run_hwdb_move(state, tmp_path).returncode == 0
    assert (state / "hwdb" / "hwdb.sqlite").read_text() == "newer"


def test_a_new_router_gets_no_hwdb_directory_from_the_move(tmp_path):
    state = tmp_path / "homework"
    state.mkdir()
    assert run_hwdb_move(state, tmp_path).returncode == 0
    assert not (state / "hwdb").exists()  # hwdb makes it, as its files


def test_a_state_file_missing_from_keep_d_is_named():
    kept = KEEP.read_text().replace("/etc/homework/controller.sqlite-wal\n", "")
    assert keep_problems(kept, _state_files(), "/etc/homework") == [
        "sysupgrade would lose /etc/homework/controller.sqlite-wal: not in keep.d"
    ]
