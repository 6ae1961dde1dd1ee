//! The UDP framing (PROTOCOL.md): a 20-byte header in network byte order, then payload.

pub const MAGIC: u16 = 0x4857; // "HW"
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 20;
/// Keeps every datagram at 1372 bytes, under a 1400-byte budget that fits PPPoE and
/// VPN paths without IP fragmentation.
pub const MAX_PAYLOAD: usize = 1352;

pub const FLAG_RETRANSMIT: u16 = 0x0001;
/// On a Pong: the server holds no state for this request (it restarted or expired it).
pub const FLAG_UNKNOWN: u16 = 0x0002;
const KNOWN_FLAGS: u16 = FLAG_RETRANSMIT | FLAG_UNKNOWN;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Request = 1,
    RequestAck = 2,
    Response = 3,
    ResponseAck = 4,
    Notify = 5,
    NotifyAck = 6,
    Ping = 7,
    Pong = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Request,
            2 => Kind::RequestAck,
            3 => Kind::Response,
            4 => Kind::ResponseAck,
            5 => Kind::Notify,
            6 => Kind::NotifyAck,
            7 => Kind::Ping,
            8 => Kind::Pong,
            _ => return None,
        })
    }

    pub fn carries_payload(self) -> bool {
        matches!(self, Kind::Request | Kind::Response | Kind::Notify)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Request => "REQUEST",
            Kind::RequestAck => "REQUEST_ACK",
            Kind::Response => "RESPONSE",
            Kind::ResponseAck => "RESPONSE_ACK",
            Kind::Notify => "NOTIFY",
            Kind::NotifyAck => "NOTIFY_ACK",
            Kind::Ping => "PING",
            Kind::Pong => "PONG",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub conn: u32,
    pub seq: u32,
    pub frag: u16,
    pub count: u16,
    pub flags: u16,
}

impl Header {
    pub fn new(kind: Kind, conn: u32, seq: u32, frag: u16, count: u16) -> Header {
        Header { kind, conn, seq, frag, count, flags: 0 }
    }
}

pub fn encode(h: &Header, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
    b.extend_from_slice(&MAGIC.to_be_bytes());
    b.push(VERSION);
    b.push(h.kind as u8);
    b.extend_from_slice(&h.conn.to_be_bytes());
    b.extend_from_slice(&h.seq.to_be_bytes());
    b.extend_from_slice(&h.frag.to_be_bytes());
    b.extend_from_slice(&h.count.to_be_bytes());
    b.extend_from_slice(&h.flags.to_be_bytes());
    b.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    b.extend_from_slice(payload);
    b
}

pub fn decode(b: &[u8]) -> Result<(Header, &[u8]), &'static str> {
    if b.len() < HEADER_LEN {
        return Err("short datagram");
    }
    let u16at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let u32at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if u16at(0) != MAGIC {
        return Err("bad magic");
    }
    if b[2] != VERSION {
        return Err("unsupported version");
    }
    let kind = Kind::from_u8(b[3]).ok_or("unknown kind")?;
    let h = Header { kind, conn: u32at(4), seq: u32at(8), frag: u16at(12), count: u16at(14), flags: u16at(16) };
    let len = u16at(18) as usize;
    let payload = &b[HEADER_LEN..];
    if len != payload.len() || len > MAX_PAYLOAD {
        return Err("length mismatch");
    }
    if h.count == 0 || h.frag >= h.count {
        return Err("bad fragment numbering");
    }
    if h.flags & !KNOWN_FLAGS != 0 {
        return Err("unknown flags");
    }
    if !kind.carries_payload() && len != 0 {
        return Err("unexpected payload");
    }
    Ok((h, payload))
}

/// Number of fragments for a message; an empty message is one empty fragment.
pub fn frag_count(len: usize) -> Option<u16> {
    let n = len.div_ceil(MAX_PAYLOAD).max(1);
    u16::try_from(n).ok()
}

pub fn fragment(msg: &[u8], i: u16) -> &[u8] {
    let start = (i as usize * MAX_PAYLOAD).min(msg.len());
    let end = (start + MAX_PAYLOAD).min(msg.len());
    &msg[start..end]
}

/// Serial-number comparison (RFC 1982), so sequence numbers may wrap.
pub fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects() {
        let h = Header { kind: Kind::Response, conn: 0xdeadbeef, seq: 7, frag: 1, count: 3, flags: FLAG_RETRANSMIT };
        let b = encode(&h, b"abc");
        assert_eq!(b.len(), 23);
        assert_eq!(&b[..4], &[0x48, 0x57, 1, 3]);
        assert_eq!(decode(&b).unwrap(), (h, &b"abc"[..]));
        let mut bad = b.clone();
        bad[0] = 0;
        assert!(decode(&bad).is_err());
        assert!(decode(&b[..19]).is_err());
        assert!(decode(&b[..22]).is_err());
        let ack = encode(&Header::new(Kind::RequestAck, 1, 1, 0, 1), b"x");
        assert_eq!(decode(&ack).unwrap_err(), "unexpected payload");
        let bad_frag = encode(&Header::new(Kind::Request, 1, 1, 2, 2), b"");
        assert!(decode(&bad_frag).is_err());
    }

    /// Random and mutated datagrams: decoding never panics, and whatever decodes is exactly
    /// what encoding its header and payload gives back (so no malformed datagram is accepted).
    #[test]
    fn decoding_accepts_only_what_encodes_back() {
        let valid = encode(&Header { kind: Kind::Request, conn: 9, seq: 3, frag: 1, count: 4, flags: 0 }, b"select 1");
        let mut state: u64 = 0x9E3779B97F4A7C15;
        let mut rnd = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut accepted = 0;
        for _ in 0..100_000 {
            let mut d = valid.clone();
            if rnd(4) == 0 {
                d = (0..rnd(40)).map(|_| rnd(256) as u8).collect();
            } else {
                for _ in 0..1 + rnd(3) {
                    let i = rnd(d.len());
                    d[i] ^= 1 << rnd(8);
                }
            }
            if let Ok((h, p)) = decode(&d) {
                assert_eq!(encode(&h, p), d);
                accepted += 1;
            }
        }
        assert!(accepted > 1000, "the mutations should keep some datagrams valid ({accepted})");
    }

    #[test]
    fn fragments_cover_message() {
        assert_eq!(frag_count(0), Some(1));
        assert_eq!(frag_count(MAX_PAYLOAD), Some(1));
        assert_eq!(frag_count(MAX_PAYLOAD + 1), Some(2));
        assert_eq!(frag_count(MAX_PAYLOAD * 65536), None);
        let msg: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let n = frag_count(msg.len()).unwrap();
        let joined: Vec<u8> = (0..n).flat_map(|i| fragment(&msg, i).to_vec()).collect();
        assert_eq!(joined, msg);
        assert!(newer(1, u32::MAX));
        assert!(!newer(5, 5));
        assert!(!newer(4, 5));
    }
}
