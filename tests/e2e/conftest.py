"""The emulated home for end-to-end tests: the `homenet` library a person's CLI also uses."""

from __future__ import annotations

import os

import pytest

from homenet import REPO, Home
from homenet.load import set_priority
from homework_controller.policy import apps


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
    """The home, and afterwards every device the test added leaves again, and every app whose priority
    it changed is back at the table's (a test must not see another's: the ISP slice marks a High app's
    ports ahead, so a `web` left at High put a stray page's packet in the call test's High queue)."""
    before = set(homenet.clients())
    yield homenet
    for name in set(homenet.clients()) - before:
        homenet.remove(name)
    table = apps.load_table()
    for listed in homenet.api("GET", "apps")[1]:
        if listed["set_by"] == "household" and listed["priority"] != table.default_priority(listed["app"]):
            set_priority(homenet, listed["app"], table.default_priority(listed["app"]))
