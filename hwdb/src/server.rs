//! The UDP RPC server (PROTOCOL.md).
//!
//! One receive loop per listening socket routes datagrams to a task per (peer, connection
//! id). That task runs the stop-and-wait exchange as straight-line async code: reassemble
//! the request, execute it on the blocking pool, send the response fragment by fragment,
//! and keep the last response to answer retransmitted requests without re-executing them.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::time::{timeout_at, Instant};

use crate::access::caller_for;
use crate::db::{encode_notification, encode_reply, Db, SubSink, SubscriptionHub};
use crate::proto::{self, Header, Kind, FLAG_RETRANSMIT, FLAG_UNKNOWN};
use crate::value::{ColType, Value};

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Vec<SocketAddr>,
    /// Test only: peers with these addresses get LAN rights even on loopback.
    pub treat_as_lan: Vec<IpAddr>,
    /// First retransmission timeout; doubles per retry up to `MAX_RTO`.
    pub rto: Duration,
}

const MAX_RTO: Duration = Duration::from_secs(2);
const MAX_TRIES: u32 = 10;
/// A connection with no traffic for this long is forgotten (with its cached response).
const IDLE: Duration = Duration::from_secs(30);
const MAX_CONNS_PER_SOCKET: usize = 1024;
const CONN_QUEUE: usize = 64;
/// Rows coalesced into one NOTIFY message at most.
const NOTIFY_BATCH_ROWS: usize = 5_000;

struct Packet {
    h: Header,
    payload: Vec<u8>,
}

/// Bind every listening socket and serve until the process is stopped.
pub async fn serve(db: Arc<Db>, cfg: Config) -> io::Result<()> {
    let mut socks = Vec::new();
    for addr in &cfg.listen {
        let s = UdpSocket::bind(addr).await.map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        socks.push(Arc::new(s));
    }
    // Dual-stack when the host has IPv6, so subscribers may be on either family.
    let notify_sock = match UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).await {
        Ok(s) => s,
        Err(_) => UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).await?,
    };
    let notify_sock = Arc::new(notify_sock);
    let hub = Arc::new(NetHub {
        sock: notify_sock.clone(),
        handle: Handle::current(),
        acks: Arc::new(Mutex::new(HashMap::new())),
        db: Arc::downgrade(&db),
        rto: cfg.rto,
    });
    db.set_hub(hub.clone());
    tokio::spawn(notify_ack_loop(notify_sock, hub.acks.clone()));
    for s in &socks {
        eprintln!("hwdb: listening on udp {}", s.local_addr()?);
    }
    let mut loops = Vec::new();
    for s in socks {
        loops.push(tokio::spawn(receive_loop(s, db.clone(), cfg.clone())));
    }
    for l in loops {
        l.await.map_err(io::Error::other)??;
    }
    Ok(())
}

async fn receive_loop(sock: Arc<UdpSocket>, db: Arc<Db>, cfg: Config) -> io::Result<()> {
    let mut conns: HashMap<(SocketAddr, u32), mpsc::Sender<Packet>> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut last_sweep = Instant::now();
    loop {
        let (n, peer) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            // ICMP errors from earlier sends surface here on some systems; they concern
            // one peer, never the socket.
            Err(_) => continue,
        };
        if last_sweep.elapsed() > Duration::from_secs(5) {
            conns.retain(|_, tx| !tx.is_closed());
            last_sweep = Instant::now();
        }
        let Ok((h, payload)) = proto::decode(&buf[..n]) else { continue };
        if !matches!(h.kind, Kind::Request | Kind::ResponseAck | Kind::Ping) {
            continue;
        }
        let key = (peer, h.conn);
        let mut pkt = Packet { h, payload: payload.to_vec() };
        if let Some(tx) = conns.get(&key) {
            match tx.try_send(pkt) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => continue,
                Err(mpsc::error::TrySendError::Closed(p)) => pkt = p,
            }
        }
        if h.kind == Kind::ResponseAck {
            continue;
        }
        if conns.len() >= MAX_CONNS_PER_SOCKET {
            conns.retain(|_, tx| !tx.is_closed());
            if conns.len() >= MAX_CONNS_PER_SOCKET {
                continue;
            }
        }
        let (tx, rx) = mpsc::channel(CONN_QUEUE);
        let _ = tx.try_send(pkt);
        conns.insert(key, tx);
        let conn = Conn {
            sock: sock.clone(),
            peer,
            id: h.conn,
            rx,
            pending: None,
            last: None,
            db: db.clone(),
            rto: cfg.rto,
            treat_as_lan: cfg.treat_as_lan.clone(),
        };
        tokio::spawn(conn.run());
    }
}

struct Conn {
    sock: Arc<UdpSocket>,
    peer: SocketAddr,
    id: u32,
    rx: mpsc::Receiver<Packet>,
    /// A packet read while busy that starts the next exchange.
    pending: Option<Packet>,
    /// The last completed request and its response, for duplicate suppression.
    last: Option<(u32, Arc<Vec<u8>>)>,
    db: Arc<Db>,
    rto: Duration,
    treat_as_lan: Vec<IpAddr>,
}

enum Next {
    Packet(Packet),
    Timeout,
    Closed,
}

impl Conn {
    async fn next(&mut self, deadline: Instant) -> Next {
        if let Some(p) = self.pending.take() {
            return Next::Packet(p);
        }
        match timeout_at(deadline, self.rx.recv()).await {
            Ok(Some(p)) => Next::Packet(p),
            Ok(None) => Next::Closed,
            Err(_) => Next::Timeout,
        }
    }

    async fn send(&self, kind: Kind, seq: u32, frag: u16, count: u16, flags: u16, payload: &[u8]) {
        let h = Header { kind, conn: self.id, seq, frag, count, flags };
        // A failed send is indistinguishable from a lost datagram; retransmission covers both.
        let _ = self.sock.send_to(&proto::encode(&h, payload), self.peer).await;
    }

    async fn run(mut self) {
        loop {
            let p = match self.next(Instant::now() + IDLE).await {
                Next::Packet(p) => p,
                Next::Timeout | Next::Closed => return,
            };
            match p.h.kind {
                Kind::Request => self.on_request(p).await,
                Kind::Ping => {
                    let known = matches!(&self.last, Some((s, _)) if *s == p.h.seq);
                    self.send(Kind::Pong, p.h.seq, 0, 1, if known { 0 } else { FLAG_UNKNOWN }, &[]).await;
                }
                _ => {}
            }
        }
    }

    async fn on_request(&mut self, p: Packet) {
        let seq = p.h.seq;
        if let Some((last_seq, resp)) = &self.last {
            if seq == *last_seq {
                let resp = resp.clone();
                return self.send_response(seq, resp).await;
            }
            if !proto::newer(seq, *last_seq) {
                return;
            }
        }
        if p.h.frag != 0 {
            // The start of this request went to a connection state we no longer have.
            return;
        }
        let count = p.h.count;
        if count as usize * proto::MAX_PAYLOAD > self.db.limits.max_query_bytes + proto::MAX_PAYLOAD {
            let msg = format!("request of {count} fragments is larger than the limit of {} bytes", self.db.limits.max_query_bytes);
            return self.finish(seq, Arc::new(encode_reply(&Err(msg)))).await;
        }
        let mut buf = p.payload;
        if count > 1 {
            self.send(Kind::RequestAck, seq, 0, count, 0, &[]).await;
        }
        let mut next = 1u16;
        while next < count {
            let q = match self.next(Instant::now() + IDLE).await {
                Next::Packet(q) => q,
                _ => return,
            };
            match q.h.kind {
                Kind::Request if q.h.seq == seq && q.h.count == count => {
                    if q.h.frag == next {
                        buf.extend_from_slice(&q.payload);
                        next += 1;
                        if next < count {
                            self.send(Kind::RequestAck, seq, q.h.frag, count, 0, &[]).await;
                        }
                    } else if q.h.frag < next {
                        self.send(Kind::RequestAck, seq, q.h.frag, count, 0, &[]).await;
                    }
                }
                Kind::Request if proto::newer(q.h.seq, seq) => {
                    self.pending = Some(q);
                    return;
                }
                Kind::Ping if q.h.seq == seq => self.send(Kind::Pong, seq, 0, 1, 0, &[]).await,
                _ => {}
            }
        }
        let caller = caller_for(self.peer.ip(), &self.treat_as_lan);
        let db = self.db.clone();
        let work = tokio::task::spawn_blocking(move || match String::from_utf8(buf) {
            Ok(text) => db.execute_json(&text, &caller),
            Err(_) => encode_reply(&Err("request is not valid UTF-8".into())),
        });
        tokio::pin!(work);
        let resp = loop {
            tokio::select! {
                r = &mut work => break r.unwrap_or_else(|_| encode_reply(&Err("internal error while executing the query".into()))),
                q = self.rx.recv() => match q {
                    // The client retransmitted the last fragment: it is received, we are working.
                    Some(q) if q.h.kind == Kind::Request && q.h.seq == seq => {
                        self.send(Kind::RequestAck, seq, count - 1, count, 0, &[]).await
                    }
                    Some(q) if q.h.kind == Kind::Ping && q.h.seq == seq => self.send(Kind::Pong, seq, 0, 1, 0, &[]).await,
                    Some(q) if q.h.kind == Kind::Request && proto::newer(q.h.seq, seq) => self.pending = Some(q),
                    Some(_) => {}
                    None => return,
                },
            }
        };
        self.finish(seq, Arc::new(resp)).await;
    }

    async fn finish(&mut self, seq: u32, resp: Arc<Vec<u8>>) {
        self.last = Some((seq, resp.clone()));
        if self.pending.is_none() {
            self.send_response(seq, resp).await;
        }
    }

    async fn send_response(&mut self, seq: u32, resp: Arc<Vec<u8>>) {
        let count = proto::frag_count(resp.len()).unwrap_or(1);
        for i in 0..count {
            let mut rto = self.rto;
            let mut flags = 0;
            let mut tries = 0;
            'retry: loop {
                self.send(Kind::Response, seq, i, count, flags, proto::fragment(&resp, i)).await;
                let deadline = Instant::now() + rto;
                loop {
                    match self.next(deadline).await {
                        Next::Closed => return,
                        Next::Timeout => break,
                        Next::Packet(q) => match q.h.kind {
                            Kind::ResponseAck if q.h.seq == seq && q.h.frag == i => break 'retry,
                            // A retransmitted request means our fragment was lost: resend now.
                            Kind::Request if q.h.seq == seq => {
                                flags = FLAG_RETRANSMIT;
                                continue 'retry;
                            }
                            // The client moved on, so it had everything it needed.
                            Kind::Request if proto::newer(q.h.seq, seq) => {
                                self.pending = Some(q);
                                return;
                            }
                            Kind::Ping if q.h.seq == seq => self.send(Kind::Pong, seq, 0, 1, 0, &[]).await,
                            _ => {}
                        },
                    }
                }
                tries += 1;
                if tries >= MAX_TRIES {
                    return;
                }
                rto = (rto * 2).min(MAX_RTO);
                flags = FLAG_RETRANSMIT;
            }
        }
    }
}

// ---------------------------------------------------------------- subscriptions

type AckMap = Arc<Mutex<HashMap<(SocketAddr, u32), mpsc::Sender<Header>>>>;

struct NetHub {
    sock: Arc<UdpSocket>,
    handle: Handle,
    acks: AckMap,
    db: Weak<Db>,
    rto: Duration,
}

fn v6(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) => SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port()),
        a => a,
    }
}

impl SubscriptionHub for NetHub {
    fn open(&self, id: u32, dest: SocketAddr, columns: Vec<(String, ColType)>) -> SubSink {
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let (atx, arx) = mpsc::channel(16);
        let dest = if self.sock.local_addr().is_ok_and(|a| a.is_ipv6()) { v6(dest) } else { dest };
        self.acks.lock().unwrap_or_else(|e| e.into_inner()).insert((dest, id), atx);
        let sender = Notifier {
            sock: self.sock.clone(),
            dest,
            id,
            columns,
            rx,
            acks: arx,
            pending: pending.clone(),
            rto: self.rto,
        };
        let (db, ackmap) = (self.db.clone(), self.acks.clone());
        self.handle.spawn(async move {
            sender.run().await;
            ackmap.lock().unwrap_or_else(|e| e.into_inner()).remove(&(dest, id));
            if let Some(db) = db.upgrade() {
                db.unsubscribe(id);
            }
        });
        SubSink { tx, pending }
    }
}

async fn notify_ack_loop(sock: Arc<UdpSocket>, acks: AckMap) {
    let mut buf = vec![0u8; 2048];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else { continue };
        let Ok((h, _)) = proto::decode(&buf[..n]) else { continue };
        if h.kind != Kind::NotifyAck {
            continue;
        }
        let tx = acks.lock().unwrap_or_else(|e| e.into_inner()).get(&(peer, h.conn)).cloned();
        if let Some(tx) = tx {
            let _ = tx.try_send(h);
        }
    }
}

struct Notifier {
    sock: Arc<UdpSocket>,
    dest: SocketAddr,
    id: u32,
    columns: Vec<(String, ColType)>,
    rx: mpsc::UnboundedReceiver<Vec<Vec<Value>>>,
    acks: mpsc::Receiver<Header>,
    pending: Arc<AtomicUsize>,
    rto: Duration,
}

impl Notifier {
    /// Deliver batches in order, each exactly once as far as the subscriber can tell
    /// (it drops repeated sequence numbers). Returns when unsubscribed or when the
    /// subscriber stops acknowledging.
    async fn run(mut self) {
        let mut seq = 0u32;
        while let Some(mut rows) = self.rx.recv().await {
            while rows.len() < NOTIFY_BATCH_ROWS {
                match self.rx.try_recv() {
                    Ok(more) => rows.extend(more),
                    Err(_) => break,
                }
            }
            self.pending.fetch_sub(rows.len(), Ordering::Relaxed);
            for chunk in rows.chunks(NOTIFY_BATCH_ROWS) {
                if !self.send_rows(&mut seq, chunk).await {
                    return;
                }
            }
        }
    }

    /// Send rows as one message, or as halves if they exceed the fragment limit.
    async fn send_rows(&mut self, seq: &mut u32, rows: &[Vec<Value>]) -> bool {
        let msg = encode_notification(self.id, &self.columns, rows);
        if proto::frag_count(msg.len()).is_none() && rows.len() > 1 {
            let (a, b) = rows.split_at(rows.len() / 2);
            return Box::pin(self.send_rows(seq, a)).await && Box::pin(self.send_rows(seq, b)).await;
        }
        *seq = seq.wrapping_add(1);
        self.deliver(*seq, &msg).await
    }

    async fn deliver(&mut self, seq: u32, msg: &[u8]) -> bool {
        let Some(count) = proto::frag_count(msg.len()) else { return true };
        for i in 0..count {
            let mut rto = self.rto;
            let mut flags = 0;
            let mut acked = false;
            for _ in 0..MAX_TRIES {
                let h = Header { kind: Kind::Notify, conn: self.id, seq, frag: i, count, flags };
                let _ = self.sock.send_to(&proto::encode(&h, proto::fragment(msg, i)), self.dest).await;
                let deadline = Instant::now() + rto;
                loop {
                    match timeout_at(deadline, self.acks.recv()).await {
                        Ok(Some(a)) if a.seq == seq && a.frag == i => {
                            acked = true;
                            break;
                        }
                        Ok(Some(_)) => continue,
                        Ok(None) | Err(_) => break,
                    }
                }
                if acked {
                    break;
                }
                rto = (rto * 2).min(MAX_RTO);
                flags = FLAG_RETRANSMIT;
            }
            if !acked {
                return false;
            }
        }
        true
    }
}
