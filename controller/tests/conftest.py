import pytest
from fakeoftable import FakeSwitch
from support import ROUTER_MAC, WLAN, Clock

from homework_controller.core.router import HomeRouter
from homework_controller.store import DeviceStore


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "controller.sqlite")


@pytest.fixture
def router(db_path, clock):
    """The router core as it ships (HomeRouter's defaults: IPv6 on; test_shipped_config holds them to
    deploy/services.toml's command line), its switch connected."""
    r = HomeRouter(DeviceStore(db_path), clock=clock)
    r.switch_ready(WLAN, ROUTER_MAC)
    return r


@pytest.fixture
def switch(router):
    """The fake switch, given the whole rule set the router gives a switch that (re)connects."""
    sw = FakeSwitch()
    sw.apply(router.switch_ready(WLAN, ROUTER_MAC))
    return sw
