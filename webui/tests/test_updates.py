"""Firmware updates through the web UI: only the owner hands a bundle to the router's installer,
in pieces that resume after a dropped connection; a bad upload leaves nothing behind; the
installer's verdict is shown. The installer itself (homework-update --spool, which checks the
signature and writes the slot) is the image's and is tested by booting the image
(image/tests/test_boot.py); here the test plays its side of the hand-over: it reads `bundle`
and writes `result.json`."""

import io
import json
import os
import subprocess

import pytest
from conftest import setup_owner, signed_in

from homework_webui.app import create_app
from homework_webui.services import services
from homework_webui.updates import CHUNK_BYTES, UpdateSpool

MAX_BYTES = 64 << 20
BUNDLE = os.urandom(2 * CHUNK_BYTES + 12345)  # three pieces, the last one short


@pytest.fixture
def spool_dir(tmp_path):
    return tmp_path / "update"


@pytest.fixture
def updating_app(tmp_path, controller, hwdb, spool_dir):
    app = create_app(
        str(tmp_path / "state"),
        controller.url,
        ("127.0.0.1", hwdb.port),
        dist_dir=str(tmp_path / "nodist"),
        update_spool=UpdateSpool(str(spool_dir), MAX_BYTES),
    )
    yield app
    services(app).hub.stop()


def put_piece(api, offset: int, data: bytes, csrf=True, mimetype="application/octet-stream", headers=None, **kw):
    headers = {"Content-Type": mimetype, **({"X-CSRF-Token": api.csrf} if csrf else {}), **(headers or {})}
    return api.client.put(
        f"/api/update/bundle?offset={offset}", data=data, headers=headers, environ_base={"REMOTE_ADDR": api.ip}, **kw
    )


def upload(api, data: bytes):
    """What the page does: announce the size, then send the pieces in order."""
    r = api.post("/api/update", {"size": len(data)})
    if r.status_code != 201:
        return r
    for offset in range(0, len(data), CHUNK_BYTES):
        r = put_piece(api, offset, data[offset : offset + CHUNK_BYTES])
        if r.status_code != 200:
            return r
    return r


def left_in(spool_dir) -> list[str]:
    return sorted(os.listdir(spool_dir)) if spool_dir.exists() else []


def test_owner_uploads_a_bundle_and_sees_the_installers_verdict(updating_app, spool_dir):
    owner = setup_owner(updating_app)
    assert owner.get("/api/update").json == {
        "available": True,
        "max_bytes": MAX_BYTES,
        "chunk_bytes": CHUNK_BYTES,
        "state": "idle",
        "last": None,
    }
    r = upload(owner, BUNDLE)
    assert r.status_code == 200, r.json
    assert r.json["state"] == "installing"
    assert (spool_dir / "bundle").read_bytes() == BUNDLE
    assert left_in(spool_dir) == ["bundle"]  # no half-written file beside it
    # Another upload while the first is being installed is refused, and the first is untouched.
    r = owner.post("/api/update", {"size": 100})
    assert r.status_code == 409 and r.json["code"] == "update-busy"
    assert (spool_dir / "bundle").read_bytes() == BUNDLE
    # The installer refuses it (say, a wrong signature), writes its verdict and frees the spool.
    (spool_dir / "result.json").write_text(json.dumps({"refused": "the bundle's signature does not verify"}))
    (spool_dir / "bundle").unlink()
    status = owner.get("/api/update").json
    assert status["state"] == "idle"
    assert status["last"] == {"refused": "the bundle's signature does not verify"}
    # The next upload clears that verdict: it was about the previous bundle.
    assert upload(owner, BUNDLE).status_code == 200
    assert left_in(spool_dir) == ["bundle"]


def test_a_dropped_connection_resumes_where_the_router_stopped(updating_app, spool_dir):
    owner = setup_owner(updating_app)
    assert owner.post("/api/update", {"size": len(BUNDLE)}).status_code == 201
    assert put_piece(owner, 0, BUNDLE[:CHUNK_BYTES]).status_code == 200
    # The page missed that answer and sends the first piece again: the router says where it is.
    r = put_piece(owner, 0, BUNDLE[:CHUNK_BYTES])
    assert r.status_code == 409 and r.json["received"] == CHUNK_BYTES
    status = owner.get("/api/update").json
    assert (status["state"], status["received"], status["size"]) == ("receiving", CHUNK_BYTES, len(BUNDLE))
    for offset in range(CHUNK_BYTES, len(BUNDLE), CHUNK_BYTES):
        assert put_piece(owner, offset, BUNDLE[offset : offset + CHUNK_BYTES]).status_code == 200
    assert (spool_dir / "bundle").read_bytes() == BUNDLE


@pytest.mark.parametrize("role", ["member", "kiosk"])
def test_only_the_owner_may_update(updating_app, spool_dir, role):
    owner = setup_owner(updating_app)
    other = signed_in(updating_app, role, owner)
    assert other.post("/api/update", {"size": len(BUNDLE)}).status_code == 403
    assert put_piece(other, 0, BUNDLE[:CHUNK_BYTES]).status_code == 403
    assert other.get("/api/update").status_code == 403
    assert left_in(spool_dir) == []
    assert upload(owner, BUNDLE).status_code == 200  # the owner, same requests


def test_a_page_without_the_csrf_token_cannot_upload(updating_app, spool_dir):
    owner = setup_owner(updating_app)
    r = owner.post("/api/update", {"size": len(BUNDLE)}, csrf=False)
    assert r.status_code == 403 and r.json["code"] == "csrf"
    assert owner.post("/api/update", {"size": len(BUNDLE)}).status_code == 201
    r = put_piece(owner, 0, BUNDLE[:CHUNK_BYTES], csrf=False)
    assert r.status_code == 403 and r.json["code"] == "csrf"
    r = put_piece(owner, 0, BUNDLE[:CHUNK_BYTES], headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json["code"] == "origin"
    assert os.path.getsize(spool_dir / "bundle.part") == 0
    assert upload(owner, BUNDLE).status_code == 200


def test_bad_uploads_are_refused_and_leave_nothing(updating_app, spool_dir):
    owner = setup_owner(updating_app)
    r = owner.post("/api/update", {"size": MAX_BYTES + 1})
    assert r.status_code == 413 and r.json["code"] == "update-too-big", r.json
    for size in (0, -5, "big", None, True):
        assert owner.post("/api/update", {"size": size}).status_code == 400
    r = put_piece(owner, 0, BUNDLE[:100])
    assert r.status_code == 409 and r.json["code"] == "update-not-started"
    assert owner.post("/api/update", {"size": len(BUNDLE)}).status_code == 201
    assert put_piece(owner, 0, BUNDLE[:100], mimetype="multipart/form-data").status_code == 415
    r = put_piece(owner, 0, BUNDLE[: CHUNK_BYTES + 1])  # a piece larger than pieces are
    assert r.status_code == 400 and r.json["code"] == "update-piece"
    assert owner.get("/api/update").json["received"] == 0
    # The connection drops halfway through a piece: the upload is dropped and nothing is left.
    r = owner.client.put(
        "/api/update/bundle?offset=0",
        input_stream=io.BytesIO(BUNDLE[: 1 << 20]),
        headers={"Content-Type": "application/octet-stream", "X-CSRF-Token": owner.csrf},
        environ_base={"REMOTE_ADDR": owner.ip},
        environ_overrides={"CONTENT_LENGTH": str(CHUNK_BYTES)},
    )
    assert r.status_code == 400
    assert left_in(spool_dir) == []
    assert owner.get("/api/update").json["state"] == "idle"
    assert upload(owner, BUNDLE).status_code == 200


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_is_reported_and_changes_nothing(updating_app, spool_dir):
    spool_dir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(spool_dir)], check=True)
    try:
        owner = setup_owner(updating_app)
        r = upload(owner, BUNDLE)  # 16 MiB and more: does not fit
        assert r.status_code == 507 and r.json["code"] == "update-no-space", r.json
        assert left_in(spool_dir) == []
        # Room taken while the upload runs (the size fitted when it started): the piece that
        # does not fit drops the upload, nothing is left.
        small = BUNDLE[: CHUNK_BYTES + 1000]
        assert owner.post("/api/update", {"size": len(small)}).status_code == 201
        (spool_dir / "other").write_bytes(b"\0" * (6 << 20))
        r = put_piece(owner, 0, small[:CHUNK_BYTES])
        assert r.status_code == 507, r.json
        assert left_in(spool_dir) == ["other"]
        (spool_dir / "other").unlink()
        assert upload(owner, small).status_code == 200  # what fits is taken
    finally:
        subprocess.run(["umount", str(spool_dir)], check=True)


def test_without_an_installer_the_page_says_updates_are_on_the_console(app):
    owner = setup_owner(app)
    assert owner.get("/api/update").json["available"] is False
    r = owner.post("/api/update", {"size": 100})
    assert r.status_code == 501 and r.json["code"] == "updates-unconfigured"
