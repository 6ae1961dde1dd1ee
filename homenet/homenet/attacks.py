"""Messages a hostile device sends, for the tests and benchmarks that play one."""

from __future__ import annotations

import struct


def pointer_chain(size=65000, qr=False):
    """A message whose records' names are each a compression pointer to the previous one's:
    dnslib alone needs ~18 s for 64 KB of it."""
    body = bytearray(struct.pack("!HHHHHH", 7, 0x8180 if qr else 0x0100, 1, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01")
    count, previous = 0, 12
    while len(body) + 16 < size:
        here = len(body)
        body += struct.pack("!HHHIH", 0xC000 | previous, 1, 1, 60, 4) + bytes(4)
        previous, count = here, count + 1
    struct.pack_into("!H", body, 6, count)
    return bytes(body)


def raw_query(name: str) -> bytes:
    """A query for name, however long (dnslib refuses to pack names over 253 characters)."""
    labels = b"".join(bytes([len(label)]) + label.encode() for label in name.split("."))
    return struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + labels + b"\x00\x00\x01\x00\x01"
