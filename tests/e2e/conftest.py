"""The emulated home for end-to-end tests: the `homenet` library a person's CLI also uses."""

from __future__ import annotations

import os

import pytest

from homenet import REPO, Home


@pytest.fixture(scope="session")
def homenet():
    if os.geteuid() != 0:
        pytest.skip("the emulated home needs root")
    home = Home()
    home.down()
    home.up()
    yield home
    keep = REPO / "test-artifacts" / "homenet-logs"
    if home.processes.logs.exists():
        keep.mkdir(parents=True, exist_ok=True)
        for log in home.processes.logs.iterdir():
            (keep / log.name).write_bytes(log.read_bytes())
    home.down()


@pytest.fixture
def home(homenet):
    """The home, and afterwards every device the test added leaves again."""
    before = set(homenet.clients())
    yield homenet
    for name in set(homenet.clients()) - before:
        homenet.remove(name)
