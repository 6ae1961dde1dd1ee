"""A download a device is in the middle of: the emulated internet's web server paces
/paced/big.bin (1 MB at 100 kB/s, 10 s if left alone), so a test can act while bytes flow and
see whether they stop."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .topology import INTERNET_IP
from .wait import wait_until


@contextlib.contextmanager
def paced_download(
    home, name: str, url: str = f"http://{INTERNET_IP}/paced/big.bin"
) -> Iterator[tuple[subprocess.Popen, Callable[[], int]]]:
    """Yields the device's curl and a function that says how many bytes have landed, once they
    are flowing (the positive control: the download is under way and growing)."""
    with tempfile.TemporaryDirectory() as tmp:
        received = Path(tmp) / "big.bin"
        download = home.spawn(name, "curl", "-sS", "-m", "20", "-o", received, url, stderr=subprocess.DEVNULL)

        def size() -> int:
            return received.stat().st_size if received.exists() else 0

        try:
            first = wait_until("the download to start", size, 5)
            wait_until("the download to make progress", lambda: size() > first + 50_000, 5)
            yield download, size
        finally:
            download.kill()
            download.wait(timeout=10)
