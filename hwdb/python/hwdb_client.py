"""Client for the hwdb UDP RPC (see hwdb/PROTOCOL.md). Standard library only.

from hwdb_client import HwdbClient, HwdbError
db = HwdbClient('127.0.0.1', 987)
result = db.query("select app, priority from AppPriority")
for row in result.rows:        # each row is a dict: {'app': ..., 'priority': ...}
    ...
"""

import json
import os
import random
import socket
import struct
import threading
import time

__all__ = [
    "HwdbClient",
    "HwdbError",
    "HwdbTimeout",
    "Result",
    "Header",
    "Subscription",
    "encode",
    "decode",
    "fragments",
]

MAGIC = 0x4857
VERSION = 1
HEADER = struct.Struct("!HBBIIHHHH")
HEADER_LEN = HEADER.size  # 20
MAX_PAYLOAD = 1352

REQUEST, REQUEST_ACK, RESPONSE, RESPONSE_ACK, NOTIFY, NOTIFY_ACK, PING, PONG = range(1, 9)
KIND_NAMES = {
    REQUEST: "REQUEST",
    REQUEST_ACK: "REQUEST_ACK",
    RESPONSE: "RESPONSE",
    RESPONSE_ACK: "RESPONSE_ACK",
    NOTIFY: "NOTIFY",
    NOTIFY_ACK: "NOTIFY_ACK",
    PING: "PING",
    PONG: "PONG",
}
FLAG_RETRANSMIT = 0x0001
FLAG_UNKNOWN = 0x0002
_PAYLOAD_KINDS = (REQUEST, RESPONSE, NOTIFY)


class HwdbError(Exception):
    """The server refused or failed a statement; str(e) is its message."""


class HwdbTimeout(HwdbError):
    """No (complete) answer from the server."""


class Header:
    __slots__ = ("kind", "conn", "seq", "frag", "count", "flags")

    def __init__(self, kind, conn, seq, frag=0, count=1, flags=0):
        self.kind, self.conn, self.seq = kind, conn, seq
        self.frag, self.count, self.flags = frag, count, flags

    def __eq__(self, other):
        return isinstance(other, Header) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self):
        kind = KIND_NAMES.get(self.kind, self.kind)
        frag = f"{self.frag}/{self.count}"
        return f"Header({kind}, conn={self.conn:#x}, seq={self.seq}, frag={frag}, flags={self.flags:#x})"


def encode(h, payload=b""):
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("payload too large for one datagram")
    return HEADER.pack(MAGIC, VERSION, h.kind, h.conn, h.seq, h.frag, h.count, h.flags, len(payload)) + payload


def decode(data):
    """Return (Header, payload) or raise ValueError for anything malformed."""
    if len(data) < HEADER_LEN:
        raise ValueError("short datagram")
    magic, version, kind, conn, seq, frag, count, flags, length = HEADER.unpack_from(data)
    payload = data[HEADER_LEN:]
    if magic != MAGIC or version != VERSION or kind not in KIND_NAMES:
        raise ValueError("not an hwdb datagram")
    if length != len(payload) or length > MAX_PAYLOAD:
        raise ValueError("length mismatch")
    if count == 0 or frag >= count:
        raise ValueError("bad fragment numbering")
    if flags & ~(FLAG_RETRANSMIT | FLAG_UNKNOWN):
        raise ValueError("unknown flags")
    if kind not in _PAYLOAD_KINDS and length:
        raise ValueError("unexpected payload")
    return Header(kind, conn, seq, frag, count, flags), bytes(payload)


def fragments(message):
    """Split a message into datagram payloads (an empty message is one empty fragment)."""
    if not message:
        return [b""]
    parts = [message[i : i + MAX_PAYLOAD] for i in range(0, len(message), MAX_PAYLOAD)]
    if len(parts) > 0xFFFF:
        raise ValueError("message too large")
    return parts


def _newer(a, b):
    d = (a - b) & 0xFFFFFFFF
    return 0 < d < 0x80000000


class Result:
    """A reply: `columns` (names), `types`, `rows` (dicts), `tuples` (lists), `message`."""

    def __init__(self, reply):
        cols = reply.get("columns") or []
        self.columns = [c["name"] for c in cols]
        self.types = [c["type"] for c in cols]
        self.tuples = reply.get("rows") or []
        self.rows = [dict(zip(self.columns, r, strict=False)) for r in self.tuples]
        self.message = reply.get("message")
        self.subscription = reply.get("subscription")
        self.raw = reply

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __repr__(self):
        return f"Result(columns={self.columns!r}, rows={len(self.rows)}, message={self.message!r})"


def parse_reply(payload):
    try:
        reply = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise HwdbError(f"malformed reply: {e}") from e
    if reply.get("status") != "ok":
        raise HwdbError(reply.get("message") or "unknown error")
    return Result(reply)


class HwdbClient:
    """One connection: requests are sent one at a time (stop-and-wait per fragment),
    retransmitted with exponential backoff, and kept alive with pings while the server works.
    Not thread-safe: use one client per thread."""

    def __init__(
        self,
        host="127.0.0.1",
        port=987,
        timeout=30.0,
        rto=0.1,
        max_rto=2.0,
        max_tries=8,
        ping_interval=0.5,
        local_addr=None,
    ):
        self.server = (host, port)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        if local_addr:
            self.sock.bind(local_addr)
        self.sock.connect(self.server)
        self.timeout, self.rto, self.max_rto = timeout, rto, max_rto
        self.max_tries, self.ping_interval = max_tries, ping_interval
        self.conn = random.getrandbits(32)
        self.seq = random.getrandbits(31)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, kind, frag=0, count=1, flags=0, payload=b""):
        try:
            self.sock.send(encode(Header(kind, self.conn, self.seq, frag, count, flags), payload))
        except ConnectionRefusedError:
            pass  # ICMP from an earlier datagram: same as a loss

    def _recv(self, until):
        """Next datagram of the current exchange as (Header, payload), or None at `until`."""
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                return None
            except ConnectionRefusedError:
                time.sleep(min(0.005, max(0.0, until - time.monotonic())))
                continue
            try:
                h, p = decode(data)
            except ValueError:
                continue
            if h.conn == self.conn and h.seq == self.seq:
                return h, p

    def request(self, text):
        """Send one statement; return the raw reply payload (JSON bytes)."""
        message = text.encode("utf-8") if isinstance(text, str) else text
        parts = fragments(message)
        count = len(parts)
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        end = time.monotonic() + self.timeout
        where = f"{self.server[0]}:{self.server[1]}"
        first = None
        working = False
        i = 0
        while i < count and first is None and not working:
            rto, flags, tries = self.rto, 0, 0
            while True:
                self._send(REQUEST, i, count, flags, parts[i])
                until = min(time.monotonic() + rto, end)
                advanced = False
                while True:
                    got = self._recv(until)
                    if got is None:
                        break
                    h, p = got
                    if h.kind == RESPONSE:
                        first = got
                        break
                    if h.kind == REQUEST_ACK and h.frag == i:
                        if i + 1 == count:
                            working = True
                        advanced = True
                        break
                if first is not None or advanced:
                    break
                tries += 1
                if tries >= self.max_tries or time.monotonic() >= end:
                    raise HwdbTimeout(f"no answer from the server at {where} (request not acknowledged)")
                rto, flags = min(rto * 2, self.max_rto), FLAG_RETRANSMIT
            i += 1

        if first is None:
            # The server has the whole request and is executing it: keep it alive.
            missed = 0
            while first is None:
                got = self._recv(min(time.monotonic() + self.ping_interval, end))
                if got is None:
                    if time.monotonic() >= end or missed >= self.max_tries:
                        raise HwdbTimeout(f"no answer from the server at {where} (no reply to pings)")
                    missed += 1
                    self._send(PING)
                elif got[0].kind == RESPONSE:
                    first = got
                elif got[0].kind == PONG:
                    if got[0].flags & FLAG_UNKNOWN:
                        raise HwdbError("the server lost the request (did it restart?)")
                    missed = 0

        rcount = first[0].count
        out, nxt, pkt = [], 0, first
        while True:
            if pkt is not None:
                h, p = pkt
                if h.kind == RESPONSE and h.count == rcount:
                    if h.frag == nxt:
                        out.append(p)
                        self._send(RESPONSE_ACK, h.frag, rcount)
                        nxt += 1
                        if nxt == rcount:
                            return b"".join(out)
                    elif h.frag < nxt:
                        self._send(RESPONSE_ACK, h.frag, rcount)
            pkt = self._recv(end)
            if pkt is None:
                raise HwdbTimeout(f"no answer from the server at {where} (response incomplete)")

    def query(self, text):
        """Run a statement and return a Result; raise HwdbError with the server's message."""
        return parse_reply(self.request(text))

    def subscribe(self, query, callback, listen=("127.0.0.1", 0)):
        """Subscribe to a plain select; `callback(result)` runs on a background thread for
        every batch of new matching rows. Returns a Subscription (call .close() to stop)."""
        sub = Subscription(listen, callback)
        try:
            host, port = sub.address[0], sub.address[1]
            result = self.query(f"subscribe {query} to {host} {port}")
        except Exception:
            sub.stop()
            raise
        sub.id = result.tuples[0][0]
        sub.client = self
        sub.start()
        return sub


class Subscription:
    """Listens for NOTIFY messages, acknowledges each fragment and delivers each batch once."""

    def __init__(self, listen, callback):
        family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(listen)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self.callback = callback
        self.id = None
        self.client = None
        self._stop = threading.Event()
        self._delivered = {}
        self._partial = {}
        self._thread = threading.Thread(target=self._run, name="hwdb-subscription", daemon=True)

    def start(self):
        self._thread.start()

    def handle(self, data, peer):
        """Process one datagram; return a Result when it completes a new batch."""
        try:
            h, p = decode(data)
        except ValueError:
            return None
        if h.kind != NOTIFY:
            return None
        ack = encode(Header(NOTIFY_ACK, h.conn, h.seq, h.frag, h.count))
        key = (peer, h.conn)
        last = self._delivered.get(key)
        if last is not None and not _newer(h.seq, last):
            self.sock.sendto(ack, peer)
            return None
        seq, nxt, parts = self._partial.get(key, (h.seq, 0, []))
        if seq != h.seq:
            seq, nxt, parts = h.seq, 0, []
        if h.frag == nxt:
            parts.append(p)
            nxt += 1
        elif h.frag > nxt:
            return None
        self._partial[key] = (seq, nxt, parts)
        self.sock.sendto(ack, peer)
        if nxt == h.count:
            del self._partial[key]
            self._delivered[key] = h.seq
            return Result(json.loads(b"".join(parts).decode("utf-8")))
        return None

    def _run(self):
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            result = self.handle(data, peer)
            if result is not None:
                self.callback(result)

    def stop(self):
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        self.sock.close()

    def close(self):
        """Unsubscribe (best effort) and stop listening."""
        if self.client is not None and self.id is not None:
            try:
                self.client.query(f"unsubscribe {self.id}")
            except HwdbError:
                pass
        self.stop()


def default_binary():
    """The hwdb binary for tests: $HWDB_BIN, else a release or debug build beside this file."""
    env = os.environ.get("HWDB_BIN")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for profile in ("release", "debug"):
        path = os.path.join(here, "..", "target", profile, "hwdb")
        if os.path.exists(path):
            return os.path.normpath(path)
    return None
