"""homework-grub: the Linux side of boot counting when GRUB booted the router (legacy BIOS).

    homework-grub count   at every boot: move the tries GRUB counted in grubenv into the boot
                          entries' names, clear them, and regenerate grub.cfg from the entries
    homework-grub bless   once the router works (after boot-complete.target): drop the running
                          entry's counter, as systemd-bless-boot does after systemd-boot

GRUB cannot rename files, so it keeps its count of each trial boot in grubenv; systemd-boot
renames the entry itself, and then `count` finds nothing to move. GRUB wants
homework-grub-bless.service on the kernel command line only when it boots an entry on trial, as
systemd-boot's boot counter is what starts systemd-bless-boot."""

from __future__ import annotations

import argparse
import sys

from . import boot
from .update import Router, sync_dir, write_file


def count(router: Router) -> dict[str, str]:
    """Move GRUB's counted tries into the entries' names; {old name: new name}."""
    env_file = router.grub / "grubenv"
    env = boot.parse_grubenv(env_file.read_bytes()) if env_file.exists() else {}
    moved = boot.fold_grub_tries([p.name for p in router.entries.glob("*.conf")], env)
    for old, new in moved.items():
        (router.entries / old).rename(router.entries / new)
    if moved:
        sync_dir(router.entries)
    # The counts are keyed by the old names: clearing them only after the renames loses nothing.
    kept = {name: value for name, value in env.items() if not name.startswith(boot.TRIED_PREFIX)}
    if kept != env or not env_file.exists():
        env_file.parent.mkdir(parents=True, exist_ok=True)
        write_file(env_file, boot.grubenv_block(kept))
    router.write_grub_config()
    return moved


def bless(router: Router) -> str | None:
    """Drop the running entry's counter; its new name, or None when it was not on trial."""
    slot, version = router.running()
    for path in router.entries.glob("*.conf"):
        entry = boot.parse_entry(path.name)
        blessed = boot.blessed_name(path.name)
        if entry and blessed and (entry["slot"], entry["version"]) == (slot, version):
            path.rename(router.entries / blessed)
            sync_dir(router.entries)
            router.write_grub_config()
            return blessed
    return None


def main(argv: list[str] | None = None, router: Router | None = None) -> int:
    p = argparse.ArgumentParser(prog="homework-grub", description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("count", "bless"))
    args = p.parse_args(argv)
    router = router or Router()
    if args.step == "count":
        for old, new in count(router).items():
            print(f"homework-grub: GRUB tried {old}: now {new}")
    else:
        blessed = bless(router)
        print(f"homework-grub: blessed {blessed}" if blessed else "homework-grub: the running entry was not on trial")
    return 0


if __name__ == "__main__":
    sys.exit(main())
