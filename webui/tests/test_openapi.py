"""openapi.yaml describes every API route the app serves, with each of its methods."""

import os
import re

from homework_webui.app import create_app

OPENAPI = os.path.join(os.path.dirname(__file__), "..", "openapi.yaml")


def documented() -> dict[str, set[str]]:
    """Each path of openapi.yaml with its methods (read as text: `  /path:` then `    verb:`)."""
    paths: dict[str, set[str]] = {}
    current = None
    with open(OPENAPI) as f:
        for line in f:
            if m := re.match(r"^  (/\S+):\s*$", line):
                current = paths.setdefault(m.group(1), set())
            elif current is not None and (m := re.match(r"^    (get|post|put|delete):", line)):
                current.add(m.group(1).upper())
            elif not line.startswith("  "):
                current = None
    return paths


def test_every_api_route_is_in_openapi_yaml(tmp_path):
    app = create_app(str(tmp_path / "state"), start_live=False)
    described = documented()
    routes = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method)
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    assert ("/api/devices/{mac}/pause", "POST") in routes  # the control: routes are found
    missing = sorted(f"{method} {path}" for path, method in routes if method not in described.get(path, set()))
    assert not missing, f"not in openapi.yaml: {missing}"
