"""homework-update: install a signed update bundle into the inactive root slot.

    homework-update BUNDLE [--reboot] [--tries N] [--allow-older]   install (prints JSON)
    homework-update --status                                        slots and boot entries (JSON)
    homework-update --spool DIR                                     install what the web UI received

Order of work, so that a power cut at any point leaves a router that boots:
1. verify the bundle (signature, then every payload's hash) — nothing is written before;
2. delete the inactive slot's boot entries, so it is never booted half-written;
3. write the root image to the inactive slot's partition and read it back;
4. write its kernel and initrd to the EFI system partition;
5. write its boot entry with a boot counter (`+TRIES`), last and atomically.
(GRUB's configuration, for legacy BIOS boot, is regenerated from the entries after 2 and 5.)
On the next boot systemd-boot (or GRUB) tries it; homework-health blesses it when the router works, and
after TRIES unblessed boots the boot loader goes back to the slot that was running.

Exit status: 0 installed, 2 refused (bad bundle; nothing written), 1 failed while writing.

The web UI cannot write the disk: it leaves an uploaded bundle as DIR/bundle (complete, synced)
and homework-update-spool.path runs `--spool DIR` as root, which installs it, writes the verdict
(the JSON printed for BUNDLE) to DIR/result.json for the web UI to show, removes DIR/bundle
whatever happened, and restarts the router into the new version
(webui/homework_webui/updates.py is the other side)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

from . import ESP, ROOT_PARTLABEL, UPDATE_KEY, VERSION_FILE, boot, bundle
from .bundle import BundleError

DEFAULT_TRIES = 3
SPOOL_BUNDLE, SPOOL_RESULT = "bundle", "result.json"


class Router:
    """Where this router keeps its slots: the real paths, or a test's stand-ins."""

    def __init__(
        self,
        esp: Path = ESP,
        partitions: Path = Path("/dev/disk/by-partlabel"),
        cmdline: Path = Path("/proc/cmdline"),
        version_file: Path = VERSION_FILE,
        update_key: Path = UPDATE_KEY,
    ):
        self.esp, self.partitions, self.cmdline = esp, partitions, cmdline
        self.version_file, self.update_key = version_file, update_key

    @property
    def entries(self) -> Path:
        return self.esp / "loader" / "entries"

    @property
    def grub(self) -> Path:
        return self.esp / boot.GRUB_DIR

    def write_grub_config(self) -> None:
        """GRUB's configuration from the entries as they are now (legacy BIOS boot reads it)."""
        texts = {p.name: p.read_text() for p in self.entries.glob("*.conf")}
        path = self.grub / "grub.cfg"
        text = boot.grub_config(texts)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, text.encode())

    def running(self) -> tuple[str, str]:
        """(slot, version) of the running system."""
        return boot.running_slot(self.cmdline.read_text()), self.version_file.read_text().strip()

    def partition(self, slot: str) -> Path:
        return self.partitions / ROOT_PARTLABEL.format(slot=slot)

    def status(self) -> dict:
        slot, version = self.running()
        entries = []
        for path in sorted(self.entries.glob("*.conf")):
            parsed = boot.parse_entry(path.name)
            if parsed:
                entries.append({"file": path.name, **parsed})
        return {"running": {"slot": slot, "version": version}, "entries": entries}


def install(
    router: Router, bundle_path: Path, tries: int = DEFAULT_TRIES, allow_older: bool = False, follow_links: bool = True
) -> dict:
    with open_bundle(bundle_path, follow_links) as source:
        return _install(router, source, tries, allow_older)


def open_bundle(path: Path, follow_links: bool = True) -> BinaryIO:
    """The bundle to read: a file or a block device (never a symlink, unless `follow_links`)."""
    try:
        fd = os.open(path, os.O_RDONLY | (0 if follow_links else os.O_NOFOLLOW))
    except OSError as exc:
        raise BundleError(f"{path} cannot be read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
        os.close(fd)
        raise BundleError(f"{path} is not a file")
    return os.fdopen(fd, "rb")


def _install(router: Router, source: BinaryIO, tries: int, allow_older: bool) -> dict:
    running_slot, running_version = router.running()
    manifest = bundle.check(source, router.update_key)
    if not allow_older and boot.version_key(manifest.version) <= boot.version_key(running_version):
        raise BundleError(
            f"the bundle's version {manifest.version} is not newer than the running "
            f"{running_version} (--allow-older to install it anyway)"
        )
    target = boot.other_slot(running_slot)
    capacity = _capacity(router.partition(target))
    if capacity and manifest.files["root.squashfs"]["size"] > capacity:
        raise BundleError(
            f"the root image ({manifest.files['root.squashfs']['size']} bytes) is larger than slot "
            f"{router.partition(target)} ({capacity})"
        )
    for path in router.entries.glob("*.conf"):
        parsed = boot.parse_entry(path.name)
        if parsed and parsed["slot"] == target:
            path.unlink()
    sync_dir(router.entries)
    router.write_grub_config()

    _write_payload(router, source, manifest, target)

    entry = router.entries / boot.entry_name(manifest.version, target, tries)
    write_file(entry, boot.entry_text(manifest.version, target).encode())
    router.write_grub_config()
    return {
        "installed": manifest.version,
        "slot": target,
        "entry": entry.name,
        "tries": tries,
        "running": {"slot": running_slot, "version": running_version},
    }


class BundleChanged(OSError):
    """The bundle's bytes changed after they were checked (someone else can write the file):
    what was written is not what was signed, so no boot entry is made for it."""


def _write_payload(router: Router, source: BinaryIO, manifest: bundle.Manifest, target: str) -> None:
    """Read the bundle a second time and write each payload where it goes, hashing the very
    bytes that are written: they must be the checked ones, or nothing is made bootable. The
    kernel and initrd are written beside their final names and take them only once all three
    payloads proved to be the signed ones."""
    kernel_dir = router.esp / boot.slot_dir(target)
    kernel_dir.mkdir(parents=True, exist_ok=True)
    staged: dict[Path, Path] = {}
    try:
        for name, payload in bundle.members(source, router.update_key):
            if payload.manifest != manifest:
                raise BundleChanged("the bundle's manifest changed after it was checked")
            if name == "root.squashfs":
                _write_checked(router.partition(target), payload, manifest.files[name], create=False)
            else:
                final = kernel_dir / KERNEL_FILES[name]
                staged[final] = final.with_name(final.name + ".tmp")
                _write_checked(staged[final], payload, manifest.files[name], create=True)
    except BundleError as exc:
        _discard(staged.values())
        raise BundleChanged(f"the bundle changed after it was checked: {exc}") from None
    except BaseException:
        _discard(staged.values())
        raise
    for final, tmp in staged.items():
        tmp.replace(final)
    sync_dir(kernel_dir)


KERNEL_FILES = {"vmlinuz": boot.KERNEL, "initrd.img": boot.INITRD}


def _discard(paths) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _capacity(device: Path) -> int:
    """The size of a slot's partition (0 if it cannot tell)."""
    fd = os.open(device, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def _write_checked(path: Path, source: bundle.Readable, info: dict, create: bool) -> None:
    """Write `source` to `path` (a new file, or over a partition), hashing each chunk as it is
    written, then read it back: BundleChanged if the bytes were not the signed ones, OSError if
    the disk does not give back what it was given."""
    h, size = hashlib.sha256(), 0
    with path.open("wb" if create else "r+b") as out:
        for chunk in bundle.chunks(source):
            h.update(chunk)
            size += len(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    if (size, h.hexdigest()) != (info["size"], info["sha256"]):
        raise BundleChanged(f"the bundle changed after it was checked: {path.name} is not the signed one")
    with path.open("rb") as back:
        if bundle.file_digest(_Limited(back, info["size"])) != (info["size"], info["sha256"]):
            raise OSError(f"{path} does not read back what was written: the disk may be failing")


def install_from_spool(router: Router, spool: Path) -> dict | None:
    """Install the web UI's upload, SPOOL/bundle; its verdict goes to SPOOL/result.json. None: no upload."""
    upload = spool / SPOOL_BUNDLE
    if not os.path.lexists(upload):
        return None
    result = {"failed": "the installer stopped unexpectedly; the running version stays"}
    try:
        result = install(router, upload, follow_links=False)
    except BundleError as exc:
        result = {"refused": str(exc)}
    except (OSError, boot.BootError) as exc:
        result = {"failed": str(exc)}
    finally:
        # Whatever happened, the spool is freed: the path unit would start again while it is there.
        write_file(spool / SPOOL_RESULT, json.dumps(result).encode())
        upload.unlink(missing_ok=True)
    return result


class _Limited:
    def __init__(self, f, limit: int):
        self.f, self.left = f, limit

    def read(self, n: int) -> bytes:
        data = self.f.read(min(n, self.left))
        self.left -= len(data)
        return data


def write_file(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically. Never through a link: the spool's directory is
    the web UI's to write, and this runs as root."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    sync_dir(path.parent)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None, router: Router | None = None) -> int:
    p = argparse.ArgumentParser(prog="homework-update", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", nargs="?", type=Path, help="the update bundle (a file or a block device)")
    p.add_argument("--status", action="store_true", help="show the slots and boot entries")
    p.add_argument(
        "--spool",
        type=Path,
        metavar="DIR",
        help="install DIR/bundle, left there by the web UI, " "write the result to DIR/result.json and reboot into it",
    )
    p.add_argument("--tries", type=int, default=DEFAULT_TRIES, help="boots the new version gets to prove healthy")
    p.add_argument("--allow-older", action="store_true", help="install a version not newer than the running one")
    p.add_argument("--reboot", action="store_true", help="reboot into the new version once it is installed")
    p.add_argument("--json-only", action="store_true", help="print only the JSON result (for the web UI)")
    args = p.parse_args(argv)
    router = router or Router()
    if args.status:
        print(json.dumps(router.status()))
        return 0
    if args.spool:
        result = install_from_spool(router, args.spool)
        print(json.dumps(result))
        if result and "installed" in result:
            subprocess.run(["systemctl", "reboot"], check=False)
        return 0
    if args.bundle is None or not 1 <= args.tries <= 9:
        p.error("give a BUNDLE (or --status); --tries is 1 to 9")
    try:
        result = install(router, args.bundle, args.tries, args.allow_older)
    except BundleError as exc:
        print(json.dumps({"refused": str(exc)}))
        if not args.json_only:
            print(f"homework-update: refused, nothing written: {exc}", file=sys.stderr)
        return 2
    except (OSError, boot.BootError) as exc:
        print(json.dumps({"failed": str(exc)}))
        if not args.json_only:
            print(f"homework-update: failed: {exc}; the running version stays the default", file=sys.stderr)
        return 1
    print(json.dumps(result))
    if not args.json_only:
        print(
            f"homework-update: version {result['installed']} is in slot {result['slot'].upper()}; it starts at "
            f"the next boot and is kept only if the router comes up healthy",
            file=sys.stderr,
        )
    if args.reboot:
        subprocess.run(["systemctl", "reboot"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
