"""How long the web UI waits for the controller: a busy controller's answer to a change still arrives,
and one that does not come in time is told as unconfirmed, not as a refusal."""

import threading
import time

import pytest

from homework_webui.controller import CONTROLLER_ROLES, ControllerClient, ControllerDownError

MAC = "02:00:00:00:00:61"
OWNER = CONTROLLER_ROLES["owner"]


def busy_for(controller, seconds: float) -> threading.Thread:
    """The controller's own lock held for `seconds` (a storm, a long rule change)."""
    held = threading.Event()

    def hold():
        with controller.lock:
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    return thread


def test_a_change_waits_longer_than_a_read_for_a_busy_controller(controller):
    controller.joined(MAC)
    client = ControllerClient(controller.url, timeout=0.5, role_of=lambda: OWNER, change_timeout=5)
    thread = busy_for(controller, 1.5)
    with pytest.raises(ControllerDownError) as refused:
        client.status()  # a read gives up at its own timeout ...
    assert not refused.value.unconfirmed
    client.decide("permit", MAC)  # ... a change waits for the busy controller's answer
    thread.join()
    assert client.device(MAC)["state"] == "permitted"


def test_a_change_not_answered_in_time_is_unconfirmed_and_may_still_happen(controller, app):
    controller.joined(MAC)
    client = ControllerClient(controller.url, timeout=0.5, role_of=lambda: OWNER, change_timeout=0.5)
    thread = busy_for(controller, 1.5)
    with pytest.raises(ControllerDownError) as late:
        client.decide("permit", MAC)
    assert late.value.unconfirmed
    thread.join()
    # It did happen, once the controller was free: the household is told it may, not that it failed.
    assert client.device(MAC)["state"] == "permitted"
    handler = app.error_handler_spec[None][None][ControllerDownError]  # the web UI's own answer to it
    with app.test_request_context():
        resp = handler(late.value)
    assert resp.status_code == 503 and resp.get_json()["code"] == "unconfirmed"
    assert "may still take effect" in resp.get_json()["error"]
