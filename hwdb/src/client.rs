//! Blocking client and subscription listener (the CLI, the bench and the tests use them).

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use crate::proto::{self, Header, Kind, FLAG_RETRANSMIT, FLAG_UNKNOWN};

#[derive(Clone, Debug)]
pub struct Options {
    /// First retransmission timeout; doubles per retry up to `max_rto`.
    pub rto: Duration,
    pub max_rto: Duration,
    pub max_tries: u32,
    /// Upper bound on one whole request/response exchange.
    pub deadline: Duration,
    /// How often to ping a server that has acknowledged a request but not yet answered.
    pub ping_interval: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            rto: Duration::from_millis(100),
            max_rto: Duration::from_secs(2),
            max_tries: 8,
            deadline: Duration::from_secs(60),
            ping_interval: Duration::from_millis(500),
        }
    }
}

#[derive(Debug)]
pub enum ClientError {
    Io(io::Error),
    Timeout(String),
    Protocol(String),
    /// The server executed nothing, or refused: its message.
    Server(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Timeout(m) | ClientError::Protocol(m) | ClientError::Server(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(e)
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ColumnInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Reply {
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub subscription: Option<u32>,
    #[serde(default)]
    pub columns: Vec<ColumnInfo>,
    #[serde(default)]
    pub rows: Vec<Vec<serde_json::Value>>,
}

pub fn parse_reply(payload: &[u8]) -> Result<Reply, ClientError> {
    serde_json::from_slice(payload).map_err(|e| ClientError::Protocol(format!("malformed reply: {e}")))
}

fn random_u32() -> u32 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0) as u64;
    let mut x = t ^ ((std::process::id() as u64) << 32) ^ (&t as *const u64 as u64);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    (x ^ (x >> 31)) as u32
}

fn resolve(addr: &str) -> Result<SocketAddr, ClientError> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| ClientError::Io(io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {addr}"))))
}

pub struct Client {
    sock: UdpSocket,
    conn: u32,
    seq: u32,
    pub opts: Options,
}

enum Got {
    Packet(Header, Vec<u8>),
    Timeout,
}

impl Client {
    pub fn connect(server: &str) -> Result<Client, ClientError> {
        let addr = resolve(server)?;
        let local: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("literal address");
        Client::connect_from(addr, local)
    }

    /// Bind a chosen local address first (tests use it to speak as a LAN host).
    pub fn connect_from(server: SocketAddr, local: SocketAddr) -> Result<Client, ClientError> {
        let sock = UdpSocket::bind(local)?;
        sock.connect(server)?;
        Ok(Client { sock, conn: random_u32(), seq: random_u32() >> 1, opts: Options::default() })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    fn send(&self, kind: Kind, frag: u16, count: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        let h = Header { kind, conn: self.conn, seq: self.seq, frag, count, flags };
        match self.sock.send(&proto::encode(&h, payload)) {
            // ICMP "port unreachable" from an earlier datagram: same as a loss.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
            r => r.map(|_| ()),
        }
    }

    fn recv(&self, until: Instant, buf: &mut [u8]) -> Result<Got, ClientError> {
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(Got::Timeout);
            }
            self.sock.set_read_timeout(Some(until - now))?;
            match self.sock.recv(buf) {
                Ok(n) => {
                    if let Ok((h, p)) = proto::decode(&buf[..n]) {
                        if h.conn == self.conn && h.seq == self.seq {
                            return Ok(Got::Packet(h, p.to_vec()));
                        }
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Ok(Got::Timeout)
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    std::thread::sleep(Duration::from_millis(5).min(until.saturating_duration_since(Instant::now())));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Send one request and return the raw response payload (JSON, see PROTOCOL.md).
    pub fn request(&mut self, text: &str) -> Result<Vec<u8>, ClientError> {
        let msg = text.as_bytes();
        let count = proto::frag_count(msg.len())
            .ok_or_else(|| ClientError::Protocol(format!("request of {} bytes is too large", msg.len())))?;
        self.seq = self.seq.wrapping_add(1);
        let start = Instant::now();
        let end = start + self.opts.deadline;
        let mut buf = vec![0u8; 2048];
        let no_answer =
            |what: &str| ClientError::Timeout(format!("no answer from the server ({what}); is hwdb serve running?"));

        // Send fragments stop-and-wait; the response itself acknowledges the last one.
        let mut first_response: Option<(Header, Vec<u8>)> = None;
        let mut working = false;
        'frags: for i in 0..count {
            let mut rto = self.opts.rto;
            let mut flags = 0;
            let mut tries = 0;
            loop {
                self.send(Kind::Request, i, count, flags, proto::fragment(msg, i))?;
                let until = (Instant::now() + rto).min(end);
                loop {
                    match self.recv(until, &mut buf)? {
                        Got::Timeout => break,
                        Got::Packet(h, p) => match h.kind {
                            Kind::Response => {
                                first_response = Some((h, p));
                                break 'frags;
                            }
                            Kind::RequestAck if h.frag == i => {
                                if i + 1 == count {
                                    working = true;
                                    break 'frags;
                                }
                                continue 'frags;
                            }
                            _ => {}
                        },
                    }
                }
                tries += 1;
                if tries >= self.opts.max_tries || Instant::now() >= end {
                    return Err(no_answer("request not acknowledged"));
                }
                rto = (rto * 2).min(self.opts.max_rto);
                flags = FLAG_RETRANSMIT;
            }
        }

        // The server holds the whole request and is executing it: keep it alive with pings.
        if working && first_response.is_none() {
            let mut missed = 0;
            loop {
                let until = (Instant::now() + self.opts.ping_interval).min(end);
                match self.recv(until, &mut buf)? {
                    Got::Packet(h, p) if h.kind == Kind::Response => {
                        first_response = Some((h, p));
                        break;
                    }
                    Got::Packet(h, _) if h.kind == Kind::Pong => {
                        if h.flags & FLAG_UNKNOWN != 0 {
                            return Err(ClientError::Protocol("the server lost the request (did it restart?)".into()));
                        }
                        missed = 0;
                    }
                    Got::Packet(..) => {}
                    Got::Timeout => {
                        if Instant::now() >= end || missed >= self.opts.max_tries {
                            return Err(no_answer("no reply to pings"));
                        }
                        missed += 1;
                        self.send(Kind::Ping, 0, 1, 0, &[])?;
                    }
                }
            }
        }

        // Receive the response in order, acknowledging every fragment. The server
        // retransmits; a repeated fragment means our ack was lost, so ack it again.
        let (h0, p0) = first_response.expect("loop above exits only with a response");
        let rcount = h0.count;
        let mut out = Vec::new();
        let mut next = 0u16;
        let mut pkt = Some((h0, p0));
        loop {
            if let Some((h, p)) = pkt.take() {
                if h.kind == Kind::Response && h.count == rcount {
                    if h.frag == next {
                        out.extend_from_slice(&p);
                        self.send(Kind::ResponseAck, h.frag, rcount, 0, &[])?;
                        next += 1;
                        if next == rcount {
                            return Ok(out);
                        }
                    } else if h.frag < next {
                        self.send(Kind::ResponseAck, h.frag, rcount, 0, &[])?;
                    }
                }
            }
            match self.recv(end, &mut buf)? {
                Got::Packet(h, p) => pkt = Some((h, p)),
                Got::Timeout => return Err(no_answer("response incomplete")),
            }
        }
    }

    /// Run a statement; an error reply becomes `ClientError::Server` with the server's message.
    pub fn query(&mut self, text: &str) -> Result<Reply, ClientError> {
        let reply = parse_reply(&self.request(text)?)?;
        if reply.status != "ok" {
            return Err(ClientError::Server(reply.message.unwrap_or_else(|| "unknown error".into())));
        }
        Ok(reply)
    }
}

/// Receives NOTIFY messages for subscriptions on a local UDP port.
pub struct Subscriber {
    sock: UdpSocket,
    /// Per (sender, subscription): the last delivered sequence number.
    delivered: std::collections::HashMap<(SocketAddr, u32), u32>,
    partial: std::collections::HashMap<(SocketAddr, u32), (u32, u16, Vec<u8>)>,
}

impl Subscriber {
    pub fn bind(addr: &str) -> Result<Subscriber, ClientError> {
        Ok(Subscriber {
            sock: UdpSocket::bind(resolve(addr)?)?,
            delivered: Default::default(),
            partial: Default::default(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The next complete notification, or `None` once `timeout` passes without one.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Reply>, ClientError> {
        let end = Instant::now() + timeout;
        let mut buf = vec![0u8; 2048];
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            self.sock.set_read_timeout(Some(end - now))?;
            let (n, peer) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let Ok((h, p)) = proto::decode(&buf[..n]) else { continue };
            if h.kind != Kind::Notify {
                continue;
            }
            let ack = proto::encode(&Header { kind: Kind::NotifyAck, flags: 0, ..h }, &[]);
            let key = (peer, h.conn);
            if let Some(&last) = self.delivered.get(&key) {
                if !proto::newer(h.seq, last) {
                    self.sock.send_to(&ack, peer)?;
                    continue;
                }
            }
            let entry = self.partial.entry(key).or_insert((h.seq, 0, Vec::new()));
            if entry.0 != h.seq {
                *entry = (h.seq, 0, Vec::new());
            }
            if h.frag == entry.1 {
                entry.2.extend_from_slice(p);
                entry.1 += 1;
            } else if h.frag > entry.1 {
                continue;
            }
            self.sock.send_to(&ack, peer)?;
            if entry.1 == h.count {
                let (_, _, msg) = self.partial.remove(&key).unwrap_or_default();
                self.delivered.insert(key, h.seq);
                return parse_reply(&msg).map(Some);
            }
        }
    }
}
