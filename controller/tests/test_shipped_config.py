"""The tests run the router as it ships: the shared `router` fixture (and `HomeRouter`'s defaults, which it
takes) are what deploy/services.toml's controller command line gives, so what the suite proves holds for
the configuration households run. A test that runs less (IPv6 off) says so where it does."""

import ipaddress
import sys

import pytest

import homework_deploy
from homework_controller.__main__ import configure, parse_args
from homework_controller.config import Config
from homework_controller.core.router import HomeRouter
from homework_controller.store import DeviceStore


def shipped_options(state_dir, **settings) -> dict:
    """HomeRouter's arguments from services.toml's controller command line, each setting the deployment
    fills in empty (or as given): the flags parsed and configured as `python -m homework_controller` does."""
    values: dict[str, object] = dict.fromkeys(homework_deploy.settings(), "")
    values |= {"PYTHON": sys.executable, "STATE": state_dir, "UPSTREAM_DNS": "192.0.2.53"}
    values |= {"UPLINK_KBIT": 0, "DOWNLINK_KBIT": 0, **settings}
    command = homework_deploy.load(values)["controller"].command
    assert command[1:3] == ("-m", "homework_controller")
    config = Config()
    configure(parse_args(list(command[3:])), config)
    return config.router_options()


def settings_of(router: HomeRouter) -> dict:
    """What the router core was built with, read back from its parts; the deployment's own values
    (its network's name, its line's rates, its prefixes) are compared apart."""
    return {
        "lease_policy": router.joining.lease_policy,
        "flow_budget": router.accounting.flow_budget,
        "max_pending": router.newcomers.max_pending,
        "app_table": router.priorities.app_table,
        "high_device_share": router.priorities.qos.high_device_share,
        "ipv6": router.ipv6.enabled,
    }


def test_the_router_fixture_is_the_router_services_toml_starts(tmp_path, router):
    shipped = HomeRouter(DeviceStore(str(tmp_path / "shipped.sqlite")), **shipped_options(tmp_path))
    assert settings_of(shipped)["ipv6"]
    assert settings_of(router) == settings_of(shipped)
    # The prefixes: a shipped router has its ULA /48 and what the ISP delegated (its prefix-delegation
    # client asks for a /56); so has the fixture's, as fixed documentation prefixes.
    plan = router.ipv6.plan
    assert plan.ula.prefixlen == 48 and plan.ula.subnet_of(ipaddress.IPv6Network("fd00::/8"))
    assert plan.delegated is not None and plan.delegated.prefixlen == 56


def test_what_a_deployment_sets_is_all_that_differs(tmp_path):
    """Positive control for the comparison: the values services.toml leaves to the deployment do change
    the options, the rest come from the command line's fixed flags and the controller's defaults."""
    plain = shipped_options(tmp_path)
    shaped = shipped_options(tmp_path, WAN_IFACE="eth1", UPLINK_KBIT=20_000, WIFI_SSID="Homework")
    assert plain["qos_settings"].uplink is None and shaped["qos_settings"].uplink.line_kbit == 20_000
    assert (plain["wifi_ssid"], shaped["wifi_ssid"]) == ("", "Homework")
    assert {k for k in plain if plain[k] != shaped[k]} == {"qos_settings", "wifi_ssid"}


def test_a_router_without_ipv6_is_told_apart(tmp_path, router):
    """The comparison can fail: a router built as the tests used to build it (IPv6 off) is not the shipped one."""
    old = HomeRouter(DeviceStore(str(tmp_path / "old.sqlite")), ipv6_plan=None)
    differs = {k for k, v in settings_of(old).items() if settings_of(router)[k] != v}
    assert differs == {"ipv6"}


@pytest.mark.parametrize("flags", [["--no-ipv6"], []])
def test_the_command_line_turns_off_what_ships_on(tmp_path, flags):
    config = Config()
    configure(parse_args(["--db", str(tmp_path / "c.sqlite"), *flags]), config)
    assert (config.router_options()["ipv6_plan"] is None) == bool(flags)


def test_a_router_without_the_switchs_flow_records_is_refused_at_the_command_line(capsys):
    """Connections are counted from the switch's own records only: port 0 (no export) is refused with the
    reason, not started as a router that would count nothing; another port is taken (positive control)."""
    assert parse_args(["--flow-export-port", "4740"]).flow_export_port == 4740
    with pytest.raises(SystemExit) as refused:
        parse_args(["--flow-export-port", "0"])
    assert refused.value.code == 2
    assert "switch's own records (IPFIX flow export)" in capsys.readouterr().err
