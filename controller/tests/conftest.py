import pytest
from support import ROUTER_MAC, WLAN, Clock

from homework_controller.core.router import HomeRouter
from homework_controller.store import DeviceStore


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "not_shipped(reason, **options): the `router` fixture built with these HomeRouter options instead of the "
        "shipped ones, for the reason given (a path the shipped configuration does not take)",
    )


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "controller.sqlite")


@pytest.fixture
def router(request, db_path, clock):
    """The router core as it ships (HomeRouter's defaults: IPv6 on, flows from the switch's export;
    test_shipped_config holds them to deploy/services.toml's command line), its switch connected.
    A test that needs another configuration says which and why: @pytest.mark.not_shipped(reason, **options)."""
    marker = request.node.get_closest_marker("not_shipped")
    options = {}
    if marker is not None:
        assert len(marker.args) == 1 and isinstance(marker.args[0], str), "not_shipped takes the reason why"
        options = marker.kwargs
    r = HomeRouter(DeviceStore(db_path), clock=clock, **options)
    r.switch_ready(WLAN, ROUTER_MAC)
    return r
