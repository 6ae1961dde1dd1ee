"""The board follows the controller: a joiner shows at once, and goes when the controller lets it go."""
from homework_webui.live import LiveHub


class Controller:
    """The controller's `status` answer, as the test sets it."""

    def __init__(self):
        self.known: list[dict] = []

    def status(self):
        return list(self.known)


class Hwdb:
    pass


def joiner(mac):
    return {"mac": mac, "state": "pending", "ip": "10.2.0.6", "hostname": "", "name": "", "vendor_class": "",
            "first_seen": 0, "last_seen": 0, "lease_seconds_left": 30}


def test_a_joiner_the_controller_forgot_leaves_the_board_and_one_it_knows_stays():
    controller = Controller()
    hub = LiveHub(controller, Hwdb())
    controller.known = [joiner("02:00:00:00:00:01")]
    hub._on_events([{"kind": "new-device", "mac": "02:00:00:00:00:01", "message": "phone asks to join"},
                    {"kind": "new-device", "mac": "02:ff:00:00:00:99", "message": "forged, already evicted"}])
    shown = {d["mac"] for d in hub.devices()}
    assert "02:00:00:00:00:01" in shown
    assert "02:ff:00:00:00:99" not in shown
