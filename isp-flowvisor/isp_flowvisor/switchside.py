"""Encoders for the messages a switch sends its controller.

The slicer plays the switch to each household. os-ken 4.2.2 decodes these messages but cannot
encode their bodies (its reply classes serialise a bare header), so they are composed here from
os-ken's own pieces: the layouts in `ofproto_v1_3` (OFP_*_PACK_STR), `msg_pack_into`, and the
serialisers of matches, instructions and ports' fields. No layout is written out by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from os_ken.lib import addrconv
from os_ken.lib.pack_utils import msg_pack_into
from os_ken.ofproto import ofproto_common
from os_ken.ofproto import ofproto_v1_3 as ofp

from .codec import HEADER_SIZE, VERSION

# Room left for a multipart body after the headers, so every part stays one OpenFlow message.
_MULTIPART_BODY_LIMIT = 0xFFFF - HEADER_SIZE - ofp.OFP_MULTIPART_REPLY_SIZE


def _message(msg_type: int, xid: int, body: bytes | bytearray) -> bytes:
    frame = bytearray()
    msg_pack_into(ofproto_common.OFP_HEADER_PACK_STR, frame, 0, VERSION, msg_type, HEADER_SIZE + len(body), xid)
    return bytes(frame + body)


def _pack(layout: str, *values: Any) -> bytearray:
    buf = bytearray()
    msg_pack_into(layout, buf, 0, *values)
    return buf


def _match(match: Any) -> bytearray:
    buf = bytearray()
    match.serialize(buf, 0)
    return buf


def features_reply(xid: int, datapath_id: int, n_tables: int, capabilities: int) -> bytes:
    body = _pack(ofp.OFP_SWITCH_FEATURES_PACK_STR, datapath_id, 0, n_tables, 0, capabilities, 0)
    return _message(ofp.OFPT_FEATURES_REPLY, xid, body)


def get_config_reply(xid: int, flags: int, miss_send_len: int) -> bytes:
    return _message(ofp.OFPT_GET_CONFIG_REPLY, xid, _pack(ofp.OFP_SWITCH_CONFIG_PACK_STR, flags, miss_send_len))


def get_async_reply(xid: int, packet_in: int, port_status: int, flow_removed: int) -> bytes:
    """The asynchronous messages a controller gets (the same masks for the master and slave role)."""
    body = _pack(
        ofp.OFP_ASYNC_CONFIG_PACK_STR, packet_in, packet_in, port_status, port_status, flow_removed, flow_removed
    )
    return _message(ofp.OFPT_GET_ASYNC_REPLY, xid, body)


def packet_in(xid: int, msg: Any) -> bytes:
    """PACKET_IN from an os-ken OFPPacketIn-shaped object (buffer_id, total_len, reason, table_id,
    cookie, match, data)."""
    body = _pack(ofp.OFP_PACKET_IN_PACK_STR, msg.buffer_id, msg.total_len, msg.reason, msg.table_id, msg.cookie)
    body += _match(msg.match) + bytes(2) + (msg.data or b"")
    return _message(ofp.OFPT_PACKET_IN, xid, body)


def flow_removed(xid: int, msg: Any) -> bytes:
    body = _pack(
        ofp.OFP_FLOW_REMOVED_PACK_STR0,
        msg.cookie,
        msg.priority,
        msg.reason,
        msg.table_id,
        msg.duration_sec,
        msg.duration_nsec,
        msg.idle_timeout,
        msg.hard_timeout,
        msg.packet_count,
        msg.byte_count,
    )
    return _message(ofp.OFPT_FLOW_REMOVED, xid, body + _match(msg.match))


def _port(port: Any) -> bytearray:
    return _pack(
        ofp.OFP_PORT_PACK_STR,
        port.port_no,
        addrconv.mac.text_to_bin(port.hw_addr),
        port.name if isinstance(port.name, bytes) else port.name.encode(),
        port.config,
        port.state,
        port.curr,
        port.advertised,
        port.supported,
        port.peer,
        port.curr_speed,
        port.max_speed,
    )


def port_status(xid: int, reason: int, port: Any) -> bytes:
    return _message(ofp.OFPT_PORT_STATUS, xid, _pack("!B7x", reason) + _port(port))


def queue_get_config_reply(xid: int, port: int, min_rates: dict[int, int]) -> bytes:
    """Queues with their minimum rate in tenths of a percent of the port's rate."""
    body = _pack(ofp.OFP_QUEUE_GET_CONFIG_REPLY_PACK_STR, port)
    for queue_id, min_rate in sorted(min_rates.items()):
        prop = _pack(ofp.OFP_QUEUE_PROP_HEADER_PACK_STR, ofp.OFPQT_MIN_RATE, ofp.OFP_QUEUE_PROP_MIN_RATE_SIZE)
        prop += _pack(ofp.OFP_QUEUE_PROP_MIN_RATE_PACK_STR, min_rate)
        body += _pack(ofp.OFP_PACKET_QUEUE_PACK_STR, queue_id, port, ofp.OFP_PACKET_QUEUE_SIZE + len(prop)) + prop
    return _message(ofp.OFPT_QUEUE_GET_CONFIG_REPLY, xid, body)


def multipart_reply(xid: int, mp_type: int, entries: Iterable[bytes | bytearray]) -> list[bytes]:
    """One reply, split into parts flagged REPLY_MORE where the entries exceed one message."""
    parts: list[bytearray] = []
    body = bytearray()
    for entry in entries:
        if body and len(body) + len(entry) > _MULTIPART_BODY_LIMIT:
            parts.append(body)
            body = bytearray()
        body += entry
    parts.append(body)
    return [
        _message(
            ofp.OFPT_MULTIPART_REPLY,
            xid,
            _pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, mp_type, ofp.OFPMPF_REPLY_MORE if i < len(parts) - 1 else 0) + part,
        )
        for i, part in enumerate(parts)
    ]


def desc_entry(manufacturer: str, hardware: str, software: str, serial: str, datapath: str) -> bytearray:
    return _pack(
        ofp.OFP_DESC_PACK_STR,
        manufacturer.encode(),
        hardware.encode(),
        software.encode(),
        serial.encode(),
        datapath.encode(),
    )


def flow_stats_entry(stats: Any) -> bytearray:
    tail = _match(stats.match)
    for instruction in stats.instructions:
        start = len(tail)
        instruction.serialize(tail, start)
    length = ofp.OFP_FLOW_STATS_0_SIZE + len(tail)
    return (
        _pack(
            ofp.OFP_FLOW_STATS_0_PACK_STR,
            length,
            stats.table_id,
            stats.duration_sec,
            stats.duration_nsec,
            stats.priority,
            stats.idle_timeout,
            stats.hard_timeout,
            stats.flags,
            stats.cookie,
            stats.packet_count,
            stats.byte_count,
        )
        + tail
    )


def aggregate_entry(packet_count: int, byte_count: int, flow_count: int) -> bytearray:
    return _pack(ofp.OFP_AGGREGATE_STATS_REPLY_PACK_STR, packet_count, byte_count, flow_count)


def port_desc_entries(ports: Iterable[Any]) -> Iterator[bytearray]:
    return (_port(port) for port in ports)


def port_stats_entry(stats: Any) -> bytearray:
    return _pack(ofp.OFP_PORT_STATS_PACK_STR, *stats)


def queue_stats_entry(stats: Any) -> bytearray:
    return _pack(ofp.OFP_QUEUE_STATS_PACK_STR, *stats)


def table_stats_entry(table_id: int, active_count: int, lookup_count: int, matched_count: int) -> bytearray:
    return _pack(ofp.OFP_TABLE_STATS_PACK_STR, table_id, active_count, lookup_count, matched_count)


def table_features_entry(features: Any) -> bytearray:
    """One table's features from an os-ken OFPTableFeaturesStats (its own serialiser, name as bytes)."""
    name = features.name.encode() if isinstance(features.name, str) else features.name
    packed: bytearray = type(features)(
        features.table_id,
        name,
        features.metadata_match,
        features.metadata_write,
        features.config,
        features.max_entries,
        features.properties,
    ).serialize()
    return packed


def group_features_entry(types: int, capabilities: int, max_groups: list[int], actions: list[int]) -> bytearray:
    return _pack(ofp.OFP_GROUP_FEATURES_PACK_STR, types, capabilities, *max_groups, *actions)


def meter_features_entry(
    max_meter: int, band_types: int, capabilities: int, max_bands: int, max_color: int
) -> bytearray:
    return _pack(ofp.OFP_METER_FEATURES_PACK_STR, max_meter, band_types, capabilities, max_bands, max_color)


def group_stats_entry(stats: Any) -> bytearray:
    """OFPGroupStats-shaped (group_id, ref_count, counts, duration, bucket_stats)."""
    counters = b"".join(
        _pack(ofp.OFP_BUCKET_COUNTER_PACK_STR, b.packet_count, b.byte_count) for b in stats.bucket_stats
    )
    length = ofp.OFP_GROUP_STATS_SIZE + len(counters)
    head = _pack(
        ofp.OFP_GROUP_STATS_PACK_STR,
        length,
        stats.group_id,
        stats.ref_count,
        stats.packet_count,
        stats.byte_count,
        stats.duration_sec,
        stats.duration_nsec,
    )
    return head + counters


def group_desc_entry(group_type: int, group_id: int, buckets: Iterable[Any]) -> bytearray:
    """A group's description; its buckets serialise themselves (os-ken's OFPBucket)."""
    tail = bytearray()
    for bucket in buckets:
        bucket.serialize(tail, len(tail))
    return (
        _pack(ofp.OFP_GROUP_DESC_STATS_PACK_STR, ofp.OFP_GROUP_DESC_STATS_SIZE + len(tail), group_type, group_id) + tail
    )


def meter_stats_entry(stats: Any) -> bytearray:
    bands = b"".join(
        _pack(ofp.OFP_METER_BAND_STATS_PACK_STR, b.packet_band_count, b.byte_band_count) for b in stats.band_stats
    )
    head = _pack(
        ofp.OFP_METER_STATS_PACK_STR,
        stats.meter_id,
        ofp.OFP_METER_STATS_SIZE + len(bands),
        stats.flow_count,
        stats.packet_in_count,
        stats.byte_in_count,
        stats.duration_sec,
        stats.duration_nsec,
    )
    return head + bands


def meter_config_entry(flags: int, meter_id: int, bands: Iterable[Any]) -> bytearray:
    tail = bytearray()
    for band in bands:
        band.serialize(tail, len(tail))
    return _pack(ofp.OFP_METER_CONFIG_PACK_STR, ofp.OFP_METER_CONFIG_SIZE + len(tail), flags, meter_id) + tail
