"""make bench measures the checkout whose commit it stamps (bench/run.py)."""

from pathlib import Path

import run


def test_packages_the_venv_takes_from_another_checkout_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "REPO", tmp_path)  # a checkout the venv installed nothing from
    assert [name.split()[0] for name in run.not_this_checkouts()] == [
        "homenet",
        "homework_controller",
        "homework_webui",
    ]
    monkeypatch.setattr(run, "REPO", Path("/"))  # every checkout is under it
    assert run.not_this_checkouts() == []
