"""Firmware updates from the web UI: the owner uploads a bundle, the router's installer installs it.

The web UI has no privilege to write the router's disk, and should not: it only hands the
bundle over. The hand-over is a directory (the image's `/run/homework/update`):

- `bundle`: a complete upload, waiting for the installer or being installed. It appears only
  once every byte is on disk (received as `bundle.part`, synced, then renamed), so the
  installer never sees half an upload.
- `result.json`: the installer's verdict on the last bundle (`homework-update --spool DIR`:
  `{"installed": ...}`, `{"refused": why}` or `{"failed": why}`), after which it deletes `bundle`
  and, when installed, restarts the router into the new version.

A bundle arrives in pieces of at most CHUNK_BYTES, in order: the HTTP server holds each
request's whole body before the app sees it, so pieces keep what it holds small (and what a
hostile device can make it hold, which serving.py caps), and a page whose Wi-Fi drops resumes
where it stopped. The installer checks the bundle's signature before writing anything, so an
upload only decides *which* signed version is offered, never what the router runs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 8 << 20
_COPY = 1 << 20


class UpdateError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra):
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


class UpdateSpool:
    BUNDLE, PART, RESULT = "bundle", "bundle.part", "result.json"

    def __init__(self, directory: str, max_bytes: int):
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._size: int | None = None  # of the upload being received
        self._received = 0

    def status(self) -> dict:
        with self._lock:
            if self._installing():
                return {"state": "installing"}
            if self._size is not None:
                return {"state": "receiving", "size": self._size, "received": self._received}
        try:
            last = json.loads((self.dir / self.RESULT).read_text())
        except FileNotFoundError:
            last = None
        except (OSError, ValueError):
            last = {"failed": "the installer's last result cannot be read"}
        return {"state": "idle", "last": last}

    def start(self, size: object) -> None:
        """Begin receiving a bundle of `size` bytes (replacing an unfinished upload)."""
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise UpdateError(400, "update-size", "Say how big the update is (its size in bytes).")
        if size > self.max_bytes:
            raise UpdateError(
                413,
                "update-too-big",
                f"That file is larger than any update for this router ({self.max_bytes >> 20} MiB).",
            )
        with self._lock:
            if self._installing():
                raise UpdateError(409, "update-busy", "An update is being installed; wait for it to finish.")
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._discard()
            if size > shutil.disk_usage(self.dir).free:
                raise _no_space(size)
            (self.dir / self.PART).touch(mode=0o600)
            self._size, self._received = size, 0

    def receive(self, offset: int, length: int | None, open_body: Callable[[], BinaryIO]) -> None:
        """Append one piece at `offset`; the last piece hands the bundle to the installer. On a
        failure the upload is dropped, nothing is left, and the page starts again. `open_body` is
        called only once the piece is acceptable, so nothing is read before."""
        with self._lock:
            if self._size is None:
                raise UpdateError(409, "update-not-started", "No upload is in progress: start it again.")
            if offset != self._received:
                # A piece sent twice or skipped (a retry after a dropped answer): resume from here.
                raise UpdateError(
                    409, "update-offset", "The upload continues from another place.", received=self._received
                )
            if length is None or not 0 < length <= min(CHUNK_BYTES, self._size - offset):
                raise UpdateError(
                    400,
                    "update-piece",
                    f"Send the update in pieces of at most {CHUNK_BYTES >> 20} " "MiB, none past its announced size.",
                )
            try:
                self._append(open_body(), length)
            except OSError as exc:
                size = self._size
                self._discard()
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise _no_space(size) from None
                raise
            except BaseException:
                self._discard()
                raise
            self._received += length
            if self._received == self._size:
                self._hand_over()

    def _append(self, body: BinaryIO, length: int) -> None:
        with (self.dir / self.PART).open("ab") as out:
            left = length
            while left:
                chunk = body.read(min(_COPY, left))
                if not chunk:
                    raise UpdateError(
                        400, "update-incomplete", "The upload stopped before the whole piece arrived; try again."
                    )
                out.write(chunk)
                left -= len(chunk)

    def _hand_over(self) -> None:
        part = self.dir / self.PART
        with part.open("rb+") as f:
            os.fsync(f.fileno())
        (self.dir / self.RESULT).unlink(missing_ok=True)  # that verdict was about an earlier bundle
        part.replace(self.dir / self.BUNDLE)
        self._size, self._received = None, 0

    def _discard(self) -> None:
        (self.dir / self.PART).unlink(missing_ok=True)
        self._size, self._received = None, 0

    def _installing(self) -> bool:
        return (self.dir / self.BUNDLE).exists()


def _no_space(size: int) -> UpdateError:
    return UpdateError(
        507, "update-no-space", f"The router has no room for a {size >> 20} MiB update right now; nothing was changed."
    )
