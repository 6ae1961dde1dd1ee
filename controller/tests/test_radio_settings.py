"""The radio's settings: one model for the image (which reads the file at boot and whenever it
changes), hostapd_conf and ws.v1 (which the household's web UI changes them through)."""

import io
import json
import os
import stat
import threading

import pytest
from test_api import request

from homework_controller.api import api, operations
from homework_controller.api.server import TimedLock
from homework_controller.edge import ofapp
from homework_controller.errors import NotConfigured
from homework_controller.radio import radio_settings
from homework_controller.radio.radio_settings import BadSettings, RadioSettings, RadioSettingsFile

GOOD = "ssid=Our house\npassphrase=correct horse battery\ncountry=GB\nband=2.4\nchannel=6\n"


def test_the_households_settings_and_their_defaults():
    assert radio_settings.parse("") == (RadioSettings(), [])
    text = "# ours\nssid=Our house\npassphrase=correct horse battery\ncountry=gb\nband=5\nchannel=36\n"
    assert radio_settings.parse(text) == (RadioSettings("Our house", "correct horse battery", "GB", "5", 36), [])


def test_a_bad_line_is_reported_and_left_out_and_the_others_apply():
    settings, problems = radio_settings.parse(
        "ssid=Ours\nchannel=two\npassphrase=short\ncolour=blue\nnoequals\npassphrase=pass|word here\n", "wifi.conf"
    )
    assert settings == RadioSettings(ssid="Ours")
    lines = ["2 (channel)", "3 (passphrase)", "4 (colour)", "5 (noequals)", "6 (passphrase)"]
    assert [p.split(": ", 1)[0] for p in problems] == [f"wifi.conf line {n}" for n in lines]
    assert "short" not in "".join(problems)  # a passphrase's problem never shows the passphrase
    assert "channel" in problems[0] and "8 to 63" in problems[1] and "unknown setting" in problems[2]
    assert "`|`" in problems[4]  # WPA3 (SAE) would end the password there
    assert radio_settings.parse("country=G1\n")[0].country == "00"
    assert radio_settings.parse("ssid=" + "é" * 17 + "\n")[0].ssid == "Homework"  # 34 bytes


def test_band_channel_and_country_that_do_not_go_together_fall_back_and_say_why():
    # 5 GHz without a country cannot start a network: the radio stays on 2.4 GHz.
    settings, problems = radio_settings.parse("band=5\nchannel=36\n")
    assert (settings.band, settings.channel) == ("2.4", 6) and "needs a country" in problems[0]
    # A channel of the other band: the band's own default.
    settings, problems = radio_settings.parse("country=GB\nband=5\nchannel=11\n")
    assert (settings.band, settings.channel) == ("5", 36) and "not a 5 GHz channel" in problems[0]
    # Channels 12 and 13 are listen-only in the world domain; a country allows them.
    settings, problems = radio_settings.parse("channel=13\n")
    assert settings.channel == 6 and "needs a country" in problems[0]
    assert radio_settings.parse("country=GB\nchannel=13\n") == (RadioSettings(country="GB", channel=13), [])


def test_a_change_is_checked_as_a_whole_and_names_every_field_refused():
    current = RadioSettings("Our house", "correct horse battery")
    assert radio_settings.changed(current, {"channel": 11, "country": "gb"}) == RadioSettings(
        "Our house", "correct horse battery", "GB", "2.4", 11
    )
    assert radio_settings.changed(current, {"band": "5", "channel": "36", "country": "FR"}).band == "5"
    with pytest.raises(BadSettings) as refused:
        radio_settings.changed(current, {"ssid": "x" * 33, "passphrase": "short", "colour": "blue", "channel": True})
    assert set(refused.value.details["fields"]) == {"ssid", "passphrase", "colour", "channel"}
    assert refused.value.status == 400
    for changes, field in (
        ({"band": "5", "channel": 36}, "band"),  # no country yet
        ({"channel": 36}, "channel"),  # a 5 GHz channel on 2.4 GHz
        ({"channel": 12}, "channel"),  # the world domain
        ({"ssid": "two\nlines"}, "ssid"),  # the file and hostapd's configuration are lines
        ({"ssid": "line\u2028separator"}, "ssid"),
        ({"ssid": " Our house"}, "ssid"),  # the file would not keep the space
        ({"passphrase": "pass|word here"}, "passphrase"),
        ({"band": 2.4, "channel": 14}, "channel"),
    ):
        with pytest.raises(BadSettings) as refused:
            radio_settings.changed(current, changes)
        assert list(refused.value.details["fields"]) == [field], changes
    # A setting the file lacks is needed all the same: the guest passphrase.
    with pytest.raises(BadSettings, match="passphrase"):
        radio_settings.changed(RadioSettings(), {"channel": 1})
    with pytest.raises(BadSettings, match="JSON object"):
        radio_settings.changed(current, ["channel", 1])


def test_rendered_back_the_files_other_lines_stay_where_they_were():
    current = "# the household's\nssid=Old\ncolour=blue\nchannel=two\nchannel=1\n\nband=2.4\n"
    new = RadioSettings("New", "correct horse battery", "GB", "2.4", 11)
    text = radio_settings.render(new, current)
    assert text == (
        "# the household's\nssid=New\ncolour=blue\nchannel=11\n\nband=2.4\n"
        "passphrase=correct horse battery\ncountry=GB\n"
    )
    settings, problems = radio_settings.parse(text)
    assert settings == new and len(problems) == 1 and "colour" not in settings.as_dict()
    assert radio_settings.parse(radio_settings.render(new))[0] == new


@pytest.fixture
def settings_file(tmp_path):
    path = tmp_path / "config" / "wifi.conf"
    path.parent.mkdir()
    path.write_text(GOOD + "colour=blue\n")
    return path


def test_a_change_is_written_whole_readable_by_root_only_and_says_the_radio_restarts(settings_file):
    radio = RadioSettingsFile(str(settings_file))
    shown = radio.radio_settings()
    assert shown["passphrase"] == "correct horse battery" and shown["channel"] == 6
    assert len(shown["problems"]) == 1 and "colour" in shown["problems"][0]
    assert shown["channels"]["5"][0] == 36 and shown["world_channels"] == tuple(range(1, 12))
    answer = radio.set_radio_settings({"channel": 11})
    assert answer["channel"] == 11 and answer["restarting"] and "every device joins again" in answer["message"]
    assert settings_file.read_text() == GOOD.replace("channel=6", "channel=11") + "colour=blue\n"
    assert stat.S_IMODE(os.stat(settings_file).st_mode) == 0o600  # the guest passphrase
    assert os.listdir(settings_file.parent) == ["wifi.conf"]  # no temporary file left
    # The same again changes nothing, and the file is not written (which would wake the image's path unit).
    before = os.stat(settings_file).st_mtime_ns
    assert radio.set_radio_settings({"channel": 11})["restarting"] is False
    assert os.stat(settings_file).st_mtime_ns == before


def test_a_new_guest_passphrase_is_taken_without_a_restart_and_says_who_must_join_again(settings_file):
    radio = RadioSettingsFile(str(settings_file))
    answer = radio.set_radio_settings({"passphrase": "a new guest passphrase"})
    assert answer["restarting"] is False and answer["message"] == radio_settings.NEW_GUEST_PASSPHRASE
    assert "passphrase=a new guest passphrase" in settings_file.read_text()
    # Positive control: the passphrase with any other setting restarts the radio.
    answer = radio.set_radio_settings({"passphrase": "yet another passphrase", "channel": 1})
    assert answer["restarting"] and answer["message"] == radio_settings.RESTARTS


def test_refused_settings_change_nothing(settings_file):
    radio = RadioSettingsFile(str(settings_file))
    before = settings_file.read_text()
    with pytest.raises(BadSettings):
        radio.set_radio_settings({"band": "5", "channel": 36, "country": "00"})
    assert settings_file.read_text() == before


def test_a_router_without_a_radio_says_so(tmp_path):
    for radio in (RadioSettingsFile(""), RadioSettingsFile(str(tmp_path / "never-made.conf"))):
        with pytest.raises(NotConfigured, match="no radio of its own"):
            radio.radio_settings()
        with pytest.raises(NotConfigured, match="no radio of its own"):
            radio.set_radio_settings({"channel": 1})
    assert not (tmp_path / "never-made.conf").exists()


def post_json(app, path, body: bytes):
    out = {}

    def start_response(status, headers):
        out["status"] = int(status.split()[0])

    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_PORT": "8081",
        "HTTP_HOST": "127.0.0.1:8081",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    return out.get("status") or 0, json.loads(b"".join(app(environ, start_response))), out


def test_ws_v1_reads_and_changes_the_settings_with_a_json_body_and_names_the_fields_it_refuses(settings_file):
    radio = RadioSettingsFile(str(settings_file))
    app = api.make_app(lambda name, *args, role: operations.BY_NAME[name].call(radio, *args))
    status, shown = request(app, "GET", "/ws.v1/radio-settings")
    assert status == 200 and shown["ssid"] == "Our house"

    def post(body: bytes):
        answer, out = post_json(app, "/ws.v1/set-radio-settings", body)[1:]
        return out["status"], answer

    assert post(json.dumps({"channel": 1, "ssid": "Ours"}).encode()) == (
        200,
        post(b'{"channel": 1}')[1]
        | {
            "restarting": True,
            "message": radio_settings.RESTARTS,
        },
    )
    status, refused = post(json.dumps({"channel": 40, "passphrase": "short"}).encode())
    assert status == 400 and set(refused["fields"]) == {"channel", "passphrase"} and "channel" in refused["error"]
    assert post(b"not json")[0] == 400 and post(b"\xff")[0] == 400 and post(b"[1]")[0] == 400
    assert post(json.dumps({"ssid": "x" * 5000}).encode())[0] == 413
    # Nested deeper than the parser goes, within the size limit: refused, not a server error.
    assert post(b"[" * 4000 + b"]" * 4000)[0] in (400, 413)
    assert post(b"[" * 2000 + b"]" * 2000)[0] == 400
    assert request(app, "GET", "/ws.v1/set-radio-settings")[0] == 405
    assert radio_settings.parse(settings_file.read_text())[0].channel == 1

    without = api.make_app(lambda name, *args, role: operations.BY_NAME[name].call(RadioSettingsFile(""), *args))
    status, answer = request(without, "GET", "/ws.v1/radio-settings")
    assert status == 501 and "no radio of its own" in answer["error"]


def test_the_settings_are_read_and_written_without_the_controllers_lock(settings_file):
    """The file's I/O never delays a device's DHCP: ws.v1 answers while the lock is held."""
    app = ofapp.HomeworkController.__new__(ofapp.HomeworkController)  # the I/O edge without its sockets
    app.lock, app.radio_settings = TimedLock(), RadioSettingsFile(str(settings_file))
    answers = []
    with app.lock:  # a device's DHCP being decided
        worker = threading.Thread(
            target=lambda: answers.append((app.call("radio-settings"), app.call("set-radio-settings", {"channel": 3})))
        )
        worker.start()
        worker.join(5)
    assert answers and answers[0][0]["channel"] == 6 and answers[0][1]["channel"] == 3
