import pytest

from homework_controller import dhcp
from homework_controller.router import HomeRouter
from homework_controller.store import DeviceStore

WLAN = 1
ROUTER_MAC = "02:48:57:00:00:01"


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "controller.sqlite")


@pytest.fixture
def router(db_path, clock):
    r = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    r.switch_ready(WLAN, ROUTER_MAC)
    return r
