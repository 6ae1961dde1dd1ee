"""The IPv6 prefixes' files beside the controller's SQLite file: the ULA's global ID (made once) and the
prefix the delegation client last wrote, read at start and at every tick."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from ...wire.prefixes import BadPrefix, Delegation, parse_delegation, ula_prefix

ULA_ID_FILE = "ipv6-ula-global-id"  # beside the controller's SQLite file: 10 hex digits
# Beside it too, in a directory of its own (the only one the prefix-delegation client may write): the prefix
# the ISP delegated, one line (homework_deploy.prefix_delegation.DELEGATED_FILE: the image's client and the
# emulated home's).
DELEGATED_FILE = "wan-pd/ipv6-delegated-prefix"


def load_or_make_ula(directory: str | Path, random_id: Callable[[], int] = lambda: secrets.randbits(40)):
    """The home's ULA /48: its global ID read from the data partition, or made (once) and written there
    atomically (temporary file, fsync, rename), so it survives reboots and updates."""
    path = Path(directory) / ULA_ID_FILE
    try:
        return ula_prefix(int(path.read_text().strip(), 16))
    except FileNotFoundError:
        pass
    except ValueError as exc:
        raise BadPrefix(f"{path}: not a 40-bit ULA global ID ({exc}); remove it to make a new one") from None
    global_id = random_id()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as out:
        out.write(f"{global_id:010x}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return ula_prefix(global_id)


def read_delegated(directory: str | Path) -> Delegation | None:
    """The delegated prefix the data partition holds (DELEGATED_FILE), if any, and its lifetimes from when
    the file was written (its modification time: the client replaces it whenever the ISP renews)."""
    path = Path(directory) / DELEGATED_FILE
    try:
        with path.open() as f:
            text, written_at = f.read(), os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None
    try:
        return parse_delegation(text, written_at)
    except BadPrefix as exc:
        raise BadPrefix(f"{path}: {exc}") from None
