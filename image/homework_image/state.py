"""homework-state: the data partition (STATE) before the services start: its directories, and
its format, migrated step by step when an update changes it.

STATE/FORMAT holds the format number. A new image that changes the format adds a step to
MIGRATIONS ({from: function}) and raises CURRENT; the step runs once, at the first boot of that
image, before any service reads the state. A rollback to an older image leaves a newer format
in place: each step must keep what older images read (add, do not rename or drop), and the
older image says so on its console."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from . import STATE

CURRENT = 1
DIRECTORIES = ("config", "webui")
MIGRATIONS: dict[int, Callable[[Path], None]] = {}


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


def _write_format(path: Path, number: int) -> None:
    tmp = path.with_name("FORMAT.tmp")
    with tmp.open("w") as f:
        f.write(f"{number}\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def main() -> int:
    print(f"homework-state: {migrate()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
