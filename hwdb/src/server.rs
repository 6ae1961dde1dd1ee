//! The UDP RPC server (PROTOCOL.md).
//!
//! One receive loop per listening socket routes datagrams to a task per (peer, connection
//! id). That task runs the stop-and-wait exchange as straight-line async code: reassemble
//! the request, execute it on the blocking pool, send the response fragment by fragment,
//! and keep the last response to answer retransmitted requests without re-executing them.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout_at, Instant};
use tracing::{debug, info, warn};

use crate::access::{self, caller_for, Caller};
use crate::conns::{ConnTable, Owner, ReassemblyPools};
use crate::db::{encode_notification, encode_reply, Db, SubSink, SubscriptionHub};
use crate::proto::{self, Header, Kind, FLAG_RETRANSMIT, FLAG_UNKNOWN};
use crate::value::{ColType, Value};

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Vec<SocketAddr>,
    /// Sockets for LAN hosts (end-host agents), e.g. `0.0.0.0:987` with `lan_device` set.
    pub lan_listen: Vec<SocketAddr>,
    /// Bind the LAN sockets to this interface, so a wildcard LAN socket hears only the LAN (never the WAN).
    pub lan_device: Option<String>,
    /// Test only: peers with these addresses get LAN rights even on loopback.
    pub treat_as_lan: Vec<IpAddr>,
    /// First retransmission timeout; doubles per retry up to `MAX_RTO`.
    pub rto: Duration,
}

const MAX_RTO: Duration = Duration::from_secs(2);
const MAX_TRIES: u32 = 10;
/// A connection with no traffic for this long is forgotten (with its cached response).
const IDLE: Duration = Duration::from_secs(30);
const CONN_QUEUE: usize = 64;
/// Rows coalesced into one NOTIFY message at most.
const NOTIFY_BATCH_ROWS: usize = 5_000;
/// On shutdown, exchanges in progress get this long to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// Tells every task to stop, and learns when they all have (mini-redis's pattern: each task
/// holds a `done` sender; the last one dropped closes the channel).
#[derive(Clone)]
struct Shutdown {
    notify: Arc<watch::Sender<bool>>,
    done: mpsc::Sender<()>,
}

/// One task's view of a shutdown: `recv` returns once it should stop (at once if it already
/// should); `_done` is dropped with the task.
struct Stop {
    stop: watch::Receiver<bool>,
    _done: mpsc::Sender<()>,
}

impl Shutdown {
    fn subscribe(&self) -> Stop {
        Stop { stop: self.notify.subscribe(), _done: self.done.clone() }
    }
}

impl Stop {
    async fn recv(&mut self) {
        let _ = self.stop.wait_for(|&stop| stop).await;
    }
}

struct Packet {
    h: Header,
    payload: Vec<u8>,
}

/// Bind every listening socket and serve until `until` completes; then stop taking new
/// requests and give the exchanges in progress up to `DRAIN` to finish.
pub async fn serve(db: Arc<Db>, cfg: Config, until: impl Future<Output = ()>) -> crate::Result<()> {
    let mut socks = Vec::new();
    let lan = cfg.lan_listen.iter().map(|a| (a, cfg.lan_device.as_deref()));
    for (addr, device) in cfg.listen.iter().map(|a| (a, None)).chain(lan) {
        let s = listen_socket(*addr, device).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
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
    let (done, mut all_done) = mpsc::channel::<()>(1);
    let shutdown = Shutdown { notify: Arc::new(watch::Sender::new(false)), done };
    tokio::spawn(notify_ack_loop(notify_sock, hub.acks.clone(), shutdown.subscribe()));
    let mut loops = tokio::task::JoinSet::new();
    for s in socks {
        info!(addr = %s.local_addr()?, "listening on udp");
        loops.spawn(receive_loop(s, db.clone(), cfg.clone(), shutdown.clone()));
    }
    // Every socket is bound: a query sent now is answered.
    if let Err(e) = crate::notify::notify("READY=1") {
        warn!("cannot tell the service manager hwdb is ready: {e}");
    }
    tokio::pin!(until);
    let result = tokio::select! {
        // A receive loop ends only on shutdown, so one ending first has panicked.
        Some(r) = loops.join_next() => r.map_err(crate::Error::from),
        _ = &mut until => Ok(()),
    };
    info!("shutting down");
    shutdown.notify.send_replace(true);
    drop(shutdown);
    if tokio::time::timeout(DRAIN, all_done.recv()).await.is_err() {
        warn!("exchanges still in progress after {DRAIN:?}; stopping anyway");
    }
    result
}

/// Everything a request's first fragment says about whether to take it on at all: its
/// declared size and, from a LAN peer, its first words (`access::screen`) and whether its
/// address may send a statement now (its row rate), so a flood is refused at its first datagram.
fn screen_first_fragment(db: &Db, caller: &Caller, h: &Header, payload: &[u8]) -> Result<(), String> {
    let whole = h.count == 1;
    // Every fragment but the last is full, so this is the least the whole request can be.
    let len = if whole { payload.len() } else { (h.count as usize - 1) * proto::MAX_PAYLOAD + 1 };
    // The fragment may end inside a character; judge the complete ones.
    let head = match std::str::from_utf8(payload) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&payload[..e.valid_up_to()]).unwrap_or_default(),
    };
    access::screen(caller, &db.limits, len, head, whole)?;
    db.admit(caller)
}

/// A one-datagram answer that needs no connection state: a refusal, or "no such request".
/// A listening socket. SO_REUSEADDR lets a wildcard LAN socket share the port with the loopback one
/// (the kernel gives each datagram to the most specific match); the port is privileged, so no
/// unprivileged program can join them.
fn listen_socket(addr: SocketAddr, device: Option<&str>) -> std::io::Result<UdpSocket> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
    sock.set_reuse_address(true)?;
    if let Some(device) = device {
        sock.bind_device(Some(device.as_bytes()))?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    UdpSocket::from_std(sock.into())
}

async fn answer_statelessly(sock: &UdpSocket, peer: SocketAddr, h: &Header, kind: Kind, flags: u16, payload: &[u8]) {
    let reply = Header { kind, conn: h.conn, seq: h.seq, frag: 0, count: 1, flags };
    let _ = sock.send_to(&proto::encode(&reply, proto::fragment(payload, 0)), peer).await;
}

async fn refuse(sock: &UdpSocket, peer: SocketAddr, h: &Header, msg: String) {
    debug!(%peer, conn = h.conn, seq = h.seq, "refused: {msg}");
    answer_statelessly(sock, peer, h, Kind::Response, 0, &encode_reply(&Err(msg))).await;
}

async fn receive_loop(sock: Arc<UdpSocket>, db: Arc<Db>, cfg: Config, shutdown: Shutdown) {
    let mut conns: ConnTable<Packet> = ConnTable::default();
    let pools = Arc::new(ReassemblyPools::default());
    let mut buf = vec![0u8; 65536];
    let mut last_sweep = Instant::now();
    let mut stop = shutdown.subscribe();
    loop {
        let (n, peer) = tokio::select! {
            biased;
            _ = stop.recv() => return,
            r = sock.recv_from(&mut buf) => match r {
                Ok(x) => x,
                // ICMP errors from earlier sends surface here on some systems; they concern
                // one peer, never the socket.
                Err(_) => continue,
            },
        };
        if last_sweep.elapsed() > Duration::from_secs(5) {
            conns.sweep();
            last_sweep = Instant::now();
        }
        let Ok((h, payload)) = proto::decode(&buf[..n]) else { continue };
        if !matches!(h.kind, Kind::Request | Kind::ResponseAck | Kind::Ping) {
            continue;
        }
        let key = (peer, h.conn);
        let mut pkt = Packet { h, payload: payload.to_vec() };
        if let Some(c) = conns.get_mut(&key) {
            c.last_used = Instant::now();
            match c.tx.try_send(pkt) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => continue,
                Err(mpsc::error::TrySendError::Closed(p)) => pkt = p,
            }
            conns.remove(&key);
        }
        // No state for this connection: answer what needs no state, and take on only the
        // start of a request that this peer may send and has room for.
        match h.kind {
            Kind::Ping => {
                answer_statelessly(&sock, peer, &h, Kind::Pong, FLAG_UNKNOWN, &[]).await;
                continue;
            }
            Kind::Request if h.frag != 0 => {
                let msg = "the server holds no earlier fragments of this request (it restarted or forgot an idle connection); send it again";
                refuse(&sock, peer, &h, msg.into()).await;
                continue;
            }
            Kind::Request => {}
            _ => continue,
        }
        let caller = caller_for(peer.ip(), &cfg.treat_as_lan);
        let owner = Owner::of(&caller);
        if let Err(msg) = screen_first_fragment(&db, &caller, &h, &pkt.payload).and_then(|()| conns.make_room(owner)) {
            refuse(&sock, peer, &h, msg).await;
            continue;
        }
        let (tx, rx) = mpsc::channel(CONN_QUEUE);
        let idle = Arc::new(AtomicBool::new(false));
        conns.insert(key, owner, tx, idle.clone());
        let conn = Conn {
            sock: sock.clone(),
            peer,
            id: h.conn,
            rx,
            // Handed over directly, not through the channel: until the task has taken it the
            // connection is busy, so the table cannot forget it in between.
            pending: Some(pkt),
            last: None,
            db: db.clone(),
            rto: cfg.rto,
            caller,
            idle,
            pools: pools.clone(),
        };
        tokio::spawn(conn.run(shutdown.subscribe()));
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
    caller: Caller,
    /// Set while no exchange is in progress (the connection table may then forget us).
    idle: Arc<AtomicBool>,
    pools: Arc<ReassemblyPools>,
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

    /// Serve exchanges until the connection is idle for `IDLE`, is forgotten by the
    /// connection table, or the server shuts down (an exchange in progress is finished first).
    async fn run(mut self, mut stop: Stop) {
        loop {
            self.idle.store(self.pending.is_none(), Ordering::Relaxed);
            let p = tokio::select! {
                biased;
                _ = stop.recv() => return,
                n = self.next(Instant::now() + IDLE) => match n {
                    Next::Packet(p) => p,
                    Next::Timeout | Next::Closed => return,
                },
            };
            self.idle.store(false, Ordering::Relaxed);
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
        if let Err(msg) = screen_first_fragment(&self.db, &self.caller, &p.h, &p.payload) {
            return self.finish(seq, Arc::new(encode_reply(&Err(msg)))).await;
        }
        let count = p.h.count;
        let pools = self.pools.clone();
        let held = match pools.reserve(Owner::of(&self.caller), count as usize * proto::MAX_PAYLOAD) {
            Ok(r) => r,
            Err(msg) => return self.finish(seq, Arc::new(encode_reply(&Err(msg)))).await,
        };
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
        let caller = self.caller.clone();
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
        drop(held);
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

async fn notify_ack_loop(sock: Arc<UdpSocket>, acks: AckMap, mut stop: Stop) {
    let mut buf = vec![0u8; 2048];
    loop {
        let received = tokio::select! {
            r = sock.recv_from(&mut buf) => r,
            _ = stop.recv() => return,
        };
        let Ok((n, peer)) = received else { continue };
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
                    info!(subscription = self.id, dest = %self.dest, "the subscriber stopped acknowledging; cancelled");
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
