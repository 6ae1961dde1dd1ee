"""The slicer's asyncio layer: it moves bytes between one switch and many household sessions.

Decisions come from `admission` (which messages a household may send, and what the slicer does with
them; the rule quota), `policy.Slice` (what a message may do and how its ids map), `answers` (what the
slicer answers itself), `accounting` and the codecs; what the slicer holds for a household is its
`session.HouseholdSession`. This module only reads frames, serves households round-robin and carries
out what those modules decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from . import admission, answers, codec, fastpath, policy, switchside
from .accounting import RuleBook
from .config import SlicerConfig
from .model import Household
from .registry import Registry
from .scheduler import RoundRobin
from .session import BatchedWriter, Connection, Counters, HouseholdSession

LOG = logging.getLogger("isp_flowvisor")
HELLO_TIMEOUT = 10.0
# Relayed messages without a reply (flow-mods, packet-outs, ...) are remembered only to map a switch
# error back to their sender; those of the most recent xids suffice, since the switch answers in
# order. They are kept in a ring by xid, so forgetting the oldest costs nothing (an OrderedDict's
# rebuilds cost about 0.6 us per relayed message at this size).
_RECENT_LIMIT = 1 << 14


class _Statistics(NamedTuple):
    """A statistics request the switch answers for a household: the request as the switch gets it, and
    the entries of the switch's reply (one part's body) that are the household's, in its terms."""

    request: Callable[[policy.Requests, Any], Any]
    entries: Callable[[policy.Slice, Any], list[bytes]]


# The statistics the slicer relays, by kind (admission.request's names); their replies are filtered.
_RELAYED_STATISTICS: dict[str, _Statistics] = {
    "flow": _Statistics(
        policy.Requests.flow_stats_request,
        lambda slice_, body: [switchside.flow_stats_entry(s) for s in map(slice_.reports.flow_stats, body) if s],
    ),
    "aggregate": _Statistics(
        policy.Requests.flow_stats_request,
        lambda _, body: [switchside.aggregate_entry(body.packet_count, body.byte_count, body.flow_count)],
    ),
    "port_stats": _Statistics(
        policy.Requests.port_stats_request,
        lambda slice_, body: [switchside.port_stats_entry(s) for s in body if s.port_no in slice_.view],
    ),
    "queue": _Statistics(
        policy.Requests.queue_stats_request,
        lambda slice_, body: [switchside.queue_stats_entry(s) for s in map(slice_.reports.queue_stats, body) if s],
    ),
    "group": _Statistics(
        policy.Requests.group_stats_request,
        lambda slice_, body: [switchside.group_stats_entry(g) for g in map(slice_.reports.group_stats, body) if g],
    ),
    "group_desc": _Statistics(
        lambda _, msg: parser.OFPGroupDescStatsRequest(codec.CODEC, msg.flags),
        lambda slice_, body: [switchside.group_desc_entry(*g) for g in map(slice_.reports.group_desc, body) if g],
    ),
    "meter": _Statistics(
        policy.Requests.group_stats_request,
        lambda slice_, body: [switchside.meter_stats_entry(m) for m in map(slice_.reports.meter_stats, body) if m],
    ),
    "meter_config": _Statistics(
        policy.Requests.group_stats_request,
        lambda slice_, body: [switchside.meter_config_entry(*m) for m in map(slice_.reports.meter_config, body) if m],
    ),
}
# The requests the slicer relays as messages the switch does not answer, by kind (admission.request's
# names): what each becomes on the switch. Flow-mods are relayed apart: the rule book and its quota.
_RELAYED_MODS: dict[str, Callable[[policy.Requests, Any], list[Any]]] = {
    "packet_out": lambda requests, msg: [requests.packet_out(msg)],
    "group_mod": policy.Requests.group_mod,
    "meter_mod": policy.Requests.meter_mod,
}
# Kinds of the relayed requests that the switch answers: the slicer's own, barriers and statistics.
_REPLY_KINDS = {"own", "barrier", *_RELAYED_STATISTICS}
_READ_SIZE = 1 << 16
# How long the relay serves turns before it lets replies and new messages in: each pause costs a
# send to the switch and one to every household answered, so not after every turn; short enough
# that a reply waits at most this long behind other households' turns.
_SERVE_SLICE = 0.001
# A household's barrier (one per window of flow-mods) and its reply, as os-ken encodes them, to be
# renumbered: the same bytes without building and serialising two os-ken objects per barrier.
_BARRIER_REQUEST = codec.encode(parser.OFPBarrierRequest(codec.CODEC), 0)
_BARRIER_REPLY = codec.encode(parser.OFPBarrierReply(codec.CODEC), 0)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(codec.HEADER_SIZE)
    length = codec.frame_length(head)
    if length < codec.HEADER_SIZE:
        raise ValueError(f"frame length {length} is shorter than a header")
    return head + await reader.readexactly(length - codec.HEADER_SIZE)


async def read_frames(reader: asyncio.StreamReader, unread: bytearray) -> list[bytes]:
    """The complete frames of whatever the peer sent next (at least one; a whole read of them at a
    time, not two awaits per frame); `unread` carries a partial frame between calls. EOF raises
    IncompleteReadError, a length shorter than a header ValueError."""
    while True:
        data = await reader.read(_READ_SIZE)
        if not data:
            raise asyncio.IncompleteReadError(bytes(unread), None)
        unread += data
        frames = codec.split_frames(unread)
        if frames:
            return frames


async def exchange_hellos(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Send our HELLO, read the peer's; on an incompatible peer answer HELLO_FAILED and say so."""
    writer.write(codec.hello())
    frame = await asyncio.wait_for(read_frame(reader), HELLO_TIMEOUT)
    version, msg_type, _, xid = codec.header(frame)
    if msg_type != ofp.OFPT_HELLO or not codec.peer_supports_13(frame):
        writer.write(codec.hello_failed(version, xid))
        await writer.drain()
        return False
    return True


@dataclass(slots=True)
class Pending:
    """A relayed request awaiting its reply or error."""

    session: HouseholdSession | None
    connection: Connection | None  # the one it came on: its answer goes there or nowhere
    xid: int  # the household's own xid
    kind: str
    head: bytes  # the household's original message (for errors), at most 64 bytes
    rule_key: tuple | None = None
    future: asyncio.Future | None = None  # the slicer's own request: its reply's parts, when all came
    parts: list | None = None  # the slicer's own request: the parts so far
    relayed_xid: int = 0  # the slicer's xid it went to the switch under


class Slicer:
    def __init__(self, config: SlicerConfig, registry: Registry, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.registry = registry
        self.clock = clock
        # One session per household in the registry, connected or not; by slot for the switch's messages.
        self.sessions: dict[str, HouseholdSession] = {}
        self._by_slot: dict[int, HouseholdSession] = {}
        self.switch_writer: asyncio.StreamWriter | None = None
        self._switch_out: BatchedWriter | None = None
        self.switch_ready = asyncio.Event()
        self.switch_dpid = 0
        self.switch_connects = 0
        self.ports: dict[int, Any] = {}
        # Requests awaiting a reply are kept until it comes (never crowded out by flow-mod traffic);
        # messages without one only in a bounded window, for errors.
        self._awaiting: dict[int, Pending] = {}
        self._recent: list[Pending | None] = [None] * _RECENT_LIMIT
        self._next_xid = 1
        self._work = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task] = []
        self._rotation: RoundRobin[str] = RoundRobin(config.batch)
        self.on_households_changed: list[Callable[[dict[str, Household]], Any]] = []
        # What the slicer does with each kind of message a household may send (admission.request's
        # names): relay it translated, or answer it itself. A new kind is one entry of `_RELAYED_MODS`,
        # `_RELAYED_STATISTICS` or `answers.ANSWERS`.
        self._handlers: dict[str, Callable[[HouseholdSession, str, Any, bytes], None]] = {
            "flow_mod": self._relay_flow_mod,
            "barrier": self._relay_barrier,
            **dict.fromkeys(_RELAYED_MODS, self._relay_mods),
            **dict.fromkeys(_RELAYED_STATISTICS, self._relay_statistics),
            **dict.fromkeys(answers.ANSWERS, self._answer),
        }
        # The switch's messages by OpenFlow type: the asynchronous ones and its echoes; anything else
        # answers a request (`_reply`).
        self._from_switch_handlers: dict[int, Callable[[Any, BatchedWriter], None]] = {
            ofp.OFPT_PACKET_IN: self._packet_in,
            ofp.OFPT_FLOW_REMOVED: self._flow_removed,
            ofp.OFPT_PORT_STATUS: self._port_status,
            ofp.OFPT_ECHO_REQUEST: self._echo,
        }
        # What a household gets for the switch's answer to its request, by the answer's OpenFlow type.
        self._replies: dict[int, Callable[[HouseholdSession, Pending, Any, bool], list[bytes]]] = {
            ofp.OFPT_ERROR: self._error_for,
            ofp.OFPT_BARRIER_REPLY: lambda session, pending, msg, more: [codec.renumbered(_BARRIER_REPLY, pending.xid)],
            ofp.OFPT_MULTIPART_REPLY: self._multipart_for,
        }

    # Views by name, built on each call: for fvctl, the registry's callbacks and tests, never per message.
    @property
    def households(self) -> dict[str, Household]:
        return {name: session.household for name, session in self.sessions.items()}

    @property
    def books(self) -> dict[str, RuleBook]:
        return {name: session.book for name, session in self.sessions.items()}

    @property
    def counters(self) -> dict[str, Counters]:
        return {name: session.counters for name, session in self.sessions.items()}

    def is_connected(self, name: str) -> bool:
        session = self.sessions.get(name)
        return session is not None and session.connected

    def register(self, household: Household) -> HouseholdSession:
        """A household the registry added: its session, until it is forgotten."""
        session = HouseholdSession(household, self.config.shared_ports, self.clock)
        self.sessions[household.name] = session
        self._by_slot[household.slot] = session
        return session

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        for household in (await self.registry.snapshot()).values():
            self.register(household)
        if self.config.switch_unix:
            self._servers.append(await asyncio.start_unix_server(self._on_switch, self.config.switch_unix))
        else:
            self._servers.append(await asyncio.start_server(self._on_switch, *self.config.switch_listen))
        ssl_ctx = None if self.config.plain_tcp else self._tls_context()
        self._servers.append(
            await asyncio.start_server(self._on_household, *self.config.household_listen, ssl=ssl_ctx, limit=1 << 17)
        )
        for job in (self._serve_round_robin(), self.registry.follow(self.apply_registry)):
            task = asyncio.create_task(job)
            task.add_done_callback(_log_crash)
            self._tasks.append(task)

    def _tls_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        ctx.load_verify_locations(self.config.tls_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def bound_port(self, which: int) -> int:
        """The port a listener got (0 in the config means any free port): 0 switch, 1 households."""
        return int(self._servers[which].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for server in self._servers:
            server.close()
        for session in list(self.sessions.values()):
            session.forget()
        if self.switch_writer is not None:
            self.switch_writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    # --- registry -----------------------------------------------------------------------------

    async def apply_registry(self, households: dict[str, Household]) -> None:
        """Bring switch and sessions in line with the registry, without dropping other sessions."""
        for name, household in households.items():
            session = self.sessions.get(name)
            before = session.household if session is not None else None
            if before == household:
                continue
            if before is not None and before.addresses != household.addresses:
                self._to_switch(codec.encode(policy.delete_slicer_rules(before.slot)))
            for rule in policy.dispatch_rules(household):
                self._to_switch(codec.encode(rule))
            if session is None:
                self.register(household)
            else:
                session.retarget(household)
        for name in [name for name in self.sessions if name not in households]:
            self._forget(self.sessions.pop(name))
        self._by_slot = {session.household.slot: session for session in self.sessions.values()}
        for callback in self.on_households_changed:
            callback(households)

    async def apply_registry_from_source(self) -> None:
        await self.apply_registry(await self.registry.snapshot())

    def _forget(self, session: HouseholdSession) -> None:
        session.forget()
        self._to_switch(codec.encode(policy.delete_slicer_rules(session.household.slot)))
        self._delete_household_state(session)

    def _delete_household_state(self, session: HouseholdSession) -> None:
        """Every rule, meter and group of the household on the switch."""
        slice_ = session.slice
        wide_delete = parser.OFPFlowMod(
            codec.CODEC,
            cookie=slice_.ids.cookie(0),
            cookie_mask=policy.COOKIE_SLOT_MASK,
            table_id=ofp.OFPTT_ALL,
            command=ofp.OFPFC_DELETE,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(),
        )
        self._to_switch(codec.encode(wide_delete))
        for msg in slice_.requests.meter_mod(
            parser.OFPMeterMod(codec.CODEC, command=ofp.OFPMC_DELETE, meter_id=ofp.OFPM_ALL)
        ):
            self._to_switch(codec.encode(msg))
        for msg in slice_.requests.group_mod(
            parser.OFPGroupMod(codec.CODEC, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL)
        ):
            self._to_switch(codec.encode(msg))
        session.book.replace([])

    # --- switch side --------------------------------------------------------------------------

    def _to_switch(self, frame: bytes) -> None:
        if self._switch_out is not None:
            self._switch_out.write(frame)

    def _remember(self, pending: Pending) -> int:
        """A fresh xid of the slicer's for a request about to be sent, remembering whose it is."""
        xid = pending.relayed_xid = self._next_xid
        self._next_xid = xid + 1 if xid < 0xFFFFFFFF else 1
        if pending.kind in _REPLY_KINDS:
            self._awaiting[xid] = pending
        else:
            self._recent[xid % _RECENT_LIMIT] = pending
        return xid

    def _answered(self, xid: int, last_part: bool) -> Pending | None:
        """The request the switch answers under `xid`, if it is remembered; forgotten with its last part."""
        pending = self._awaiting.get(xid)
        if pending is not None:
            if last_part:
                del self._awaiting[xid]
            return pending
        pending = self._recent[xid % _RECENT_LIMIT]
        if pending is None or pending.relayed_xid != xid:
            return None
        if last_part:
            self._recent[xid % _RECENT_LIMIT] = None
        return pending

    def _relay(self, msg: Any, pending: Pending) -> bytes:
        """Send a request under a fresh xid of the slicer's, remembering whose it is."""
        frame = codec.encode(msg, self._remember(pending))
        self._to_switch(frame)
        return frame

    async def _ask_switch(self, msg: Any) -> list:
        """Send a request of the slicer's own and wait for all parts of its reply."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._relay(msg, Pending(None, None, 0, "own", b"", future=future, parts=[]))
        return await asyncio.wait_for(future, 30)

    async def _on_switch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not await exchange_hellos(reader, writer):
                return
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            writer.close()
            return
        if self.switch_writer is not None:
            self.switch_writer.close()  # a switch that came back replaces its dead connection
        self.switch_ready.clear()
        self.switch_writer = writer
        self._switch_out = out = BatchedWriter(writer)
        self.switch_connects += 1
        reading = asyncio.create_task(self._read_switch(reader, out))
        try:
            await self._synchronise_switch()
            self.switch_ready.set()
            self._work.set()
            await reading
        except (TimeoutError, OSError, ConnectionError) as exc:
            LOG.warning("switch connection: %s", exc)
        except Exception:
            LOG.exception("switch connection")  # drop it; the switch reconnects and is synchronised again
        finally:
            reading.cancel()
            if self.switch_writer is writer:
                self.switch_writer = None
                self._switch_out = None
                self.switch_ready.clear()
            writer.close()

    async def _synchronise_switch(self) -> None:
        """(Re)build the switch's slicer rules and every household's rules, then resume relaying."""
        (features,) = await self._ask_switch(parser.OFPFeaturesRequest(codec.CODEC))
        self.switch_dpid = features.datapath_id
        self._to_switch(codec.encode(parser.OFPSetConfig(codec.CODEC, 0, ofp.OFPCML_NO_BUFFER)))
        self.ports = {
            p.port_no: p
            for part in await self._ask_switch(parser.OFPPortDescStatsRequest(codec.CODEC, 0))
            for p in part.body
        }
        for rule in policy.baseline_rules():
            self._to_switch(codec.encode(rule))
        slots = {h.slot for h in self.households.values()}
        for household in self.households.values():
            for rule in policy.dispatch_rules(household):
                self._to_switch(codec.encode(rule))
        dump = await self._ask_switch(
            parser.OFPFlowStatsRequest(
                codec.CODEC, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch()
            )
        )
        entries = [stats for part in dump for stats in part.body]
        for stats in entries:
            slot = policy.slot_of_cookie(stats.cookie)
            if slot == 0 and stats.table_id == policy.TABLE_DISPATCH and stats.cookie and stats.cookie not in slots:
                self._to_switch(codec.encode(policy.delete_slicer_rules(stats.cookie)))  # a household since removed
        for session in self.sessions.values():
            slot = session.household.slot
            self._resynchronise(session, [s for s in entries if policy.slot_of_cookie(s.cookie) == slot])

    def _resynchronise(self, session: HouseholdSession, entries: list) -> None:
        """Make the book match the switch; put back rules the switch lost (it restarted)."""
        book = session.book
        on_switch = {policy.rule_key(s.table_id, s.priority, s.match): _flow_mod_from_stats(s) for s in entries}
        missing = {k: v for k, v in book.rules.items() if k not in on_switch} if not book.stale else {}
        for frame in missing.values():
            self._to_switch(frame)
        book.replace({**on_switch, **missing}.items())

    async def _refresh_book(self, session: HouseholdSession) -> None:
        """After a wide delete or modify: read the household's rules back from the switch."""
        if self.sessions.get(session.household.name) is not session:
            return  # forgotten meanwhile
        request = parser.OFPFlowStatsRequest(
            codec.CODEC,
            0,
            ofp.OFPTT_ALL,
            ofp.OFPP_ANY,
            ofp.OFPG_ANY,
            session.slice.ids.cookie(0),
            policy.COOKIE_SLOT_MASK,
            parser.OFPMatch(),
        )
        book = session.book
        asked = book.dump_asked()  # the request goes out in _ask_switch before its first await
        try:
            dump = await self._ask_switch(request)
        except (TimeoutError, ConnectionError):
            book.dump_failed(asked)
            return
        book.dump_arrived(
            asked,
            (
                (policy.rule_key(s.table_id, s.priority, s.match), _flow_mod_from_stats(s))
                for part in dump
                for s in part.body
            ),
        )

    async def usage(self) -> dict[str, dict[str, int]]:
        """Bytes to ("down") and from ("up") each household, from the counters of its dispatch rules."""
        request = parser.OFPFlowStatsRequest(
            codec.CODEC,
            0,
            policy.TABLE_DISPATCH,
            ofp.OFPP_ANY,
            ofp.OFPG_ANY,
            0,
            policy.COOKIE_SLOT_MASK,
            parser.OFPMatch(),
        )
        by_slot: dict[int, dict[str, int]] = {}
        for part in await self._ask_switch(request):
            for stats in part.body:
                fields = dict(stats.match.items())
                direction = "down" if "ipv4_dst" in fields or "arp_tpa" in fields else "up"
                totals = by_slot.setdefault(stats.cookie, {"down": 0, "up": 0})
                totals[direction] += stats.byte_count
        return {h.name: by_slot[h.slot] for h in self.households.values() if h.slot in by_slot}

    async def _read_switch(self, reader: asyncio.StreamReader, out: BatchedWriter) -> None:
        unread = bytearray()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:
                for frame in await read_frames(reader, unread):
                    try:
                        msg = codec.decode(frame)
                    except codec.Malformed as exc:
                        LOG.warning("undecodable message from the switch: %s", exc)
                        continue
                    try:
                        self._from_switch(msg, out)
                    except Exception:
                        LOG.exception("handling %s from the switch", type(msg).__name__)
        # Requests the switch will never answer now: the slicer's own fail, households get an error.
        awaiting, self._awaiting = self._awaiting, {}
        self._recent = [None] * _RECENT_LIMIT
        for pending in awaiting.values():
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(ConnectionError("switch disconnected"))
            elif pending.connection is not None:
                pending.connection.send(codec.error(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, pending.head, pending.xid))

    def _from_switch(self, msg: Any, out: BatchedWriter) -> None:
        """A message of the switch's, which came on the connection `out` writes to."""
        handler = self._from_switch_handlers.get(msg.msg_type)
        if handler is None:
            self._reply(msg)
        else:
            handler(msg, out)

    def _packet_in(self, msg: Any, out: BatchedWriter) -> None:
        session = self._by_slot.get(policy.slot_of_cookie(msg.cookie))
        seen = session.slice.reports.packet_in(msg) if session and session.connected else None
        if session and seen is not None:
            session.counters.packet_ins += 1
            session.send(switchside.packet_in(0, seen))

    @staticmethod
    def _echo(msg: Any, out: BatchedWriter) -> None:
        out.write(codec.encode(parser.OFPEchoReply(codec.CODEC, msg.data), msg.xid))

    def _flow_removed(self, msg: Any, out: BatchedWriter) -> None:
        session = self._by_slot.get(policy.slot_of_cookie(msg.cookie))
        if session is None:
            return
        session.book.remove(policy.rule_key(msg.table_id, msg.priority, msg.match))
        seen = session.slice.reports.flow_removed(msg) if session.connected else None
        if seen is not None:
            session.send(switchside.flow_removed(0, seen))

    def _port_status(self, msg: Any, out: BatchedWriter) -> None:
        if msg.reason == ofp.OFPPR_DELETE:
            self.ports.pop(msg.desc.port_no, None)
        else:
            self.ports[msg.desc.port_no] = msg.desc
        for session in self.sessions.values():
            if session.connected and msg.desc.port_no in session.slice.view:
                session.send(switchside.port_status(0, msg.reason, msg.desc))

    def _reply(self, msg: Any) -> None:
        more = isinstance(msg, parser.OFPMultipartReply) and bool(msg.flags & ofp.OFPMPF_REPLY_MORE)
        pending = self._answered(msg.xid, not more)
        if pending is None:
            return
        own, parts = pending.future, pending.parts
        if own is not None and parts is not None:  # the slicer's own request
            if isinstance(msg, parser.OFPErrorMsg):
                own.set_exception(ConnectionError(f"switch error {msg.type}/{msg.code}"))
            else:
                parts.append(msg)
                if not more:
                    own.set_result(parts)
            return
        session, connection = pending.session, pending.connection
        if session is None or connection is None or connection.closed:
            return
        reply = self._replies.get(msg.msg_type)
        if reply is not None:
            for frame in reply(session, pending, msg, more):
                connection.send(frame)

    @staticmethod
    def _error_for(session: HouseholdSession, pending: Pending, msg: Any, more: bool) -> list[bytes]:
        if pending.rule_key is not None:
            session.book.remove(pending.rule_key)  # the switch did not take the rule
        return [codec.error(msg.type, msg.code, pending.head, pending.xid)]

    def _multipart_for(self, session: HouseholdSession, pending: Pending, msg: Any, more: bool) -> list[bytes]:
        entries = _RELAYED_STATISTICS[pending.kind].entries(session.slice, msg.body)
        frames = switchside.multipart_reply(pending.xid, msg.type, entries)
        if more:  # the switch's own part boundary: keep REPLY_MORE on our last part too
            last = bytearray(frames[-1])
            last[10:12] = ofp.OFPMPF_REPLY_MORE.to_bytes(2, "big")
            frames[-1] = bytes(last)
        return frames

    # --- household side -----------------------------------------------------------------------

    def _identify(self, writer: asyncio.StreamWriter) -> Household | None:
        if self.config.plain_tcp:
            host = writer.get_extra_info("peername")[0]
            return next((h for h in self.households.values() if h.source_address == host), None)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        fingerprint = hashlib.sha256(der).hexdigest() if der else ""
        return next((h for h in self.households.values() if h.cert_sha256 and h.cert_sha256 == fingerprint), None)

    async def _on_household(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        household = self._identify(writer)
        if household is None:
            LOG.warning(
                "refused a household connection from %s: not in the registry", writer.get_extra_info("peername")
            )
            writer.close()
            return
        try:
            if not await exchange_hellos(reader, writer):
                writer.close()
                return
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            writer.close()
            return
        session = self.sessions.get(household.name)
        if session is None:  # forgotten while it said hello
            writer.close()
            return
        connection = session.connect(reader, writer)
        try:
            await self._read_household(session, connection)
        finally:
            current = session.disconnected(connection) and self.sessions.get(household.name) is session
            if current and session.household.on_disconnect == "delete":
                self._delete_household_state(session)

    async def _read_household(self, session: HouseholdSession, connection: Connection) -> None:
        limit = self.config.inbox
        unread = bytearray()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError, ssl.SSLError):
            while not connection.closed:
                await connection.room.wait()
                frames = await read_frames(connection.reader, unread)
                # A household with queued messages is already in the rotation or waiting on its
                # rate limit's timer: only its first message needs to wake it.
                first = not connection.inbox
                connection.inbox.extend(frames)
                if len(connection.inbox) >= limit:
                    connection.room.clear()  # stop reading: TCP pushes back on a flooding household
                if first:
                    self._wake(session)

    def _wake(self, session: HouseholdSession) -> None:
        connection = session.connection
        if (
            connection is not None
            and not connection.closed
            and connection.inbox
            and self.sessions.get(session.household.name) is session
        ):
            self._rotation.wake(session.household.name)
            self._work.set()

    async def _serve_round_robin(self) -> None:
        """Maestro's fairness: households with messages take turns, a bounded batch each, within their
        rate limit. A turn costs the same however many (idle) households are connected."""
        loop = asyncio.get_running_loop()
        while True:
            await self.switch_ready.wait()
            if not self._rotation:
                self._work.clear()
                await self._work.wait()
                continue
            # Turns until the rotation is empty or the slice of time is used up; then the turns'
            # writes go out together and replies and new messages come in.
            until = loop.time() + _SERVE_SLICE
            while (name := self._rotation.next()) is not None:
                self._turn(name, loop)
                if loop.time() >= until:
                    break
            writer = self.switch_writer
            if writer is not None and writer.transport.get_write_buffer_size() > 1 << 20:
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
            await asyncio.sleep(0)

    def _turn(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        session = self.sessions.get(name)
        connection = session.connection if session is not None else None
        if session is None or connection is None or connection.closed or not connection.inbox:
            return
        allowed = self._rotation.allowance(len(connection.inbox), session.bucket.available())
        if allowed == 0:
            session.counters.throttled += 1
            loop.call_later(session.bucket.seconds_until_available(), self._wake, session)
            return
        session.bucket.take(allowed)
        for _ in range(allowed):
            self._serve(session, connection.inbox.popleft())
        if len(connection.inbox) < self.config.inbox // 2:
            connection.room.set()
        if connection.inbox:
            self._rotation.wake(name)

    def _serve(self, session: HouseholdSession, frame: bytes) -> None:
        counters = session.counters
        counters.messages_in += 1
        try:
            # The router's usual flow-mods, checked and translated byte by byte (fastpath.py); None
            # for anything else, which os-ken's path decides.
            fast = fastpath.flow_mod(session.slice, frame)
            if fast is not None:
                xid, command, rule_key, _ = fast
                counters.flow_mods += 1
                counters.fast_path += 1
                self._flow_mod(session, xid, command, rule_key, frame, fast.frame)
                counters.relayed += 1
                return
            msg = codec.decode_request(frame)
            self._handle(session, msg, frame)
        except codec.Malformed as exc:
            counters.malformed += 1
            self._error(session, exc.err_type, exc.err_code, frame)
        except policy.Refused as exc:
            counters.refused += 1
            LOG.info("%s: refused %s", session.household.name, exc)
            self._error(session, exc.err_type, exc.err_code, frame)
        except Exception:
            # A bug must cost only this message, never the slicer or another household.
            LOG.exception("%s: internal error on a message", session.household.name)
            counters.malformed += 1
            self._error(session, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_EPERM, frame)

    @staticmethod
    def _error(session: HouseholdSession, err_type: int, err_code: int, frame: bytes) -> None:
        """Answer the household's message with an error."""
        session.send(codec.error(err_type, err_code, frame, codec.header(frame)[3]))

    def _handle(self, session: HouseholdSession, msg: Any, frame: bytes) -> None:
        kind = admission.request(msg)
        handler = self._handlers.get(kind)
        if handler is None:  # a kind admission offers that the relay does not know
            raise policy.Refused(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE, f"{kind} is not offered to slices")
        handler(session, kind, msg, frame)

    def _relay_flow_mod(self, session: HouseholdSession, kind: str, msg: Any, frame: bytes) -> None:
        session.counters.flow_mods += 1
        translated = session.slice.requests.flow_mod(msg)
        key = policy.rule_key(translated.table_id, translated.priority, translated.match)
        self._flow_mod(session, msg.xid, msg.command, key, frame, functools.partial(codec.encode, translated))
        session.counters.relayed += 1

    def _relay_mods(self, session: HouseholdSession, kind: str, msg: Any, frame: bytes) -> None:
        for mod in _RELAYED_MODS[kind](session.slice.requests, msg):
            self._relay(mod, self._pending(session, msg.xid, kind, frame[:64]))
        session.counters.relayed += 1

    def _relay_statistics(self, session: HouseholdSession, kind: str, msg: Any, frame: bytes) -> None:
        request = _RELAYED_STATISTICS[kind].request(session.slice.requests, msg)
        self._relay(request, self._pending(session, msg.xid, kind, frame[:64]))

    def _pending(
        self, session: HouseholdSession, xid: int, kind: str, head: bytes, rule_key: tuple | None = None
    ) -> Pending:
        return Pending(session, session.connection, xid, kind, head, rule_key)

    def _flow_mod(
        self,
        session: HouseholdSession,
        xid: int,
        command: int,
        key: tuple,
        frame: bytes,
        translation: Callable[[int], bytes],
    ) -> None:
        """Relay the household's flow-mod `frame` (its `xid`, `command`), checked and translated by
        the policy into the rule `key` and `translation(slicer's xid)`, if its quota allows; book it."""
        book = session.book
        admission.admit_rule(book, key, command, session.household.flow_quota)
        is_add = command == ofp.OFPFC_ADD
        pending = Pending(session, session.connection, xid, "flow_mod", frame[:64], key if is_add else None)
        encoded = translation(self._remember(pending))
        self._to_switch(encoded)
        if is_add:
            book.add(key, encoded)
        elif command == ofp.OFPFC_DELETE_STRICT:
            book.remove(key)
        elif command == ofp.OFPFC_MODIFY_STRICT:
            book.modify_strict(key, encoded)
        else:
            book.changed_widely()
            asyncio.get_running_loop().create_task(self._refresh_book(session))

    def _relay_barrier(self, session: HouseholdSession, kind: str, msg: Any, frame: bytes) -> None:
        """Relayed, so that the switch has done all that came before it; its reply is the answer."""
        pending = self._pending(session, msg.xid, kind, codec.renumbered(_BARRIER_REQUEST, msg.xid))
        self._to_switch(codec.renumbered(_BARRIER_REQUEST, self._remember(pending)))

    def _answer(self, session: HouseholdSession, kind: str, msg: Any, frame: bytes) -> None:
        """Messages the slicer answers itself, from the household's view (or takes without effect)."""
        switch = answers.Switch(self.switch_dpid, self.ports, float(self.config.queues.get("link_mbit", 1000)))
        for answer in answers.ANSWERS[kind](session, msg, switch):
            session.send(answer)


def _log_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        LOG.critical("slicer task %s died", task.get_name(), exc_info=task.exception())


def _flow_mod_from_stats(stats: Any) -> bytes:
    """An ADD that recreates a flow entry the switch reported."""
    return codec.encode(
        parser.OFPFlowMod(
            codec.CODEC,
            cookie=stats.cookie,
            table_id=stats.table_id,
            priority=stats.priority,
            idle_timeout=stats.idle_timeout,
            hard_timeout=stats.hard_timeout,
            flags=stats.flags,
            match=stats.match,
            instructions=stats.instructions,
        ),
        0,
    )
