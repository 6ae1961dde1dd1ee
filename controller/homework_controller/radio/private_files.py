"""Files that hold passphrases (hostapd's key file, the radio's settings): written whole or not at
all, readable by their owner only."""

from __future__ import annotations

import os
import tempfile


def write(path: str, text: str) -> None:
    """Atomically, mode 0600: a reader (hostapd, the image's path unit) sees the old file or the new
    one, never half, and the rename itself survives a power cut."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_text(path: str) -> str:
    """The file's text; "" when there is none."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""
