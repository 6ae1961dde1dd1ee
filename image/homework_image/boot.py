"""systemd-boot entries for the two root slots, with boot counting (pure: names and text).

An entry is `loader/entries/homework-VERSION-SLOT.conf`, or `...-SLOT+TRIES.conf` while it is on
trial: systemd-boot counts a try down at each boot (`+2-1`), systemd-bless-boot drops the counter
once the router is healthy, and an entry with no tries left sorts last, so the other slot boots.
Among good entries the highest VERSION sorts first and is the default."""
from __future__ import annotations

import re

from . import ROOT_PARTLABEL, SLOTS

KERNEL, INITRD = "vmlinuz", "initrd.img"
# Serial console last: it becomes /dev/console, where boxes like the APU show the setup code.
CONSOLE_OPTIONS = "console=tty0 console=ttyS0,115200 loglevel=4 systemd.show_status=auto"
_ENTRY = re.compile(r"^homework-(?P<version>[0-9][0-9A-Za-z.~]*)-(?P<slot>[ab])"
                    r"(?:\+(?P<left>\d+)(?:-(?P<done>\d+))?)?\.conf$")
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.~]*$")


class BootError(ValueError):
    pass


def check_version(version: str) -> str:
    if not _VERSION.match(version):
        raise BootError(f"not a version: {version!r} (digits first, then digits, letters, '.' or '~')")
    return version


def slot_dir(slot: str) -> str:
    """Where a slot's kernel and initrd live on the EFI system partition."""
    return f"homework/{slot}"


def kernel_options(slot: str) -> str:
    return (f"root=PARTLABEL={ROOT_PARTLABEL.format(slot=slot)} rootfstype=squashfs ro homework.slot={slot} "
            f"{CONSOLE_OPTIONS}")


def entry_name(version: str, slot: str, tries: int | None = None) -> str:
    if slot not in SLOTS:
        raise BootError(f"no slot {slot!r}")
    counter = f"+{tries}" if tries is not None else ""
    return f"homework-{check_version(version)}-{slot}{counter}.conf"


def entry_text(version: str, slot: str) -> str:
    return (f"title Homework router {version} (slot {slot.upper()})\n"
            f"version {version}\n"
            f"linux /{slot_dir(slot)}/{KERNEL}\n"
            f"initrd /{slot_dir(slot)}/{INITRD}\n"
            f"options {kernel_options(slot)}\n")


def parse_entry(name: str) -> dict | None:
    """{version, slot, tries_left (None once blessed), tries_done} for one of our entries, else None."""
    m = _ENTRY.match(name)
    if not m:
        return None
    left = m.group("left")
    return {"version": m.group("version"), "slot": m.group("slot"),
            "tries_left": int(left) if left is not None else None, "tries_done": int(m.group("done") or 0)}


def running_slot(cmdline: str) -> str:
    for word in cmdline.split():
        if word.startswith("homework.slot="):
            slot = word.partition("=")[2]
            if slot in SLOTS:
                return slot
    raise BootError("the kernel command line names no homework.slot: not booted from a Homework image?")


def other_slot(slot: str) -> str:
    return SLOTS[1 - SLOTS.index(slot)]


def version_key(version: str) -> tuple:
    """Orders versions as systemd-boot does for ours: numbers by value, piece by piece."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|[A-Za-z]+", version))
