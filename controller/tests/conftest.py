import pytest
from support import ROUTER_MAC, WLAN, Clock

from homework_controller import dhcp
from homework_controller.router import HomeRouter
from homework_controller.store import DeviceStore


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
