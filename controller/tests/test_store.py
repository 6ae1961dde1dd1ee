"""What the controller keeps on disk: decisions that survive a crash, a full disk and a corrupt file."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from dhcp_frames import frame
from support import LAPTOP, PHONE, ROUTER_MAC, WLAN, lease

from homework_controller.core.router import HomeRouter
from homework_controller.model import Device, State
from homework_controller.policy import dhcp
from homework_controller.store import DeviceStore

BANNED = "02:00:00:00:00:bb"


def test_a_failing_disk_loses_the_write_not_the_network(db_path, clock):
    router = HomeRouter(DeviceStore(db_path), dhcp.LeasePolicy(30, 3600), clock=clock)
    router.switch_ready(WLAN, ROUTER_MAC)
    ip = lease(router, PHONE)
    router.store.db.execute("PRAGMA query_only=1")  # every write fails from now on, as on a full disk
    router.decisions.permit(PHONE)
    assert router.store.flush()
    assert router.store.errors >= 1
    # The router goes on from memory: the permitted phone renews into its hour and a newcomer joins.
    router.joining.on_dhcp(frame(PHONE, "request", ciaddr=ip, src_ip=ip))
    assert router.status(PHONE)["state"] == "permitted" and router.status(PHONE)["lease_seconds_left"] > 3500
    assert lease(router, LAPTOP).startswith("10.2.")


def test_a_corrupt_file_is_kept_aside_and_the_last_copy_keeps_the_blacklist(db_path):
    store = DeviceStore(db_path)
    store.save(Device(mac=BANNED, state=State.BLACKLISTED))
    store.save(Device(mac=PHONE, state=State.PERMITTED))
    store.close()
    with open(db_path, "wb") as f:
        f.write(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(db_path + suffix):
            os.remove(db_path + suffix)
    store = DeviceStore(db_path)
    assert Path(store.quarantined).read_bytes().startswith(b"this is not")
    assert "restored the last copy" in store.recovered
    assert store.load()[BANNED].state is State.BLACKLISTED  # fail closed: still out
    assert store.load()[PHONE].state is State.PERMITTED  # and the household's yes stands too
    store.close()


def test_with_the_copy_unreadable_too_it_starts_empty_and_says_so(db_path):
    for path in (db_path, db_path + ".backup"):
        with open(path, "wb") as f:
            f.write(b"garbage" * 100)
    store = DeviceStore(db_path)
    assert store.load() == {} and "every device must be admitted again" in store.recovered
    # A fresh start, not a broken one: it saves again.
    store.save(Device(mac=PHONE, state=State.PERMITTED))
    store.close()
    assert DeviceStore(db_path).load()[PHONE].state is State.PERMITTED


WRITER = textwrap.dedent("""
    import sys
    from homework_controller.model import Device, State
    from homework_controller.store import DeviceStore
    store = DeviceStore(sys.argv[1])
    for n in range(1000):
        store.save(Device(mac=f"02:00:00:00:{n // 256:02x}:{n % 256:02x}", state=State.BLACKLISTED))
        store.flush()
        print(n, flush=True)  # acknowledged: what the API does after flush()
""")


def test_every_acknowledged_decision_survives_a_kill_at_once_after_it(tmp_path):
    for attempt in range(15):
        path = str(tmp_path / f"kill-{attempt}.sqlite")
        proc = subprocess.Popen([sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, text=True)
        acknowledged = -1
        for _ in range(3 + attempt * 7):  # killed after a different number of decisions each time
            acknowledged = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        saved = DeviceStore(path).load()
        assert len(saved) >= acknowledged + 1, f"attempt {attempt}: {acknowledged + 1} acknowledged, {len(saved)} kept"
        assert all(d.state is State.BLACKLISTED for d in saved.values())
