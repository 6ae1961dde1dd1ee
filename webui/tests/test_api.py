"""The JSON API and the live stream against the controller's core behind its ws.v1 (tests/stack.py) and a real hwdb."""

import time

from conftest import Api, sse, wait_for

from homework_webui.services import services


def wait_hwdb(app):
    """The hub subscribes in the background; a row inserted before that would not be pushed."""
    hub = services(app).hub
    end = time.time() + 5
    while not hub.health["hwdb"] and time.time() < end:
        time.sleep(0.05)
    assert hub.health["hwdb"]


def test_new_device_reaches_browser_within_a_second(app, owner, controller):
    stream = sse(owner)
    wait_for(stream, lambda e, d: e == "devices", 5)
    wait_hwdb(app)
    t0 = time.monotonic()
    controller.joined("02:00:00:00:00:21", hostname="htc-one")
    devices = wait_for(stream, lambda e, d: e == "devices" and any(x["mac"] == "02:00:00:00:00:21" for x in d), 1.0)
    assert time.monotonic() - t0 < 1.0
    assert next(x for x in devices if x["mac"] == "02:00:00:00:00:21")["state"] == "pending"


def test_devices_carry_link_and_bandwidth_figures(app, owner, controller, hwdb):
    a = controller.joined("02:00:00:00:00:31", state="permitted")
    b = controller.joined("02:00:00:00:00:32", state="permitted")
    wait_hwdb(app)
    hwdb.query("insert into Links values ('02:00:00:00:00:31', -45, 30, 100), ('02:00:00:00:00:33', -88, 0, 10)")
    hwdb.query(
        f"insert into Flows values (6, '{a['ip']}', 5000, '1.1.1.1', 443, 10, 30000), "
        f"(6, '{b['ip']}', 5001, '1.1.1.1', 443, 10, 10000)"
    )
    time.sleep(0.3)
    devices = {d["mac"]: d for d in owner.get("/api/devices").json["devices"]}
    assert devices["02:00:00:00:00:31"]["rssi"] == -45
    assert devices["02:00:00:00:00:31"]["retry_ratio"] == 0.3
    assert devices["02:00:00:00:00:31"]["share"] == 0.75
    assert devices["02:00:00:00:00:32"]["share"] == 0.25
    # Heard over the air but never asked for an address: "in range".
    assert devices["02:00:00:00:00:33"]["state"] == "nearby"


def test_decisions_and_names_go_to_controller(app, owner, controller):
    controller.joined("02:00:00:00:00:41")
    r = owner.post("/api/devices/02:00:00:00:00:41/permit")
    assert r.status_code == 200 and r.json["device"]["state"] == "permitted"
    assert owner.post("/api/devices/02:00:00:00:00:41/deny").json["device"]["state"] == "denied"
    assert owner.post("/api/devices/02:00:00:00:00:41/blacklist").json["device"]["state"] == "blacklisted"
    r = owner.post("/api/devices/02:00:00:00:00:41/name", {"name": "Grandma's iPad " + "é" * 10})
    assert r.status_code == 200
    assert controller.status("02:00:00:00:00:41")["name"].startswith("Grandma's iPad")
    assert ("permit", "02:00:00:00:00:41") in controller.calls
    assert owner.post("/api/devices/not-a-mac/permit").status_code == 400
    assert owner.post("/api/devices/02:00:00:00:00:99/permit").status_code == 404


def test_a_devices_dns_blocks_are_the_controllers_and_a_bad_name_is_refused(app, owner, controller):
    controller.joined("02:00:00:00:00:51")
    detail = owner.get("/api/devices/02:00:00:00:00:51").json["device"]
    assert detail["dns"] == {"available": True, "rules": []}
    r = owner.post("/api/devices/02:00:00:00:00:51/dns-blocks", {"domain": "example.com"})
    assert r.status_code == 200 and r.json["dns"]["rules"] == controller.call("dns-rules", "02:00:00:00:00:51")
    assert r.json["dns"]["rules"], "the block is the router's"
    assert owner.post("/api/devices/02:00:00:00:00:51/dns-blocks", {"domain": "bad domain!"}).status_code == 400
    assert controller.call("dns-rules", "02:00:00:00:00:51") == r.json["dns"]["rules"]


def test_apps_usage_and_priorities_persist(app, owner, hwdb):
    hwdb.query("insert into AppTimeseries values ('video', 500000, 400), ('web', 100000, 90)")
    hwdb.query("insert into AppTimeseries values ('video', 250000, 200)")
    r = owner.get("/api/apps?range=hour").json
    apps = {a["app"]: a for a in r["apps"]}
    assert apps["video"]["total_bytes"] == 750000 and apps["video"]["bytes_per_s"] == 75000
    assert len(apps["video"]["series"]) == 60 and sum(apps["web"]["series"]) == 100000
    assert [a["app"] for a in r["apps"]][:2] == ["video", "web"]
    assert owner.put("/api/apps/video/priority", {"priority": "high"}).status_code == 200
    assert owner.put("/api/apps/video/priority", {"priority": "urgent"}).status_code == 400
    assert owner.put("/api/apps/bad'app;/priority", {"priority": "high"}).status_code == 400
    hwdb.stop()
    hwdb.start()
    rows = hwdb.query("select app, priority from AppPriority").rows
    assert rows[-1] == {"app": "video", "priority": "high"}
    assert {a["app"]: a["priority"] for a in owner.get("/api/apps?range=day").json["apps"]}["video"] == "high"


def test_apps_show_the_routers_own_priorities_until_the_household_chooses(owner, controller):
    table = {a["app"]: a["priority"] for a in controller.call("apps")}  # the router's app table
    assert table["video-call"] == "high" and table["games"] == "medium"
    shown = {a["app"]: a["priority"] for a in owner.get("/api/apps").json["apps"]}
    assert shown["video-call"] == "high" and shown["games"] == "medium"  # before any traffic
    assert owner.put("/api/apps/games/priority", json={"priority": "default"}).status_code == 200
    assert {a["app"]: a["priority"] for a in owner.get("/api/apps").json["apps"]}["games"] == "default"


def test_overload_alert(app, owner, hwdb):
    stream = sse(owner)
    wait_hwdb(app)
    hwdb.query("insert into Events values ('qos-overload', '', 'high-priority queue dropped 120 packets')")
    alert = wait_for(stream, lambda e, d: e == "alert", 2)
    assert "dropped" in alert["message"]
    assert owner.get("/api/apps").json["alerts"][0]["message"].startswith("high-priority")


def test_controller_down_is_reported_and_recovers(app, owner, controller):
    hub = services(app).hub
    real = controller.url
    hub.controller.base = "http://127.0.0.1:9/ws.v1/"  # nothing listens on the discard port
    r = owner.get("/api/devices")
    assert r.status_code == 503 and r.json["component"] == "controller"
    assert hub.health["controller"] is False
    hub.controller.base = real + "/ws.v1/"
    end = time.time() + 5
    while hub.health["controller"] is not True and time.time() < end:
        time.sleep(0.05)
    assert hub.health["controller"] is True
    assert owner.get("/api/devices").status_code == 200


def test_hwdb_restart_resubscribes(app, owner, controller, hwdb):
    hub = services(app).hub
    stream = sse(owner)
    hwdb.stop()
    wait_for(stream, lambda e, d: e == "health" and d["hwdb"] is False, 5)
    assert owner.get("/api/apps").json["component"] == "hwdb"
    hwdb.start()
    wait_for(stream, lambda e, d: e == "health" and d["hwdb"] is True, 5)
    controller.joined("02:00:00:00:00:61")
    wait_for(stream, lambda e, d: e == "devices" and any(x["mac"] == "02:00:00:00:00:61" for x in d), 1.0)
    assert hub.health["hwdb"]


def test_spa_served_when_built(tmp_path, controller, hwdb):
    from homework_webui.app import create_app

    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><div id=app></div>")
    (dist / "assets" / "index-abc.js").write_text("console.log(1)")
    app = create_app(
        str(tmp_path / "s"), controller.url, ("127.0.0.1", hwdb.port), dist_dir=str(dist), start_live=False
    )
    api = Api(app)
    r = api.get("/")
    assert r.status_code == 200 and b"id=app" in r.data
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert "immutable" in api.get("/assets/index-abc.js").headers["Cache-Control"]
    assert api.get("/assets/../../etc/passwd").status_code == 404


def test_the_page_is_an_installable_web_app_with_a_service_worker(tmp_path, controller, hwdb):
    """The manifest, its icons and the service worker, at the root (a worker's scope is its
    directory), each with the type a browser insists on."""
    from homework_webui.app import create_app

    dist = tmp_path / "dist"
    dist.mkdir()
    for name, text in [("index.html", "<div id=app></div>"), ("manifest.webmanifest", "{}"), ("sw.js", "//")]:
        (dist / name).write_text(text)
    for name in ("icon-192.png", "icon-512.png"):
        (dist / name).write_bytes(b"\x89PNG")
    app = create_app(
        str(tmp_path / "s"), controller.url, ("127.0.0.1", hwdb.port), dist_dir=str(dist), start_live=False
    )
    api = Api(app)  # signed out: an installed app's first request has no session yet
    assert api.get("/manifest.webmanifest").mimetype == "application/manifest+json"
    worker = api.get("/sw.js")
    assert worker.status_code == 200 and worker.mimetype == "text/javascript"
    assert worker.headers["Cache-Control"] == "no-cache"
    assert api.get("/icon-512.png").mimetype == "image/png"
    assert api.get("/icon-1024.png").status_code == 404
