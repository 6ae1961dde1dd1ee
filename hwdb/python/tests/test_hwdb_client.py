"""hwdb_client against the byte test vectors and against a live `hwdb serve`."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest

import hwdb_client as hc

HERE = os.path.dirname(os.path.abspath(__file__))

VECTORS = os.path.join(HERE, "..", "..", "testvectors")

with open(os.path.join(VECTORS, "manifest.json")) as f:
    MANIFEST = json.load(f)


def read_vector(name):
    with open(os.path.join(VECTORS, name), "rb") as f:
        return f.read()


def test_constants_match_manifest():
    assert MANIFEST["magic"] == hc.MAGIC
    assert MANIFEST["version"] == hc.VERSION
    assert MANIFEST["header_len"] == hc.HEADER_LEN
    assert MANIFEST["max_payload"] == hc.MAX_PAYLOAD
    assert MANIFEST["kinds"] == {v: k for k, v in hc.KIND_NAMES.items()}
    assert MANIFEST["flags"] == {"RETRANSMIT": hc.FLAG_RETRANSMIT, "UNKNOWN": hc.FLAG_UNKNOWN}


@pytest.mark.parametrize("vec", MANIFEST["vectors"], ids=lambda v: v["file"])
def test_vector_decodes_and_reencodes(vec):
    data = read_vector(vec["file"])
    h, payload = hc.decode(data)
    assert hc.KIND_NAMES[h.kind] == vec["kind"]
    assert (h.conn, h.seq, h.frag, h.count, h.flags) == tuple(vec[k] for k in ("conn", "seq", "frag", "count", "flags"))
    assert payload == vec["payload"].encode()
    assert len(payload) == vec["payload_len"]
    assert hc.encode(h, payload) == data
    assert len(data) <= 1400


@pytest.mark.parametrize("msg", MANIFEST["messages"], ids=lambda m: m["name"])
def test_messages_reassemble(msg):
    whole = b"".join(hc.decode(read_vector(f))[1] for f in msg["files"])
    if "text" in msg:
        assert whole.decode() == msg["text"]
        assert hc.fragments(whole) == [hc.decode(read_vector(f))[1] for f in msg["files"]]
    else:
        reply = json.loads(whole)
        assert reply == msg["reply"]
        if reply["status"] == "ok":
            r = hc.parse_reply(whole)
            assert r.columns == [c["name"] for c in reply["columns"]]
            assert r.tuples == reply["rows"]
        else:
            with pytest.raises(hc.HwdbError) as e:
                hc.parse_reply(whole)
            assert str(e.value) == reply["message"]


def test_decode_rejects_garbage():
    good = read_vector("request_select.bin")
    for bad in [
        b"",
        good[:19],
        b"\x00" + good[1:],
        good[:2] + b"\x02" + good[3:],
        good[:-1],
        hc.encode(hc.Header(hc.REQUEST, 1, 1, 2, 2)),
    ]:
        with pytest.raises(ValueError):
            hc.decode(bad)


def test_subscription_acks_and_dedups():
    got = []
    sub = hc.Subscription(("127.0.0.1", 0), got.append)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.settimeout(1)
    try:
        note = read_vector("notify.bin")
        for _ in range(2):  # the second copy is a retransmission
            sender.sendto(note, sub.address)
            data, peer = sub.sock.recvfrom(65535)
            r = sub.handle(data, peer)
            if r is not None:
                got.append(r)
            ack = sender.recv(100)
            assert ack == read_vector("notify_ack.bin")
        assert len(got) == 1
        assert got[0].rows == [{"saddr": "10.2.0.10", "bytes": 1500}]
        assert got[0].subscription == 7
    finally:
        sender.close()
        sub.stop()


# ---------------------------------------------------------------- live server

BIN = hc.default_binary()
needs_server = pytest.mark.skipif(
    BIN is None or not os.path.exists(BIN), reason="no hwdb binary (set HWDB_BIN or build hwdb)"
)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, db, *extra):
        self.port = free_port()
        self.db = db
        self.proc = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", db, "--rto-ms", "20"] + list(extra),
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client(timeout=0.3) as c:
                    c.query("show tables")
                return
            except hc.HwdbError as e:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("hwdb serve did not start") from e

    def client(self, **kw):
        kw.setdefault("rto", 0.02)
        return hc.HwdbClient("127.0.0.1", self.port, **kw)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "hwdb.sqlite"))
    yield s
    s.stop()


@needs_server
def test_live_queries(server):
    with server.client() as c:
        r = c.query(
            "insert into Flows values (6,'10.2.0.10',5000,'1.1.1.1',443,10,1000),"
            "(17,'10.2.0.11',5353,'8.8.8.8',53,1,80)"
        )
        assert r.message == "inserted 2 rows"
        r = c.query("select saddr, sum(bytes) as b from Flows [range 10 seconds] group by saddr order by b desc")
        assert r.columns == ["saddr", "b"]
        assert r.rows == [{"saddr": "10.2.0.10", "b": 1000}, {"saddr": "10.2.0.11", "b": 80}]
        r = c.query("select * from Flows [last]")
        assert r.columns[0] == "tstamp" and isinstance(r.rows[0]["tstamp"], int) and r.rows[0]["tstamp"] > 10**18
        with pytest.raises(hc.HwdbError) as e:
            c.query("select * form Flows")
        assert str(e.value) == "1:10: expected 'from', found 'form'"


@needs_server
def test_live_large_result(server):
    with server.client() as c:
        c.query("create table Big (n integer, s varchar)")
        for start in range(0, 1000, 100):
            rows = ",".join(f"({i}, '{'y' * 1100}')" for i in range(start, start + 100))
            c.query("insert into Big values " + rows)
        raw = c.request("select * from Big")
        assert len(raw) > 1 << 20
        r = hc.parse_reply(raw)
        assert [row["n"] for row in r.rows] == list(range(1000))


@needs_server
def test_live_subscription(server):
    got = []
    done = threading.Event()

    def on_rows(result):
        got.extend(row["sport"] for row in result.rows)
        if len(got) >= 20:
            done.set()

    with server.client() as c:
        sub = c.subscribe("select sport from Flows where dport = 443", on_rows)
        try:
            for i in range(40):
                dport = 443 if i % 2 == 0 else 80
                c.query(f"insert into Flows values (6,'10.2.0.10',{i},'1.1.1.1',{dport},1,1)")
            assert done.wait(10)
            time.sleep(0.3)
            assert got == list(range(0, 40, 2))
        finally:
            sub.close()


@needs_server
def test_live_restart_keeps_priorities(tmp_path):
    db = str(tmp_path / "p.sqlite")
    s = Server(db)
    with s.client() as c:
        c.query("insert into AppPriority values ('zoom','high')")
    s.stop()
    s = Server(db)
    try:
        with s.client() as c:
            assert c.query("select app, priority from AppPriority [last]").rows == [{"app": "zoom", "priority": "high"}]
    finally:
        s.stop()


@needs_server
def test_live_lan_client_is_confined(tmp_path):
    s = Server(str(tmp_path / "l.sqlite"), "--treat-as-lan", "127.0.0.2")
    try:
        with hc.HwdbClient("127.0.0.1", s.port, rto=0.02, local_addr=("127.0.0.2", 0)) as lan:
            lan.query("insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')")
            with pytest.raises(hc.HwdbError) as e:
                lan.query("select * from AppTuples")
            assert str(e.value).startswith("forbidden: LAN clients may only insert into AppTuples")
            # A LAN batch over its size limit is refused at its first fragment, with a clear
            # error and at once; the same batch from loopback is inserted.
            row = "(6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')"
            batch = "insert into AppTuples values " + ",".join([row] * 1500)
            started = time.monotonic()
            with pytest.raises(hc.HwdbError) as e:
                lan.query(batch)
            assert str(e.value) == "query is longer than the limit of 65536 bytes for LAN clients"
            assert time.monotonic() - started < 1
        with s.client() as local:
            assert local.query(batch).message == "inserted 1500 rows"
    finally:
        s.stop()


def test_timeout_when_nobody_listens():
    with hc.HwdbClient("127.0.0.1", free_port(), timeout=0.5, rto=0.05) as c, pytest.raises(hc.HwdbTimeout):
        c.query("show tables")
