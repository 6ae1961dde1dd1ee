"""homework-state: the data partition (STATE) before the services start: its directories, and
its format, migrated step by step when an update changes it.

STATE/FORMAT holds the format number. A new image that changes the format adds a step to
MIGRATIONS ({from: function}) and raises CURRENT; the step runs once, at the first boot of that
image, before any service reads the state. A rollback to an older image leaves a newer format
in place: each step must keep what older images read (add, do not rename or drop), and the
older image says so on its console."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path, PurePath

from homework_deploy.prefix_delegation import DELEGATED_FILE

from . import STATE

CURRENT = 2
# The delegated prefix's directory is made here, not by its writer: homework-wan-pd.service's dhcpcd may
# write inside it but not beside it (the controller's database).
DIRECTORIES = ("config", "webui", str(PurePath(DELEGATED_FILE).parent))
# hwdb's directory (format 2 on), and what hwdb kept in the partition's top directory before
# (format 1): its SQLite file with the write-ahead log, which may hold committed rows, and the
# household's agent key.
HWDB_DIR = "hwdb"
HWDB_FILES = ("hwdb.sqlite", "hwdb.sqlite-wal", "agent.key")


def copy_hwdb_into_its_own_directory(state: Path) -> None:
    """Format 1 -> 2: hwdb runs as its own user and writes only STATE/hwdb (no longer the top
    directory beside the controller's database). Its files are copied there whole, or not at
    all (a directory made aside, then renamed); the originals stay for an older image after a
    rollback. systemd's StateDirectory= hands the directory to hwdb's user when hwdb starts."""
    target = state / HWDB_DIR
    if target.exists():  # renamed into place before a power cut kept FORMAT from saying so
        return
    staging = state / f"{HWDB_DIR}.migrating"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in HWDB_FILES:
        if (state / name).exists():
            shutil.copy2(state / name, staging / name)  # with its mode: the key stays 0640
            _fsync(staging / name)
    _fsync(staging)
    staging.rename(target)
    _fsync(state)


MIGRATIONS: dict[int, Callable[[Path], None]] = {1: copy_hwdb_into_its_own_directory}


def migrate(
    state: Path = STATE, current: int = CURRENT, migrations: dict[int, Callable[[Path], None]] = MIGRATIONS
) -> str:
    for name in DIRECTORIES:
        (state / name).mkdir(parents=True, exist_ok=True)
    path = state / "FORMAT"
    if not path.exists():
        _write_format(path, current)
        return f"new data partition, format {current}"
    found = int(path.read_text().strip())
    if found > current:
        return f"the data partition has format {found}, newer than this image's {current} (rolled back?)"
    for step in range(found, current):
        migrations[step](state)
        _write_format(path, step + 1)
    return f"format {current}" + (f" (migrated from {found})" if found < current else "")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_format(path: Path, number: int) -> None:
    tmp = path.with_name("FORMAT.tmp")
    with tmp.open("w") as f:
        f.write(f"{number}\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def launcher(python: str, state: Path = STATE, current: int = CURRENT) -> str:
    """/usr/sbin/homework-state, as the image carries it: a partition already in this image's format,
    with its directories, is told so by the shell. Only a new partition or a migration starts Python,
    which before every service on a slow box costs seconds of each boot."""
    ready = " && ".join(
        [f'[ "$(cat {state}/FORMAT 2>/dev/null)" = {current} ]', *(f"[ -d {state / d} ]" for d in DIRECTORIES)]
    )
    return (
        "#!/bin/sh\n"
        "# Rendered by homework_image.state.launcher: a partition in this format needs no migration.\n"
        f'if {ready}; then echo "homework-state: format {current}"; exit 0; fi\n'
        f'exec {python} -m homework_image.state "$@"\n'
    )


def main() -> int:
    print(f"homework-state: {migrate()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
