"""The ISP engineer's dashboard and alert rules: promtool accepts the rules, they fire on what they
are for (and not on the neighbour), and every metric they name is one a running slicer exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from isp_flowvisor.testing import have

MONITORING = Path(__file__).resolve().parent.parent / "monitoring"
_METRIC = re.compile(r"\bisp_flowvisor_[a-z_]+\b")


def _promtool(*args: str) -> str:
    assert have("promtool"), "promtool: install Debian's prometheus (scripts/install-deps.sh)"
    result = subprocess.run(["promtool", *args], cwd=MONITORING, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def test_alert_rules_load_and_fire_for_the_household_concerned_only():
    assert "SUCCESS: 4 rules found" in _promtool("check", "rules", "alerts.yml")
    _promtool("test", "rules", "alerts_test.yml")  # bob, below his quota and refused less, stays quiet


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(slicer, households):
    households("alice")  # one household connected, so per-household series have samples
    exposition = slicer.metrics()
    exported = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}
    named = set(_METRIC.findall((MONITORING / "alerts.yml").read_text()))
    named |= {name for expr in _dashboard_expressions() for name in _METRIC.findall(expr)}
    assert len(named) >= 10 and named <= exported, sorted(named - exported)
    # The panels cover what the ISP engineer asked for.
    for wanted in (
        "isp_flowvisor_switch_connected",
        "isp_flowvisor_household_connected",
        "isp_flowvisor_household_rules",
        "isp_flowvisor_household_rule_quota",
        "isp_flowvisor_household_refused_total",
        "isp_flowvisor_household_throttled_total",
        "isp_flowvisor_household_queue_drops_total",
    ):
        assert wanted in named, wanted
    # And the exposition is one Prometheus reads without complaint.
    lint = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
