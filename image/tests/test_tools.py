"""The image's tools without a VM: boot entries, NIC choice, the data format, the signed
bundle and its installation (real openssl keys, files standing in for the partitions), and the
systemd units rendered from deploy/services.toml."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import build
import homework_deploy
from homenet.ipv6 import kea_config
from homenet.wait import wait_until
from homework_deploy import prefix_delegation, procd, systemd
from homework_image import boot, bundle, console, grub, health, network, state, update
from homework_image.bundle import BundleError
from homework_image.radio import PSK_FILE, WIFI_CONFIG

SLOT_BYTES = 1 << 20


# ---- boot entries


def test_entry_names_count_tries_and_parse_back():
    assert boot.entry_name("20260101000000.2", "b", 3) == "homework-20260101000000.2-b+3.conf"
    assert boot.parse_entry("homework-20260101000000.2-b+0-3.conf") == {
        "version": "20260101000000.2",
        "slot": "b",
        "tries_left": 0,
        "tries_done": 3,
    }
    assert boot.parse_entry("homework-1-a.conf")["tries_left"] is None
    assert boot.parse_entry("debian-6.1.conf") is None
    assert "root=PARTLABEL=homework-root-b" in boot.entry_text("1", "b")


def test_running_slot_comes_from_the_kernel_command_line():
    assert boot.running_slot("root=PARTLABEL=homework-root-b ro homework.slot=b quiet") == "b"
    with pytest.raises(boot.BootError):
        boot.running_slot("root=/dev/sda1 ro")
    with pytest.raises(boot.BootError):
        boot.entry_name("1; rm -rf /", "a")


def test_versions_order_as_numbers_piece_by_piece():
    assert boot.version_key("20260101000000.10") > boot.version_key("20260101000000.9")
    assert boot.version_key("20260101000000.1") > boot.version_key("20260101000000")


def test_entries_sort_as_systemd_boot_does():
    names = ["homework-100-a.conf", "homework-102-b+0-3.conf", "homework-101-b+2-1.conf", "notes.txt"]
    assert boot.boot_order(names) == ["homework-101-b+2-1.conf", "homework-100-a.conf", "homework-102-b+0-3.conf"]


# ---- GRUB (legacy BIOS boot): its configuration and environment block from the entries


def grub_entries(*names: str) -> dict[str, str]:
    return {n: boot.entry_text(boot.parse_entry(n)["version"], boot.parse_entry(n)["slot"]) for n in names}


def menu(cfg: str) -> list[str]:
    return re.findall(r"^menuentry .* --id (\S+) \{$", cfg, re.M)


def candidates(cfg: str) -> list[str]:
    """The entries GRUB may choose as default, in the order it considers them."""
    return re.findall(r"set homework_default=(homework-\S+)", cfg)


def menu_entry(cfg: str, ident: str) -> str:
    return re.search(rf"^menuentry .* --id {re.escape(ident)} \{{$(.*?)^\}}$", cfg, re.M | re.S).group(1)


def grub_script_ok(cfg: str, tmp_path: Path) -> bool:
    (tmp_path / "grub.cfg").write_text(cfg)
    return subprocess.run(["grub-script-check", str(tmp_path / "grub.cfg")]).returncode == 0


def test_grub_boots_the_blessed_entry_without_counting(tmp_path):
    cfg = boot.grub_config(grub_entries("homework-100-a.conf"))
    assert grub_script_ok(cfg, tmp_path)
    assert menu(cfg) == candidates(cfg) == ["homework-100-a"]
    body = menu_entry(cfg, "homework-100-a")
    assert "linux /homework/a/vmlinuz root=PARTLABEL=homework-root-a" in body
    assert "initrd /homework/a/initrd.img" in body
    assert "save_env" not in body and "homework-grub-bless" not in body
    assert "systemd.wants=homework-grub-count.service" in body  # it folds tries GRUB counted of others


def test_grub_tries_a_newer_entry_on_trial_first_and_counts_each_try(tmp_path):
    cfg = boot.grub_config(grub_entries("homework-100-a.conf", "homework-101-b+3.conf"))
    assert grub_script_ok(cfg, tmp_path)
    assert menu(cfg) == ["homework-101-b", "homework-100-a"]
    tried = boot.grub_tries_variable("homework-101-b+3.conf")
    # B is the default while GRUB has counted fewer than 3 tries of it.
    assert f'if [ -z "${{{tried}}}" -o "${{{tried}}}" = 1 -o "${{{tried}}}" = 2 ]; then' in cfg
    assert candidates(cfg)[:2] == ["homework-101-b", "homework-100-a"]
    body = menu_entry(cfg, "homework-101-b")
    assert re.findall(rf"set {tried}=(\d)", body) == ["1", "2", "3"]
    assert f"save_env {tried}" in body
    assert "systemd.wants=homework-grub-bless.service" in body
    # Every entry GRUB boots wants the count (a blessed one too: an entry it tried and fell back from
    # left its tries in grubenv); systemd-boot's command lines (the entries' own) do not.
    for name in menu(cfg):
        assert "systemd.wants=homework-grub-count.service" in menu_entry(cfg, name)
    assert all("homework-grub-count" not in text for text in grub_entries("homework-101-b+3.conf").values())


def test_grub_sorts_an_exhausted_entry_last_and_never_chooses_it_first(tmp_path):
    cfg = boot.grub_config(grub_entries("homework-101-b+0-3.conf", "homework-100-a.conf"))
    assert grub_script_ok(cfg, tmp_path)
    assert menu(cfg) == ["homework-100-a", "homework-101-b"]
    assert candidates(cfg) == ["homework-100-a"]
    assert "save_env" not in menu_entry(cfg, "homework-101-b")
    # With no blessed entry and no tries left anywhere, GRUB falls back to the highest version.
    cfg = boot.grub_config(grub_entries("homework-101-b+1.conf", "homework-102-a+0-1.conf"))
    assert grub_script_ok(cfg, tmp_path)
    assert candidates(cfg) == ["homework-101-b", "homework-102-a"]


def test_grubenv_is_the_block_grub_editenv_writes_and_reads(tmp_path):
    env = tmp_path / "grubenv"
    subprocess.run(["grub-editenv", str(env), "create"], check=True)
    assert env.read_bytes() == boot.grubenv_block({})
    variables = {"homework_tried_101_2db_2b3": "2", "other": "a b\\c\nd"}  # GRUB escapes \\ and newlines
    subprocess.run(["grub-editenv", str(env), "set", *(f"{n}={v}" for n, v in variables.items())], check=True)
    assert env.read_bytes() == boot.grubenv_block(variables)
    assert len(env.read_bytes()) == boot.GRUBENV_SIZE
    assert boot.parse_grubenv(env.read_bytes()) == variables
    env.write_bytes(boot.grubenv_block({"x": "1"}))
    listed = subprocess.run(["grub-editenv", str(env), "list"], capture_output=True, text=True, check=True).stdout
    assert listed == "x=1\n"
    with pytest.raises(boot.BootError):
        boot.parse_grubenv(b"# not GRUB\n".ljust(1024, b"#"))
    with pytest.raises(boot.BootError, match="1024"):
        boot.grubenv_block({"x": "y" * 1024})


def test_grub_counts_are_kept_per_entry_name():
    assert boot.grub_tries_variable("homework-101-b+3.conf") != boot.grub_tries_variable("homework-101-b+2-1.conf")
    assert boot.fold_grub_tries(
        ["homework-101-b+3.conf", "homework-100-a.conf"],
        {boot.grub_tries_variable("homework-101-b+3.conf"): "1", boot.grub_tries_variable("homework-100-a.conf"): "5"},
    ) == {"homework-101-b+3.conf": "homework-101-b+2-1.conf"}
    # Never below zero tries left, and a count left over for an older name applies to nothing.
    assert boot.fold_grub_tries(
        ["homework-101-b+1.conf"], {boot.grub_tries_variable("homework-101-b+1.conf"): "4"}
    ) == {"homework-101-b+1.conf": "homework-101-b+0-1.conf"}
    assert (
        boot.fold_grub_tries(["homework-101-b+2-1.conf"], {boot.grub_tries_variable("homework-101-b+3.conf"): "1"})
        == {}
    )


# ---- NIC choice


def nic(name, mac, bus):
    return network.Nic(name, mac, f"/sys/devices/pci0000:00/0000:00:{bus}")


def test_first_and_second_nic_in_bus_order_are_wan_and_lan():
    nics = [
        nic("enp2s0", "00:0d:b9:00:00:02", "02.0"),
        nic("enp1s0", "00:0d:b9:00:00:01", "01.0"),
        nic("enp3s0", "00:0d:b9:00:00:03", "03.0"),
    ]
    wan, lan = network.choose(nics, {})
    assert (wan.name, lan.name) == ("enp1s0", "enp2s0")


def test_configured_ports_win_by_name_or_mac():
    nics = [
        nic("enp1s0", "00:0d:b9:00:00:01", "01.0"),
        nic("enp2s0", "00:0d:b9:00:00:02", "02.0"),
        nic("enp3s0", "00:0d:b9:00:00:03", "03.0"),
    ]
    config = network.parse_config("# the modem is on port 3\nwan = 00:0D:B9:00:00:03\nlan=enp1s0\n")
    wan, lan = network.choose(nics, config)
    assert (wan.name, lan.name) == ("enp3s0", "enp1s0")


def test_bad_network_config_is_refused_clearly():
    with pytest.raises(network.NetworkError, match="line 1"):
        network.parse_config("wlan=enp1s0\n")
    nics = [nic("enp1s0", "00:0d:b9:00:00:01", "01.0"), nic("enp2s0", "00:0d:b9:00:00:02", "02.0")]
    with pytest.raises(network.NetworkError, match="matches no NIC"):
        network.choose(nics, {"wan": "eth9"})
    with pytest.raises(network.NetworkError, match="same NIC"):
        network.choose(nics, {"wan": "enp1s0", "lan": "enp1s0"})
    with pytest.raises(network.NetworkError, match="two wired NICs"):
        network.choose(nics[:1], {})


# ---- the data partition's format


def test_new_data_partition_gets_the_current_format(tmp_path):
    assert "new data partition" in state.migrate(tmp_path, current=1, migrations={})
    assert (tmp_path / "FORMAT").read_text() == "1\n"
    assert (tmp_path / "webui").is_dir() and (tmp_path / "config").is_dir()
    # Where the prefix-delegation client writes: made for it, since it may write nothing beside it.
    assert (tmp_path / prefix_delegation.DELEGATED_FILE).parent.is_dir()


def test_migrations_run_once_in_order(tmp_path):
    ran = []
    steps = {1: lambda s: ran.append(1), 2: lambda s: ran.append(2)}
    (tmp_path / "FORMAT").write_text("1\n")
    assert "migrated from 1" in state.migrate(tmp_path, current=3, migrations=steps)
    assert ran == [1, 2]
    state.migrate(tmp_path, current=3, migrations=steps)
    assert ran == [1, 2]
    assert "newer than this image" in state.migrate(tmp_path, current=2, migrations=steps)


def test_the_launcher_starts_python_only_when_the_partition_needs_it(tmp_path):
    """The image's /usr/sbin/homework-state, run for real: the shell answers for a partition already in
    this format (no Python on every boot's path); a new or older partition goes to the migration."""
    data, python = tmp_path / "data", tmp_path / "python"
    python.write_text('#!/bin/sh\necho "python started: $*"\n')  # stands in for the interpreter: says it ran
    python.chmod(0o755)
    launcher = tmp_path / "homework-state"
    launcher.write_text(state.launcher(str(python), data))
    launcher.chmod(0o755)

    def run() -> str:
        return subprocess.run([launcher], capture_output=True, text=True, check=True).stdout

    assert "python started: -m homework_image.state" in run()  # a new partition: made by Python
    state.migrate(data)
    assert run() == f"homework-state: format {state.CURRENT}\n"  # in this format: the shell alone
    (data / "FORMAT").write_text(f"{state.CURRENT - 1}\n")
    assert "python started" in run()  # an older format: migrated
    (data / "FORMAT").write_text(f"{state.CURRENT}\n")
    (data / "webui").rmdir()
    assert "python started" in run()  # a directory gone: made again


HWDB = build.REPO / "hwdb/target/release/hwdb"


def hwdb_serving(db: Path, key: Path) -> tuple[subprocess.Popen, str]:
    """The real hwdb on a free loopback port, once it answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        server = f"127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.Popen([HWDB, "serve", "--listen", server, "--db", db, "--agent-key-file", key])
    wait_until("hwdb answers", lambda: hwdb_query(server, "show tables", check=False).returncode == 0, 20, 0.2)
    return proc, server


def hwdb_query(server: str, text: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HWDB, "query", "--server", server, "--timeout", "1", text], capture_output=True, text=True, check=check
    )


def test_an_update_moves_hwdbs_rows_and_key_into_its_own_directory(tmp_path):
    """The previous image's data partition (format 1: hwdb's files in the top directory, its
    newest row still only in the write-ahead log after a power cut) keeps what hwdb holds."""
    proc, server = hwdb_serving(tmp_path / "hwdb.sqlite", tmp_path / "agent.key")
    try:
        hwdb_query(server, "insert into Events values ('update', '02:1a:00:00:00:01', 'written before the update')")
    finally:
        proc.kill()  # a power cut: no checkpoint
        proc.wait()
    assert (tmp_path / "hwdb.sqlite-wal").stat().st_size > 0
    (tmp_path / "FORMAT").write_text("1\n")
    key = (tmp_path / "agent.key").read_text()

    assert "migrated from 1" in state.migrate(tmp_path)

    own = tmp_path / state.HWDB_DIR
    assert (own / "agent.key").read_text() == key and (own / "agent.key").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "hwdb.sqlite").exists(), "the originals stay for an older image after a rollback"
    proc, server = hwdb_serving(own / "hwdb.sqlite", own / "agent.key")
    try:
        rows = hwdb_query(server, "select message from Events where kind = 'update'").stdout
    finally:
        proc.terminate()
        proc.wait()
    assert "written before the update" in rows


def test_a_cut_off_move_of_hwdbs_files_is_done_again_whole(tmp_path):
    (tmp_path / "FORMAT").write_text("1\n")
    (tmp_path / "agent.key").write_text("k\n")
    (tmp_path / "hwdb.migrating").mkdir()
    (tmp_path / "hwdb.migrating" / "agent.key").write_text("half")  # power cut during the copy
    state.migrate(tmp_path)
    assert (tmp_path / "hwdb" / "agent.key").read_text() == "k\n"
    assert not (tmp_path / "hwdb.migrating").exists()
    assert (tmp_path / "FORMAT").read_text() == f"{state.CURRENT}\n"


# ---- bundles and their installation


@pytest.fixture
def keys(tmp_path):
    bundle.make_key(tmp_path / "key.pem", tmp_path / "pub.pem")
    bundle.make_key(tmp_path / "other.pem", tmp_path / "other.pub.pem")
    return tmp_path


def make_bundle(tmp_path: Path, version: str, key: Path, root_bytes: bytes = b"squashfs root" * 1000) -> Path:
    payload = {
        "root.squashfs": tmp_path / "root.squashfs",
        "vmlinuz": tmp_path / "vmlinuz",
        "initrd.img": tmp_path / "initrd.img",
    }
    payload["root.squashfs"].write_bytes(root_bytes)
    payload["vmlinuz"].write_bytes(b"kernel " + version.encode())
    payload["initrd.img"].write_bytes(b"initrd " + version.encode())
    out = tmp_path / f"{version}.bundle"
    bundle.write(out, version, payload, key)
    return out


@pytest.fixture
def router(tmp_path, keys):
    """A router running version 100 from slot A: an ESP directory and two slot files."""
    esp, parts = tmp_path / "esp", tmp_path / "by-partlabel"
    (esp / "loader/entries").mkdir(parents=True)
    (esp / "loader/entries" / boot.entry_name("100", "a")).write_text(boot.entry_text("100", "a"))
    parts.mkdir()
    for slot in "ab":
        (parts / f"homework-root-{slot}").write_bytes(b"\0" * SLOT_BYTES)
    (tmp_path / "cmdline").write_text("root=PARTLABEL=homework-root-a ro homework.slot=a\n")
    (tmp_path / "version").write_text("100\n")
    return update.Router(
        esp=esp,
        partitions=parts,
        cmdline=tmp_path / "cmdline",
        version_file=tmp_path / "version",
        update_key=keys / "pub.pem",
    )


def slot_b_untouched(router: update.Router) -> bool:
    return router.partition("b").read_bytes() == b"\0" * SLOT_BYTES and [p.name for p in router.entries.iterdir()] == [
        "homework-100-a.conf"
    ]


def test_a_signed_newer_bundle_goes_to_the_other_slot_on_trial(tmp_path, keys, router):
    result = update.install(router, make_bundle(tmp_path, "101", keys / "key.pem"), tries=3)
    assert result["slot"] == "b" and result["installed"] == "101"
    assert router.partition("b").read_bytes().startswith(b"squashfs root")
    assert (router.esp / "homework/b/vmlinuz").read_bytes() == b"kernel 101"
    assert sorted(p.name for p in router.entries.iterdir()) == ["homework-100-a.conf", "homework-101-b+3.conf"]
    status = router.status()
    assert status["running"] == {"slot": "a", "version": "100"}
    assert [e["tries_left"] for e in status["entries"]] == [None, 3]


def test_a_bundle_signed_with_another_key_writes_nothing(tmp_path, keys, router):
    with pytest.raises(BundleError, match="signature"):
        update.install(router, make_bundle(tmp_path, "101", keys / "other.pem"))
    assert slot_b_untouched(router)


def test_a_tampered_payload_writes_nothing(tmp_path, keys, router):
    good = make_bundle(tmp_path, "101", keys / "key.pem")
    data = bytearray(good.read_bytes())
    at = data.find(b"squashfs root")
    data[at] ^= 0xFF
    bad = tmp_path / "tampered.bundle"
    bad.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="does not match its signed size and hash"):
        update.install(router, bad)
    assert slot_b_untouched(router)


def test_an_older_bundle_or_one_too_big_for_the_slot_is_refused(tmp_path, keys, router):
    with pytest.raises(BundleError, match="not newer"):
        update.install(router, make_bundle(tmp_path, "99", keys / "key.pem"))
    assert slot_b_untouched(router)
    with pytest.raises(BundleError, match="larger than slot"):
        update.install(router, make_bundle(tmp_path, "102", keys / "key.pem", b"x" * (SLOT_BYTES + 1)))


def test_not_a_bundle_is_refused_with_exit_status_2(tmp_path, router, capsys):
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a tar file")
    assert update.main([str(junk), "--json-only"], router=router) == 2
    assert "refused" in json.loads(capsys.readouterr().out)
    assert slot_b_untouched(router)


def test_a_cut_off_bundle_is_refused_and_writes_nothing(tmp_path, keys, router):
    whole = make_bundle(tmp_path, "101", keys / "key.pem").read_bytes()
    for size in (700, 4096, len(whole) // 2):  # inside the first header, after it, mid-payload
        cut = tmp_path / f"cut-{size}.bundle"
        cut.write_bytes(whole[:size])
        with pytest.raises(BundleError):
            update.install(router, cut)
        assert slot_b_untouched(router)


def test_a_second_update_replaces_the_first_on_the_same_slot(tmp_path, keys, router):
    update.install(router, make_bundle(tmp_path, "101", keys / "key.pem"))
    update.install(router, make_bundle(tmp_path, "102", keys / "key.pem"))
    assert sorted(p.name for p in router.entries.iterdir()) == ["homework-100-a.conf", "homework-102-b+3.conf"]


def test_the_web_uis_upload_is_installed_and_its_verdict_left_for_the_page(tmp_path, keys, router):
    spool = tmp_path / "spool"
    spool.mkdir()
    assert update.install_from_spool(router, spool) is None  # nothing uploaded: nothing done
    (spool / "bundle").write_bytes(make_bundle(tmp_path, "99", keys / "key.pem").read_bytes())
    assert "not newer" in update.install_from_spool(router, spool)["refused"]
    assert slot_b_untouched(router)
    assert sorted(p.name for p in spool.iterdir()) == ["result.json"]  # the spool is free again
    (spool / "bundle").write_bytes(make_bundle(tmp_path, "101", keys / "key.pem").read_bytes())
    result = update.install_from_spool(router, spool)
    assert result["installed"] == "101" and result["slot"] == "b" and result["tries"] == update.DEFAULT_TRIES
    assert json.loads((spool / "result.json").read_text()) == result
    assert sorted(p.name for p in spool.iterdir()) == ["result.json"]


def test_the_spool_is_read_and_written_without_following_links(tmp_path, keys, router):
    """The web UI (not root) owns the spool: the root installer must not be led by a link it
    planted, to read another file as the bundle or to write its verdict elsewhere."""
    spool, target = tmp_path / "spool", tmp_path / "precious"
    spool.mkdir()
    target.write_text("keep")
    (spool / "result.json.tmp").symlink_to(target)
    (spool / "bundle").symlink_to(make_bundle(tmp_path, "101", keys / "key.pem"))
    assert "symbolic link" in update.install_from_spool(router, spool)["refused"]
    assert "refused" in json.loads((spool / "result.json").read_text())
    assert target.read_text() == "keep" and slot_b_untouched(router)
    assert sorted(p.name for p in spool.iterdir()) == ["result.json"]
    # The same bundle as a plain file installs.
    (spool / "bundle").write_bytes((tmp_path / "101.bundle").read_bytes())
    assert update.install_from_spool(router, spool)["installed"] == "101"


def rewrite_after_check(monkeypatch, bundle_path: Path, member: bytes, evil: bytes) -> None:
    """After the installer has checked the bundle, rewrite one payload's bytes in the same file
    (what a compromised service that can write the spool could do while the installer runs)."""
    checked = bundle.check

    def check_then_rewrite(*args, **kwargs):
        result = checked(*args, **kwargs)
        data = bundle_path.read_bytes()
        at = data.index(member)
        with bundle_path.open("r+b") as f:
            f.seek(at)
            f.write(evil)
        return result

    monkeypatch.setattr(bundle, "check", check_then_rewrite)


@pytest.mark.parametrize(
    "member, evil",
    [(b"kernel 101", b"EVILKN 101"), (b"initrd 101", b"EVILRD 101"), (b"squashfs root", b"EVILsquashfs!")],
)
def test_a_payload_rewritten_after_the_check_is_never_booted(tmp_path, keys, router, monkeypatch, member, evil):
    good = make_bundle(tmp_path, "101", keys / "key.pem")
    rewrite_after_check(monkeypatch, good, member, evil)
    with pytest.raises((OSError, BundleError), match="changed"):
        update.install(router, good)
    assert [p.name for p in router.entries.iterdir()] == ["homework-100-a.conf"]  # nothing new boots
    slot_b = router.esp / "homework/b"
    assert not any(evil in p.read_bytes() for p in slot_b.iterdir()) if slot_b.exists() else True


def test_the_same_bundle_left_alone_installs(tmp_path, keys, router, monkeypatch):
    good = make_bundle(tmp_path, "101", keys / "key.pem")
    rewrite_after_check(monkeypatch, good, b"kernel 101", b"kernel 101")  # the same bytes again
    assert update.install(router, good)["installed"] == "101"
    assert (router.esp / "homework/b/vmlinuz").read_bytes() == b"kernel 101"
    assert sorted(p.name for p in router.esp.joinpath("homework/b").iterdir()) == ["initrd.img", "vmlinuz"]


def tiny_members(count: int) -> bytes:
    info = tarfile.TarInfo("x")
    info.mode = 0o644
    return info.tobuf(tarfile.GNU_FORMAT) * count


@pytest.mark.parametrize("where", ["before the manifest", "after the payload"])
def test_a_bundle_of_many_tiny_members_is_refused_quickly_in_little_memory(tmp_path, keys, router, where):
    """Before its signature is checked, a bundle is read only as far as its signed manifest
    names: a tar of 100,000 empty members must not cost the root installer their headers."""
    good = make_bundle(tmp_path, "101", keys / "key.pem").read_bytes()
    body = good.rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    hostile = tmp_path / "many.bundle"
    junk = tiny_members(100_000)
    hostile.write_bytes(junk + good if where == "before the manifest" else body + junk + b"\0" * 1024)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(BundleError):
            update.install(router, hostile)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0, f"{elapsed:.2f} s"
    assert peak < 4 << 20, f"{peak / (1 << 20):.1f} MiB"
    assert slot_b_untouched(router)
    # The same bundle without the extra members installs.
    assert update.install(router, tmp_path / "101.bundle")["installed"] == "101"


def test_the_console_shows_the_setup_code_until_the_owner_exists_and_a_labels_code_always():
    first = console.banner("7", "a", "ABCD-EFGH-JKLM", None)
    assert "setup code is  ABCD-EFGH-JKLM" in first and "(slot A)" in first
    assert "First run is done" in console.banner("7", "b", None, None)
    labelled = console.banner("7", "a", None, "WXYZ-2345-6789")
    assert "WXYZ-2345-6789" in labelled and "label" in labelled


def grub_tries(router: update.Router, name: str, tries: int) -> None:
    """GRUB booted entry `name` `tries` times (what its save_env leaves in grubenv)."""
    subprocess.run(
        ["grub-editenv", str(router.grub / "grubenv"), "set", f"{boot.grub_tries_variable(name)}={tries}"], check=True
    )


def booted(router: update.Router, slot: str, version: str) -> None:
    router.cmdline.write_text(f"root=PARTLABEL=homework-root-{slot} ro homework.slot={slot}\n")
    router.version_file.write_text(version + "\n")


def test_an_update_booted_by_grub_counts_its_try_and_is_blessed_when_healthy(tmp_path, keys, router):
    update.install(router, make_bundle(tmp_path, "101", keys / "key.pem"), tries=3)
    grub.count(router)  # the boot before the update's: nothing to move, grubenv and grub.cfg in place
    assert menu((router.grub / "grub.cfg").read_text()) == ["homework-101-b", "homework-100-a"]
    grub_tries(router, "homework-101-b+3.conf", 1)
    booted(router, "b", "101")
    assert grub.count(router) == {"homework-101-b+3.conf": "homework-101-b+2-1.conf"}
    assert boot.parse_grubenv((router.grub / "grubenv").read_bytes()) == {}
    assert [e["tries_left"] for e in router.status()["entries"]] == [None, 2]
    assert grub.bless(router) == "homework-101-b.conf"
    assert sorted(p.name for p in router.entries.iterdir()) == ["homework-100-a.conf", "homework-101-b.conf"]
    cfg = (router.grub / "grub.cfg").read_text()
    assert menu(cfg) == candidates(cfg)[:2] == ["homework-101-b", "homework-100-a"]
    assert "save_env" not in cfg
    assert grub.bless(router) is None  # blessed once is enough


def test_an_update_grub_tried_to_the_end_sorts_last_and_the_old_slot_boots(tmp_path, keys, router):
    update.install(router, make_bundle(tmp_path, "101", keys / "key.pem"), tries=1)
    grub_tries(router, "homework-101-b+1.conf", 1)  # tried once; it never got healthy; GRUB then booted A
    assert grub.count(router) == {"homework-101-b+1.conf": "homework-101-b+0-1.conf"}
    assert [(e["slot"], e["tries_left"]) for e in router.status()["entries"]] == [("a", None), ("b", 0)]
    assert grub.bless(router) is None  # A was never on trial
    cfg = (router.grub / "grub.cfg").read_text()
    assert menu(cfg) == ["homework-100-a", "homework-101-b"]
    assert candidates(cfg)[0] == "homework-100-a"


def test_updating_rewrites_grubs_configuration_from_the_entries(tmp_path, keys, router):
    update.install(router, make_bundle(tmp_path, "101", keys / "key.pem"))
    update.install(router, make_bundle(tmp_path, "102", keys / "key.pem"))
    assert menu((router.grub / "grub.cfg").read_text()) == ["homework-102-b", "homework-100-a"]


# What `ovs-appctl ofproto/trace br-lan <health.DHCP_DISCOVER>` printed on a router whose controller
# had installed its rules, and on one whose switch had none (fail-secure: drop).
TRACED_FLOW = (
    "Flow: udp,in_port=1,vlan_tci=0x0000,dl_src=02:00:00:00:00:99,dl_dst=ff:ff:ff:ff:ff:ff,"
    "nw_src=0.0.0.0,nw_dst=255.255.255.255,nw_tos=0,nw_ecn=0,nw_ttl=0,nw_frag=no,tp_src=68,tp_dst=67\n"
)
TRACE_TO_THE_ROUTER = (
    TRACED_FLOW
    + """

bridge("br-lan")
----------------
 0. udp,in_port=1,nw_dst=255.255.255.255,tp_dst=67, priority 1000, cookie 0x1
    meter:1
    LOCAL

Final flow: unchanged
Megaflow: recirc_id=0,eth,udp,in_port=1,nw_dst=255.255.255.255,nw_frag=no,tp_dst=67
Datapath actions: meter(0),2
"""
)
TRACE_NO_RULES = (
    TRACED_FLOW
    + """

bridge("br-lan")
----------------
 0. No match.
    drop

Final flow: unchanged
Megaflow: recirc_id=0,eth,ip,in_port=1,nw_frag=no
Datapath actions: drop
"""
)


def test_the_health_check_sees_dhcp_reach_the_routers_socket_only_through_the_rules():
    assert health.dhcp_goes_to_the_router(TRACE_TO_THE_ROUTER)
    assert not health.dhcp_goes_to_the_router(TRACE_NO_RULES)
    assert not health.dhcp_goes_to_the_router("")  # ovs-vswitchd not answering
    assert "udp_src=68" in health.DHCP_DISCOVER  # tp_src= is refused by ofproto/trace after "udp"


def show(**units: tuple[str, int]) -> str:
    """What `systemctl show --property=Id,ActiveState,NRestarts` prints for these units."""
    return (
        "\n\n".join(
            f"NRestarts={restarts}\nId=homework-{name}.service\nActiveState={state}"
            for name, (state, restarts) in units.items()
        )
        + "\n"
    )


def test_the_health_check_gives_up_on_a_service_that_keeps_failing_however_slowly():
    # A router coming up: a service that restarted once (say, before OVS was up) is not failing.
    assert health.failing_units(show(controller=("activating", 1), webui=("active", 0))) == []
    # systemd gave up on it...
    assert health.failing_units(show(controller=("failed", 5), webui=("active", 0))) == ["homework-controller.service"]
    # ...or has not yet, because on a slow box five tries take longer than its interval: the same.
    assert health.failing_units(show(controller=("activating", 5), webui=("active", 0))) == [
        "homework-controller.service"
    ]
    assert health.failing_units(show(controller=("activating", 4))) == []
    assert health.failing_units("") == []  # systemctl not answering: nothing is known to fail


# ---- systemd units from deploy/services.toml

SETTINGS = build.SETTINGS  # the values the image renders its units with


def unit_lines(text: str, key: str) -> list[str]:
    return [line.partition("=")[2] for line in text.splitlines() if line.startswith(key + "=")]


def test_each_service_becomes_a_unit_that_starts_its_command_after_its_dependencies():
    services = homework_deploy.load(SETTINGS, platform="image")
    units = systemd.render_all(services, str(SETTINGS["PYTHON"]), requires=["homework-network.service"])
    assert set(units) == {f"homework-{name}.service" for name in services} | {"homework-radio-refresh.path"}
    for name, service in services.items():
        text = units[systemd.unit_name(name)]
        assert shlex.split(unit_lines(text, "ExecStart")[0]) == list(service.command)
        # A oneshot that fails waits for the next change (its path unit starts it again).
        assert unit_lines(text, "Restart") == ([] if service.oneshot else ["on-failure"])
        assert unit_lines(text, "NoNewPrivileges") == ["yes"]
        assert unit_lines(text, "ProtectSystem") == ["strict"]
        after = unit_lines(text, "After")[0].split()
        assert after == ["homework-network.service", *(f"homework-{a}.service" for a in service.after)]
        assert unit_lines(text, "Wants")[0].split() == after
    assert unit_lines(units["homework-webui.service"], "CapabilityBoundingSet") == [""]
    assert unit_lines(units["homework-hwdb.service"], "CapabilityBoundingSet") == ["CAP_NET_BIND_SERVICE"]


def writable(text: str) -> set[str]:
    """What a unit may write beside its private /tmp: ReadWritePaths= and StateDirectory= (under
    /var/lib), less the ReadOnlyPaths= inside them."""
    paths = {p.lstrip("-") for p in unit_lines(text, "ReadWritePaths")}
    paths |= {f"/var/lib/{p}" for p in unit_lines(text, "StateDirectory")}
    return paths


def inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def may_write(text: str, path: str) -> bool:
    """Whether a unit (ProtectSystem=strict: all else read-only) may write `path`."""
    if any(inside(path, p.lstrip("-")) for p in unit_lines(text, "ReadOnlyPaths")):
        return False
    return any(inside(path, p) for p in writable(text))


def image_units() -> dict[str, str]:
    """The image's rendered service units (the .path units start services; they run nothing themselves)."""
    units = systemd.render_all(homework_deploy.load(SETTINGS, platform="image"), str(SETTINGS["PYTHON"]))
    return {name: text for name, text in units.items() if name.endswith(".service")}


def test_every_root_service_of_the_image_is_rendered_and_none_is_hand_written_beside_it():
    """The units the build renders and enables are services.toml's; image/rootfs holds none of them (a
    hand-written unit of the same name would be overwritten, or worse, be the one that ships)."""
    services = homework_deploy.load(SETTINGS, platform="image")
    assert {"wan-pd", "radio-refresh"} <= set(services)
    rendered = systemd.render_all(services, str(SETTINGS["PYTHON"]))
    hand_written = {p.name for p in (build.IMAGE_DIR / "rootfs/usr/lib/systemd/system").iterdir()}
    assert hand_written and not hand_written & set(rendered)
    assert not set(rendered) & set(build.SYSTEM_UNITS)  # the build enables those it rendered by themselves
    # The prefix client runs from boot; the refresh is started by its path unit alone.
    enabled = systemd.enabled_units(services)
    assert "homework-wan-pd.service" in enabled and "homework-radio-refresh.path" in enabled
    assert "homework-radio-refresh.service" not in enabled


def test_the_wan_prefix_client_may_write_only_its_own_state_with_only_dhcpcds_capabilities(tmp_path):
    """dhcpcd parses what the ISP sends, as root: a flaw in it must not reach the controller's database,
    the web UI's accounts or the update spool, nor keep any capability dhcpcd does not use."""
    units = image_units()
    pd = units["homework-wan-pd.service"]
    assert unit_lines(pd, "ProtectSystem") == ["strict"] and unit_lines(pd, "NoNewPrivileges") == ["yes"]
    assert unit_lines(pd, "PrivateDevices") == ["yes"] and unit_lines(pd, "ProtectKernelModules") == ["yes"]
    # Its network work, and its privilege separation (chroot, then setgroups/setgid/setuid to `dhcpcd`).
    assert set(unit_lines(pd, "CapabilityBoundingSet")[0].split()) == {
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_NET_BIND_SERVICE",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_SYS_CHROOT",
    }
    assert unit_lines(pd, "AmbientCapabilities") == unit_lines(pd, "CapabilityBoundingSet")
    assert set(unit_lines(pd, "RestrictAddressFamilies")[0].split()) == {
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK",
        "AF_PACKET",
    }
    prefix = f"{build.STATE}/{prefix_delegation.DELEGATED_FILE}"
    wan_setting = f"/proc/sys/net/ipv4/conf/{build.WAN_IFACE}/promote_secondaries"  # dhcpcd's if_init sets it
    for own in (prefix, f"{prefix}.tmp", "/var/lib/dhcpcd/wan.lease6", "/run/dhcpcd/wan-6.pid", wan_setting):
        assert may_write(pd, own), own
    assert unit_lines(pd, "ProtectKernelTunables") == ["yes"]  # every other kernel setting read-only
    for others in (
        f"{build.STATE}/controller.sqlite",
        f"{build.STATE}/hwdb/agent.key",
        f"{build.STATE}/webui/accounts.sqlite",
        f"{SETTINGS['UPDATES']}/bundle",
        str(PSK_FILE),
        "/etc/resolv.conf",
        "/proc/sys/net/ipv6/conf/all/forwarding",
        f"/proc/sys/net/ipv4/conf/{build.LAN_PORT}/promote_secondaries",
        "/efi/loader/entries/x.conf",
    ):
        assert not may_write(pd, others), others
    # Its file is the controller's to read, not to write; it is the only writer of it.
    assert [name for name, text in units.items() if may_write(text, prefix)] == ["homework-wan-pd.service"]
    # No ready check: the router serves without IPv6, so no start waits for an ISP that may never answer.
    assert unit_lines(pd, "Type") == ["exec"] and not unit_lines(pd, "ExecStartPost")
    # The command reads the configuration and hook that write_files renders, under the names it gives them.
    argv = shlex.split(unit_lines(pd, "ExecStart")[0])
    files = Path(str(SETTINGS["SERVICE_FILES"]))
    assert argv[0] == "dhcpcd" and argv[-1] == build.WAN_IFACE
    assert argv[argv.index("--config") + 1] == str(files / prefix_delegation.CONF_NAME)
    assert argv[argv.index("--script") + 1] == str(files / prefix_delegation.HOOK_NAME)
    prefix_delegation.write_files(tmp_path, build.WAN_IFACE, build.STATE)
    assert f"allowinterfaces {build.WAN_IFACE}" in (tmp_path / prefix_delegation.CONF_NAME).read_text()
    assert prefix in (tmp_path / prefix_delegation.HOOK_NAME).read_text()
    assert (tmp_path / prefix_delegation.HOOK_NAME).stat().st_mode & 0o111


# dhcpcd as the rendered unit confines it, without systemd: in a network and mount namespace of its own (a
# veth named as the router's WAN, Kea delegating on its other end), everything read-only but the unit's
# ReadWritePaths= (dhcpcd's own directories on fresh tmpfs, as on the router), with the unit's bounding set.
SANDBOXED_DHCPCD = r"""
set -e
ip link set lo up
ip link add "$WAN" type veth peer name isp
ip link set "$WAN" up
ip link set isp up
# The router's /run: a tmpfs, with the directory its tmpfiles.d (homework.conf) makes for dhcpcd (a fresh
# machine has none, and the unit's sandbox cannot make one: /run is read-only in it).
mount -t tmpfs tmpfs /run
mkdir /run/dhcpcd
for ro in /etc /usr /var /tmp /run /root /home /proc/sys; do
  [ -d "$ro" ] && mount --bind "$ro" "$ro" && mount -o remount,bind,ro "$ro"
done
mount -t tmpfs tmpfs /run/dhcpcd
mount -t tmpfs tmpfs /var/lib/dhcpcd
for rw in $WRITABLE; do mount --bind "$rw" "$rw" && mount -o remount,bind,rw "$rw"; done
mount -t tmpfs tmpfs "$WORK/kea"
sleep 2  # Kea binds isp's link-local address, which is unusable until duplicate-address detection ends
KEA_PIDFILE_DIR="$WORK/kea" KEA_LOCKFILE_DIR="$WORK/kea" kea-dhcp6 -c "$WORK/kea.json" >"$WORK/log/kea.log" 2>&1 &
exec setpriv --bounding-set="-all,$CAPS" --no-new-privs "$@"
"""


def sandboxed_dhcpcd(unit: str, work: Path, state: Path, caps: list[str]) -> tuple[str, str]:
    """Run the unit's dhcpcd as sandboxed above until it writes the prefix (or 20 s); its prefix file and log."""
    files = work / "files"
    prefix_delegation.write_files(files, build.WAN_IFACE, state)
    (state / prefix_delegation.DELEGATED_FILE).parent.mkdir(parents=True)
    (work / "kea").mkdir()
    (work / "log").mkdir()
    (work / "kea.json").write_text(kea_config("2001:db8:100::/56", "isp"))
    writable = [p.lstrip("-") for p in unit_lines(unit, "ReadWritePaths")]
    ours = str(build.STATE / Path(prefix_delegation.DELEGATED_FILE).parent)
    writable = [str(state / Path(prefix_delegation.DELEGATED_FILE).parent) if p == ours else p for p in writable]
    argv = [
        a.replace(str(SETTINGS["SERVICE_FILES"]), str(files)) for a in shlex.split(unit_lines(unit, "ExecStart")[0])
    ]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "WAN": build.WAN_IFACE,
        "WORK": str(work),
        "WRITABLE": " ".join([*writable, str(work / "log")]),
        "CAPS": ",".join("+" + c.removeprefix("CAP_").lower() for c in caps),
    }
    script = ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", SANDBOXED_DHCPCD, "sandbox"]
    with open(work / "log" / "dhcpcd.log", "w") as log:
        proc = subprocess.Popen([*script, *argv], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    prefix_file = state / prefix_delegation.DELEGATED_FILE
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None and not prefix_file.exists():
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the sandbox failed: its log says why, below
            os.killpg(proc.pid, signal.SIGTERM)  # dhcpcd and Kea, the namespace's only processes
        proc.wait(10)
    prefix = prefix_file.read_text() if prefix_file.exists() else ""
    return prefix, (work / "log" / "dhcpcd.log").read_text()


@pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("dhcpcd", "kea-dhcp6", "unshare", "setpriv")),
    reason="needs root, dhcpcd, kea-dhcp6, unshare and setpriv",
)
def test_the_wan_prefix_clients_sandbox_leaves_dhcpcd_what_it_needs_to_take_the_isps_prefix(tmp_path):
    """The unit's capabilities and writable paths are enough for the image's dhcpcd to take a delegated /56
    and write it, with the ISP's messages parsed by processes that dropped to user `dhcpcd` in a chroot."""
    pd = image_units()["homework-wan-pd.service"]
    caps = unit_lines(pd, "CapabilityBoundingSet")[0].split()
    prefix, log = sandboxed_dhcpcd(pd, tmp_path / "unit", tmp_path / "unit-state", caps)
    assert prefix.split()[:1] == ["2001:db8:100::/56"], log
    assert "failed to drop privileges" not in log, log
    # Without the three its privilege separation uses, dhcpcd still takes the prefix, but every process of
    # it, the parsers of what the ISP sends among them, stays root outside the chroot.
    separation = {"CAP_SETUID", "CAP_SETGID", "CAP_SYS_CHROOT"}
    prefix, log = sandboxed_dhcpcd(pd, tmp_path / "less", tmp_path / "less-state", sorted(set(caps) - separation))
    assert "failed to drop privileges" in log and "chroot: /usr/lib/dhcpcd: Operation not permitted" in log, log
    # Without the WAN's kernel settings writable, dhcpcd does not even start on it.
    pd_without_proc = "\n".join(line for line in pd.splitlines() if "/proc/sys" not in line)
    prefix, log = sandboxed_dhcpcd(pd_without_proc, tmp_path / "ro", tmp_path / "ro-state", caps)
    assert not prefix and "Read-only file system" in log, log


def test_the_radio_refresh_runs_at_each_change_of_the_keys_or_settings_with_no_capability():
    units = systemd.render_all(homework_deploy.load(SETTINGS, platform="image"), str(SETTINGS["PYTHON"]))
    refresh, path = units["homework-radio-refresh.service"], units["homework-radio-refresh.path"]
    # What the controller writes (the key file, the radio settings) is what the path unit watches.
    assert unit_lines(path, "PathChanged") == [str(PSK_FILE), str(WIFI_CONFIG)]
    assert unit_lines(path, "Unit") == ["homework-radio-refresh.service"]
    assert unit_lines(path, "WantedBy") == ["paths.target"]
    assert unit_lines(refresh, "Type") == ["oneshot"] and not unit_lines(refresh, "WantedBy")
    # A start limit of our own would stop the path unit after a burst of key changes: systemd's own.
    assert not unit_lines(refresh, "StartLimitBurst")
    assert shlex.split(unit_lines(refresh, "ExecStart")[0])[1:] == ["-m", "homework_image.radio", "refresh"]
    # Sockets (hostapd's control socket, systemd's) and files root owns: no capability, AF_UNIX only.
    assert unit_lines(refresh, "CapabilityBoundingSet") == [""] and unit_lines(refresh, "AmbientCapabilities") == [""]
    assert unit_lines(refresh, "RestrictAddressFamilies") == ["AF_UNIX"]
    assert unit_lines(refresh, "ProtectSystem") == ["strict"] and unit_lines(refresh, "PrivateDevices") == ["yes"]
    # It writes hostapd's configuration and the two files it follows (each replaced atomically beside itself)...
    for own in ("/run/homework/hostapd.conf", str(PSK_FILE), str(WIFI_CONFIG)):
        assert may_write(refresh, own), own
    # ... and no other service's: the spool, hwdb's and the web UI's state, hostapd's sockets, the prefix.
    for others in (
        f"{SETTINGS['UPDATES']}/bundle",
        f"{build.STATE}/hwdb/hwdb.sqlite",
        f"{build.STATE}/webui/accounts.sqlite",
        "/run/homework/hostapd/br-lan",
        f"{build.STATE}/{prefix_delegation.DELEGATED_FILE}",
        "/efi/loader/entries/x.conf",
    ):
        assert not may_write(refresh, others), others


def test_each_platform_starts_only_the_services_services_toml_gives_it():
    image = homework_deploy.load(SETTINGS, platform="image")
    home = homework_deploy.load(SETTINGS, platform="homenet")
    everything = homework_deploy.load(SETTINGS)
    assert set(image) == set(everything)
    # The emulated home asks its ISP for a prefix as the router does; it has no radio to refresh, and is never
    # an access point of another router.
    assert "wan-pd" in home and "radio-refresh" not in home
    assert set(home) == set(everything) - {"radio-refresh", "satellite"}
    # OpenWrt's netifd asks for the prefix and serves the radio: the feed ships neither script, the others yes.
    scripts = procd.render()
    assert "homework-controller.init" in scripts and "homework-webui.init" in scripts
    assert not {"homework-wan-pd.init", "homework-radio-refresh.init"} & set(scripts)


@pytest.mark.parametrize(
    "declaration, error",
    [
        ('platforms = ["image", "router"]', "platforms"),
        ("platforms = []", "platforms"),
        ("oneshot = true", "triggered_by"),
        ('triggered_by = ["/x"]', "triggered_by"),
    ],
)
def test_a_service_declared_for_no_known_platform_or_a_half_declared_oneshot_is_refused(tmp_path, declaration, error):
    base = '[settings]\n\n[services.job]\ncommand = ["true"]\n'
    good = tmp_path / "good.toml"
    good.write_text(base + 'platforms = ["image"]\noneshot = true\ntriggered_by = ["/x"]\n')
    assert homework_deploy.load({}, good)["job"].triggered_by == ("/x",)  # the whole declaration loads
    bad = tmp_path / "bad.toml"
    bad.write_text(base + declaration + "\n")
    with pytest.raises(homework_deploy.ServicesError, match=error):
        homework_deploy.load({}, bad)


def test_only_the_web_ui_may_write_the_update_spool():
    """What lands in the spool the root installer reads: one compromised service other than the
    web UI must not be able to put a bundle there (nor into the web UI's accounts)."""
    units, spool = image_units(), str(SETTINGS["UPDATES"])
    assert all(unit_lines(text, "ProtectSystem") == ["strict"] for text in units.values())
    assert [name for name, text in units.items() if may_write(text, f"{spool}/bundle")] == ["homework-webui.service"]
    assert [name for name, text in units.items() if may_write(text, "/var/lib/homework/webui/accounts.sqlite")] == [
        "homework-webui.service"
    ]
    # Each writes its own files: hwdb and the controller their databases, hostapd its sockets.
    assert may_write(units["homework-hwdb.service"], "/var/lib/homework/hwdb/hwdb.sqlite")
    assert may_write(units["homework-controller.service"], "/var/lib/homework/controller.sqlite")
    # ... and not each other's: hwdb its own directory only, the controller everything but it.
    assert not may_write(units["homework-hwdb.service"], "/var/lib/homework/controller.sqlite")
    assert not may_write(units["homework-controller.service"], "/var/lib/homework/hwdb/hwdb.sqlite")
    assert may_write(units["homework-hostapd.service"], "/run/homework/hostapd/br-lan")
    assert not may_write(units["homework-controller.service"], "/run/homework/hostapd/br-lan")
    assert not any(may_write(text, "/efi/loader/entries/x.conf") for text in units.values())


def test_hwdb_and_the_web_ui_run_as_their_own_users_and_the_web_ui_reads_hwdbs_agent_key():
    units = image_units()
    webui, hwdb = units["homework-webui.service"], units["homework-hwdb.service"]
    assert unit_lines(webui, "User") == ["homework-webui"]
    # systemd hands the state directory (and what an older image left there as root) to the user.
    assert unit_lines(webui, "StateDirectory") == ["homework/webui"]
    assert unit_lines(webui, "ReadWritePaths") == ["-/run/homework/update", "-/run/homework/role"]
    assert unit_lines(hwdb, "User") == ["homework-hwdb"] and unit_lines(hwdb, "Group") == [systemd.HWDB_GROUP]
    assert unit_lines(hwdb, "StateDirectory") == ["homework/hwdb"] and not unit_lines(hwdb, "ReadWritePaths")
    assert unit_lines(webui, "SupplementaryGroups") == [systemd.HWDB_GROUP]
    # Whoever stays root opens no disk: a root service that could would write any kernel it liked.
    for name, text in units.items():
        if not unit_lines(text, "User"):
            assert unit_lines(text, "PrivateDevices") == ["yes"] or unit_lines(text, "DevicePolicy") == ["closed"], name
    # The users and groups the units name are made in the image, with fixed numbers.
    sysusers = (build.IMAGE_DIR / "rootfs/usr/lib/sysusers.d/homework.conf").read_text()
    made = {line.split()[1]: line.split()[2] for line in sysusers.splitlines() if line[:2] in ("u ", "g ")}
    named = {a.user for a in systemd.ACCOUNTS.values()} | {
        g for a in systemd.ACCOUNTS.values() for g in a.supplementary
    }
    assert named - {"root"} <= set(made) and all(n.isdigit() for n in made.values())


def test_the_controller_and_the_radio_refresh_share_hostapds_private_tmp_where_hostapd_answers_them():
    units = image_units()
    controller, hostapd = units["homework-controller.service"], units["homework-hostapd.service"]
    refresh = units["homework-radio-refresh.service"]  # it gives the running hostapd changed passwords
    for talks_to_hostapd in (controller, refresh):
        assert unit_lines(talks_to_hostapd, "JoinsNamespaceOf") == ["homework-hostapd.service"]
        assert unit_lines(talks_to_hostapd, "PrivateTmp") == ["yes"]
    assert unit_lines(hostapd, "PrivateTmp") == ["yes"]
    assert not unit_lines(units["homework-webui.service"], "JoinsNamespaceOf")


def test_the_emulated_home_reads_the_same_services_without_the_sandbox():
    """`writes` is for starters that confine; the service's command and readiness are the same."""
    services = homework_deploy.load(SETTINGS, platform="homenet")
    assert services["webui"].writes == ("/var/lib/homework/webui", "/run/homework/update", "/run/homework/role")
    no_updates = homework_deploy.load({**SETTINGS, "UPDATES": "", "ROLE_SPOOL": ""})
    assert no_updates["webui"].writes == ("/var/lib/homework/webui",)  # an empty setting is no path


def test_the_controller_goes_ahead_of_pages_and_logs_on_a_busy_cpu_and_a_bad_priority_is_refused(tmp_path):
    """services.toml's `nice`: the controller's unit gets the nice and the cgroup weight that gives its group the
    same share (systemd puts each service in a group of its own, where a nice alone counts only among its own
    threads); the others, everyone's default. A priority out of nice's range stops the load, with the reason."""
    units = systemd.render_all(homework_deploy.load(SETTINGS, platform="image"), str(SETTINGS["PYTHON"]))
    controller = units["homework-controller.service"]
    assert unit_lines(controller, "Nice") == ["-5"] and unit_lines(controller, "CPUWeight") == ["305"]
    for name in ("homework-webui.service", "homework-hwdb.service"):
        assert unit_lines(units[name], "Nice") == [] and unit_lines(units[name], "CPUWeight") == []
    assert [homework_deploy.cpu_weight(n) for n in (0, 5, -20, 19)] == [100, 33, 8674, 1]
    toml = tmp_path / "services.toml"
    toml.write_text(homework_deploy.SERVICES_FILE.read_text().replace("nice = -5", "nice = -30"))
    with pytest.raises(homework_deploy.ServicesError, match="controller: `nice` must be a whole number from -20"):
        homework_deploy.load(SETTINGS, toml)


def test_a_service_without_declared_capabilities_is_refused():
    service = homework_deploy.Service("mystery", "?", ("true",), (), {}, 5)
    with pytest.raises(ValueError, match="no capabilities declared"):
        systemd.render(service, "python3")


def test_unit_words_with_spaces_and_specifiers_survive_systemd_quoting():
    service = homework_deploy.Service("webui", "x", ("/bin/echo", "a b", "100%", "$HOME"), (), {}, 5)
    text = systemd.render(service, "python3")
    assert unit_lines(text, "ExecStart") == ["/bin/echo 'a b' 100%% $$HOME"]


def test_services_that_say_when_they_are_ready_are_type_notify_and_the_others_are_waited_for():
    """No Python start on the boot's path just to learn that hwdb or the controller serves: they say so."""
    units = image_units()
    for name in ("hwdb", "controller"):
        text = units[systemd.unit_name(name)]
        assert unit_lines(text, "Type") == ["notify"] and unit_lines(text, "NotifyAccess") == ["main"], name
        assert not unit_lines(text, "ExecStartPost"), name
    # hostapd says nothing: the shell waits for its control socket; the web UI's URL is asked by Python.
    hostapd_wait = shlex.split(unit_lines(units["homework-hostapd.service"], "ExecStartPost")[0].replace("$$", "$"))
    assert hostapd_wait[:2] == ["/bin/sh", "-c"] and "/run/homework/hostapd/" in hostapd_wait[4]
    assert "--wait-ready" in unit_lines(units["homework-webui.service"], "ExecStartPost")[0]


def run_unit_wait(text: str, mainpid: int) -> subprocess.CompletedProcess:
    """The unit's ExecStartPost= as systemd runs it: its $$ made $, and $MAINPID in the environment."""
    argv = shlex.split(unit_lines(text, "ExecStartPost")[0].replace("$$", "$"))
    return subprocess.run(argv, env={"MAINPID": str(mainpid), "PATH": "/usr/bin:/bin"}, timeout=30)


def test_the_shells_wait_for_a_path_passes_when_it_appears_and_fails_at_once_when_the_service_died(tmp_path):
    flag = tmp_path / "hostapd" / "wlan0"
    service = homework_deploy.Service("hostapd", "x", ("hostapd",), (), {"path": str(flag)}, 5)
    text = systemd.render(service, "python3")
    running = subprocess.Popen(["sleep", "30"])
    try:
        threading.Timer(1.0, lambda: (flag.parent.mkdir(), flag.touch())).start()
        started = time.monotonic()
        assert run_unit_wait(text, running.pid).returncode == 0
        assert 1 <= time.monotonic() - started < 5
    finally:
        running.kill()
        running.wait()
    flag.unlink()
    started = time.monotonic()
    assert run_unit_wait(text, running.pid).returncode == 1  # gone: not the whole 5 s, nor forever
    assert time.monotonic() - started < 2


@pytest.fixture
def health_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps({"switch_ready": self.path == "/ready"}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_readiness_checks_wait_for_the_real_condition(tmp_path, health_server):
    assert systemd.wait_ready({"url": f"{health_server}/ready", "json_field": "switch_ready"}, 5)
    assert not systemd.wait_ready({"url": f"{health_server}/other", "json_field": "switch_ready"}, 0.5)
    flag = tmp_path / "socket"
    assert not homework_deploy.ready_now({"path": str(flag)})
    flag.touch()
    assert systemd.main(["--wait-ready", json.dumps({"path": str(flag)}), "--timeout", "1"]) == 0
    assert systemd.main(["--wait-ready", json.dumps({"command": ["false"]}), "--timeout", "0.3"]) == 1


def test_a_service_that_dies_before_it_is_ready_fails_its_start_at_once(tmp_path, monkeypatch, capsys):
    """systemd waits for ExecStartPost even after the service died: the check must notice, or a
    controller that cannot start costs its whole ready timeout on every try (minutes per update
    rollback)."""
    flag = tmp_path / "socket"
    dead = subprocess.Popen(["sh", "-c", "exit 1"])
    dead.wait()
    monkeypatch.setenv("MAINPID", str(dead.pid))
    started = time.monotonic()
    assert systemd.main(["--wait-ready", json.dumps({"path": str(flag)}), "--timeout", "30"]) == 1
    assert time.monotonic() - started < 5
    assert "ended before it was ready" in capsys.readouterr().err
    # The same check for a service that runs waits for it, and passes once it serves.
    running = subprocess.Popen(["sleep", "30"])
    try:
        monkeypatch.setenv("MAINPID", str(running.pid))
        threading.Timer(1.0, flag.touch).start()
        assert systemd.main(["--wait-ready", json.dumps({"path": str(flag)}), "--timeout", "30"]) == 0
    finally:
        running.kill()
        running.wait()
    # A zombie (exited, not yet reaped by systemd) counts as gone.
    zombie = subprocess.Popen(["sh", "-c", "exit 1"])
    try:
        wait_until("the unreaped child to count as gone", lambda: not systemd.process_alive(zombie.pid), 5, 0.05)
    finally:
        zombie.wait()


def test_the_shipped_image_over_its_size_goal_fails_the_build_and_one_within_it_passes():
    assert "149.5 MB (goal 150 MB)" in build.check_shipped_size(149_500_000)
    with pytest.raises(build.BuildError, match="150.1 MB, over its goal of 150 MB"):
        build.check_shipped_size(150_100_000)
