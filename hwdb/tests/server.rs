//! End-to-end tests against the real `hwdb serve` binary over loopback UDP.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hwdb::client::{Client, ClientError, Subscriber};
use hwdb::conns::LAN;
use hwdb::proto::{self, Header, Kind};

const BIN: &str = env!("CARGO_BIN_EXE_hwdb");

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hwdb-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(db: &Path, extra: &[&str]) -> Server {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--listen", &addr.to_string(), "--db", db.to_str().unwrap(), "--rto-ms", "20"])
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Server { child, addr };
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let mut c = s.client();
            c.opts.deadline = Duration::from_millis(300);
            if c.query("show tables").is_ok() {
                return s;
            }
            assert!(Instant::now() < until, "server did not come up");
        }
    }

    fn client(&self) -> Client {
        let mut c = Client::connect(&self.addr.to_string()).unwrap();
        c.opts.rto = Duration::from_millis(20);
        c.opts.deadline = Duration::from_secs(20);
        c
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL: no chance to flush anything
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Forwards datagrams between one client and `upstream`, dropping a seeded-random
/// fraction in each direction.
struct LossyRelay {
    addr: SocketAddr,
    dropped: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl LossyRelay {
    fn new(upstream: SocketAddr, loss_per_mille: u64, seed: u64) -> LossyRelay {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let addr = sock.local_addr().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, st) = (dropped.clone(), stop.clone());
        thread::spawn(move || {
            let mut client: Option<SocketAddr> = None;
            let mut state = seed;
            let mut buf = vec![0u8; 65536];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let to = if from == upstream {
                    match client {
                        Some(c) => c,
                        None => continue,
                    }
                } else {
                    client = Some(from);
                    upstream
                };
                if state % 1000 < loss_per_mille {
                    d.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let _ = sock.send_to(&buf[..n], to);
            }
        });
        LossyRelay { addr, dropped, stop }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn big_row(i: usize) -> String {
    format!("row{i:05}-{}", "x".repeat(1000))
}

#[test]
fn megabyte_result_over_lossy_link() {
    let server = Server::start(Path::new(":memory:"), &[]);
    let relay = LossyRelay::new(server.addr, 50, 0x2545F4914F6CDD1D);
    let mut c = Client::connect(&relay.addr.to_string()).unwrap();
    c.opts.rto = Duration::from_millis(20);
    c.opts.max_tries = 12;
    c.opts.deadline = Duration::from_secs(60);
    c.query("create table Big (n integer, s varchar)").unwrap();
    let rows = 1100;
    for chunk in (0..rows).collect::<Vec<_>>().chunks(50) {
        let values: Vec<String> = chunk.iter().map(|&i| format!("({i}, '{}')", big_row(i))).collect();
        let r = c.query(&format!("insert into Big values {}", values.join(","))).unwrap();
        assert_eq!(r.message.as_deref(), Some("inserted 50 rows"));
    }
    let t = Instant::now();
    let raw = c.request("select n, s from Big").unwrap();
    let took = t.elapsed();
    assert!(raw.len() >= 1 << 20, "result is only {} bytes", raw.len());
    let reply = hwdb::client::parse_reply(&raw).unwrap();
    assert_eq!(reply.rows.len(), rows);
    for (i, row) in reply.rows.iter().enumerate() {
        assert_eq!(row[0], serde_json::json!(i));
        assert_eq!(row[1], serde_json::json!(big_row(i)));
    }
    assert!(relay.dropped.load(Ordering::Relaxed) > 20, "the relay dropped too little to test anything");
    eprintln!("{} bytes in {took:?} with {} datagrams dropped", raw.len(), relay.dropped.load(Ordering::Relaxed));
    // Every insert ran exactly once despite retransmissions.
    let mut direct = server.client();
    assert_eq!(direct.query("select count(*) from Big").unwrap().rows[0][0], serde_json::json!(rows));
}

#[test]
fn retransmitted_request_is_not_executed_twice() {
    let server = Server::start(Path::new(":memory:"), &[]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let conn = 0x5eed;
    let req = proto::encode(&Header::new(Kind::Request, conn, 1, 0, 1), b"insert into Links values ('aa', -50, 1, 2)");
    let mut buf = [0u8; 2048];
    let mut replies = Vec::new();
    for _ in 0..3 {
        sock.send_to(&req, server.addr).unwrap();
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        let (h, p) = proto::decode(&buf[..n]).unwrap();
        assert_eq!((h.kind, h.conn, h.seq), (Kind::Response, conn, 1));
        replies.push(p.to_vec());
        sock.send_to(&proto::encode(&Header::new(Kind::ResponseAck, conn, 1, 0, 1), b""), server.addr).unwrap();
    }
    assert!(replies.iter().all(|r| r == &replies[0]), "the cached response is resent");
    let mut c = server.client();
    assert_eq!(c.query("select count(*) from Links").unwrap().rows[0][0], serde_json::json!(1));

    // A ping for a request the server never saw says so.
    sock.send_to(&proto::encode(&Header::new(Kind::Ping, conn, 9, 0, 1), b""), server.addr).unwrap();
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    let (h, _) = proto::decode(&buf[..n]).unwrap();
    assert_eq!((h.kind, h.seq, h.flags), (Kind::Pong, 9, proto::FLAG_UNKNOWN));
    // So does a request fragment whose start the server never saw: an error, not silence.
    sock.send_to(&proto::encode(&Header::new(Kind::Request, conn + 1, 1, 1, 2), b"x"), server.addr).unwrap();
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    let (h, p) = proto::decode(&buf[..n]).unwrap();
    assert_eq!((h.kind, h.conn, h.seq), (Kind::Response, conn + 1, 1));
    let msg = hwdb::client::parse_reply(p).unwrap().message.unwrap_or_default();
    assert!(msg.starts_with("the server holds no earlier fragments of this request"), "{msg}");
    // Garbage does not disturb the server.
    sock.send_to(b"\x00\x01garbage", server.addr).unwrap();
    sock.send_to(&[0x48, 0x57, 1, 1, 0, 0], server.addr).unwrap();
    assert!(c.query("show tables").is_ok());
}

#[test]
fn subscription_delivers_each_row_once() {
    let server = Server::start(Path::new(":memory:"), &[]);
    let mut c = server.client();
    c.query("insert into Flows values (6,'10.2.0.10',1,'1.1.1.1',443,1,1)").unwrap(); // before: not delivered
    let mut sub = Subscriber::bind("127.0.0.1:0").unwrap();
    // Notifications pass a lossy relay too; the subscriber must still see each row once.
    let relay = LossyRelay::new(sub.local_addr().unwrap(), 100, 0x9E3779B97F4A7C15);
    let r = c
        .query(&format!(
            "subscribe select sport, bytes from Flows where dport = 443 and saddr != '10.2.0.99' to 127.0.0.1 {}",
            relay.addr.port()
        ))
        .unwrap();
    let id = r.rows[0][0].as_u64().unwrap();
    let mut expected = Vec::new();
    for batch in 0..40 {
        let mut values = Vec::new();
        for k in 0..5 {
            let sport = 1000 + batch * 10 + k;
            let dport = if k % 2 == 0 { 443 } else { 80 };
            let saddr = if k == 4 { "10.2.0.99" } else { "10.2.0.10" };
            values.push(format!("(6,'{saddr}',{sport},'1.1.1.1',{dport},1,{})", sport * 2));
            if dport == 443 && saddr != "10.2.0.99" {
                expected.push((sport, sport * 2));
            }
        }
        c.query(&format!("insert into Flows values {}", values.join(","))).unwrap();
    }
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while got.len() < expected.len() && Instant::now() < until {
        if let Some(n) = sub.recv(Duration::from_millis(500)).unwrap() {
            assert_eq!(n.subscription, Some(id as u32));
            assert_eq!(n.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["sport", "bytes"]);
            got.extend(n.rows.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap())));
        }
    }
    // Anything further would be a duplicate.
    while let Some(n) = sub.recv(Duration::from_millis(700)).unwrap() {
        got.extend(n.rows.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap())));
    }
    assert_eq!(got, expected);
    assert!(relay.dropped.load(Ordering::Relaxed) > 0);

    let subs = c.query("show subscriptions").unwrap();
    assert_eq!(subs.rows.len(), 1);
    c.query(&format!("unsubscribe {id}")).unwrap();
    c.query("insert into Flows values (6,'10.2.0.10',9,'1.1.1.1',443,1,1)").unwrap();
    assert!(sub.recv(Duration::from_millis(500)).unwrap().is_none());
    assert!(
        matches!(c.query(&format!("unsubscribe {id}")), Err(ClientError::Server(m)) if m == format!("no subscription {id}"))
    );
}

#[test]
fn restart_keeps_persistent_tables() {
    let dir = temp_dir("restart");
    let db = dir.join("hwdb.sqlite");
    let mut s = Server::start(&db, &[]);
    let mut c = s.client();
    c.query("insert into AppPriority values ('zoom','high'),('steam','default')").unwrap();
    c.query("create persistent table Names (mac varchar, name varchar)").unwrap();
    c.query("insert into Names values ('aa:bb','tv')").unwrap();
    c.query("insert into Flows values (6,'10.2.0.10',1,'1.1.1.1',443,1,1)").unwrap();
    s.kill();
    let s = Server::start(&db, &[]);
    let mut c = s.client();
    let prio = c.query("select app, priority from AppPriority").unwrap();
    assert_eq!(
        prio.rows,
        vec![
            vec![serde_json::json!("zoom"), serde_json::json!("high")],
            vec![serde_json::json!("steam"), serde_json::json!("default")]
        ]
    );
    assert_eq!(
        c.query("select name from Names where mac = 'aa:bb'").unwrap().rows,
        vec![vec![serde_json::json!("tv")]]
    );
    assert_eq!(c.query("select count(*) from Flows").unwrap().rows[0][0], serde_json::json!(0));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_database_is_a_clear_startup_error() {
    let dir = temp_dir("corrupt");
    let db = dir.join("bad.sqlite");
    std::fs::write(&db, vec![0x42u8; 4096]).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port()), "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot use database") && err.contains("not a database"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lan_clients_may_only_report_their_own_flows() {
    let server = Server::start(Path::new(":memory:"), &["--treat-as-lan", "127.0.0.2"]);
    let mut lan = Client::connect_from(server.addr, "127.0.0.2:0".parse().unwrap()).unwrap();
    lan.opts.rto = Duration::from_millis(20);
    lan.query("insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')").unwrap();
    let forbidden = "forbidden: LAN clients may only insert into AppTuples rows for their own address";
    for q in [
        "select * from AppTuples",
        "insert into AppTuples values (6,'10.2.0.9',5000,'1.1.1.1',443,'firefox','laptop')",
        "insert into AppPriority values ('firefox','high')",
        "show tables",
    ] {
        match lan.query(q) {
            Err(ClientError::Server(m)) => assert!(m.starts_with(forbidden), "{q}: {m}"),
            other => panic!("{q}: {other:?}"),
        }
    }
    let mut local = server.client();
    let rows = local.query("select saddr, app from AppTuples").unwrap().rows;
    assert_eq!(rows, vec![vec![serde_json::json!("127.0.0.2"), serde_json::json!("firefox")]]);
}

#[test]
fn cli_prints_tables_and_fails_with_the_server_message() {
    let server = Server::start(Path::new(":memory:"), &[]);
    let run = |q: &str, extra: &[&str]| {
        Command::new(BIN).args(["query", q, "--server", &server.addr.to_string()]).args(extra).output().unwrap()
    };
    assert!(run("insert into Links values ('aa:bb', -41, 0, 7)", &[]).status.success());
    let out = run("select mac, rssi from Links", &[]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "mac    rssi\n-----  ----\naa:bb   -41\n(1 row)\n");
    let out = run("select mac from Links", &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"][0][0], "aa:bb");
    let out = run("select * form Links", &[]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "hwdb: 1:10: expected 'from', found 'form'");
    let out = Command::new(BIN)
        .args(["query", "show tables", "--server", &format!("127.0.0.1:{}", free_port()), "--timeout", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no answer from the server"));
}

/// Issue 10, item 8: a flat chain of 120,000 comparisons (about 960 KB, under the 1 MiB
/// statement limit) overflowed a worker's stack and killed the server.
#[test]
fn a_huge_flat_where_clause_is_an_error_not_a_crash() {
    let server = Server::start(Path::new(":memory:"), &["--treat-as-lan", "127.0.0.2"]);
    let mut local = server.client();
    local.query("insert into Links values ('aa', -50, 1, 2)").unwrap();
    for op in [" and ", " or "] {
        let huge = format!("select count(*) from Links where {}", vec!["1=1"; 120_000].join(op));
        match local.query(&huge) {
            Err(ClientError::Server(m)) => assert!(m.contains("more than 1024 comparisons"), "{m}"),
            other => panic!("{other:?}"),
        }
        // The server is still up, and a long but reasonable chain works.
        let fine = format!("select count(*) from Links where {}", vec!["1=1"; 1000].join(op));
        assert_eq!(local.query(&fine).unwrap().rows[0][0], serde_json::json!(1));
    }
    // A LAN peer is refused before the server parses anything it may not run.
    let mut lan = Client::connect_from(server.addr, "127.0.0.2:0".parse().unwrap()).unwrap();
    lan.opts.rto = Duration::from_millis(20);
    let huge = format!("select count(*) from Links where {}", vec!["1=1"; 120_000].join(" and "));
    match lan.query(&huge) {
        Err(ClientError::Server(m)) => assert!(m.starts_with("forbidden:"), "{m}"),
        other => panic!("{other:?}"),
    }
    lan.query("insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')").unwrap();
}

/// The first fragment of a two-fragment AppTuples insert for 127.0.0.2, on connection `conn`.
fn half_sent_request(conn: u32) -> Vec<u8> {
    let text = format!(
        "insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'{}','laptop')",
        "x".repeat(proto::MAX_PAYLOAD)
    );
    proto::encode(&Header::new(Kind::Request, conn, 1, 0, 2), proto::fragment(text.as_bytes(), 0))
}

/// Issue 10, item 9: 1,099 half-sent requests from one LAN peer filled the connection
/// table and locked loopback clients out for 30 s.
#[test]
fn half_sent_requests_from_a_lan_peer_cannot_lock_out_anyone_else() {
    let server = Server::start(Path::new(":memory:"), &["--treat-as-lan", "127.0.0.2", "--treat-as-lan", "127.0.0.3"]);
    let attacker = UdpSocket::bind("127.0.0.2:0").unwrap();
    let sent = 1100u32;
    // Every request gets an answer: an ack for the next fragment, or a clear refusal. Sent
    // in bursts that fit the server's socket buffer, so nothing is lost on the way in.
    attacker.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let (mut acked, mut refused) = (0u32, Vec::new());
    let mut buf = [0u8; 2048];
    let conns: Vec<u32> = (1..=sent).collect();
    for burst in conns.chunks(50) {
        for &conn in burst {
            attacker.send_to(&half_sent_request(conn), server.addr).unwrap();
        }
        let answered = acked + refused.len() as u32;
        while acked + (refused.len() as u32) < answered + burst.len() as u32 {
            let Ok(n) = attacker.recv(&mut buf) else { break };
            let (h, p) = proto::decode(&buf[..n]).unwrap();
            match h.kind {
                Kind::RequestAck => acked += 1,
                Kind::Response => refused.push(hwdb::client::parse_reply(p).unwrap().message.unwrap_or_default()),
                k => panic!("unexpected {k:?}"),
            }
        }
    }
    // The loopback client is served at once, and so is another LAN peer.
    let mut local = server.client();
    local.opts.deadline = Duration::from_secs(2);
    assert!(local.query("show tables").is_ok(), "a loopback client was locked out");
    let mut neighbour = Client::connect_from(server.addr, "127.0.0.3:0".parse().unwrap()).unwrap();
    neighbour.opts.rto = Duration::from_millis(20);
    neighbour.opts.deadline = Duration::from_secs(2);
    neighbour.query("insert into AppTuples values (6,'127.0.0.3',5000,'1.1.1.1',443,'firefox','laptop')").unwrap();
    assert_eq!(acked as usize, LAN.conns_per_owner, "the peer may hold its allowance of half-sent requests");
    assert_eq!(acked + refused.len() as u32, sent, "some requests were dropped without an answer");
    assert!(refused.iter().all(|m| m.starts_with("busy:")), "{:?}", refused.first());
}

/// Issue 10, item 10: a bounded random-mutation pass over the RPC framing, run by `make test`.
/// Mutations of every test vector and of real requests, sent from a loopback and a LAN peer,
/// interleaved with a real client whose answers must stay right throughout.
#[test]
fn mutated_datagrams_never_break_the_server() {
    let server = Server::start(Path::new(":memory:"), &["--treat-as-lan", "127.0.0.2"]);
    let mut client = server.client();
    client.query("create table Canary (n integer)").unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testvectors");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    seeds.push(half_sent_request(1));
    for (kind, text) in [
        (Kind::Request, "select count(*) from Links where rssi < 0 or mac = 'aa'"),
        (Kind::Request, "insert into AppTuples values (6,'127.0.0.2',5000,'1.1.1.1',443,'firefox','laptop')"),
        (Kind::ResponseAck, ""),
        (Kind::Ping, ""),
    ] {
        seeds.push(proto::encode(&Header::new(kind, 7, 1, 0, 1), text.as_bytes()));
    }
    let peers = [UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.2:0").unwrap()];
    for p in &peers {
        p.set_nonblocking(true).unwrap();
    }
    let mut state: u64 = 0x2545F4914F6CDD1D;
    let mut rnd = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n.max(1) as u64) as usize
    };
    let started = Instant::now();
    let mut canaries = 0;
    let mut sink = [0u8; 2048];
    for round in 0..20_000 {
        let mut d = seeds[rnd(seeds.len())].clone();
        match rnd(6) {
            0 => {
                for _ in 0..1 + rnd(4) {
                    let i = rnd(d.len());
                    d[i] ^= 1 << rnd(8);
                }
            }
            // A header field set to a small or extreme value: kind, conn, seq, frag, count, flags.
            1 => {
                let (at, width) = [(3, 1), (4, 4), (8, 4), (12, 2), (14, 2), (16, 2)][rnd(6)];
                let v = [0u64, 1, 2, 7, 255, u64::MAX][rnd(6)].wrapping_add(rnd(3) as u64);
                d[at..at + width].copy_from_slice(&v.to_be_bytes()[8 - width..]);
            }
            2 => d.truncate(rnd(d.len() + 1)),
            3 => d.extend((0..rnd(64)).map(|_| rnd(256) as u8)),
            4 => d = (0..rnd(80)).map(|_| rnd(256) as u8).collect(),
            _ => {}
        }
        let peer = &peers[rnd(2)];
        let _ = peer.send_to(&d, server.addr);
        while peer.recv(&mut sink).is_ok() {}
        if round % 250 == 0 {
            canaries += 1;
            client.query(&format!("insert into Canary values ({canaries})")).unwrap();
            let r = client.query("select count(*), sum(n) from Canary").unwrap();
            assert_eq!(r.rows[0], vec![serde_json::json!(canaries), serde_json::json!(canaries * (canaries + 1) / 2)]);
        }
    }
    let mut server = server;
    assert!(server.child.try_wait().unwrap().is_none(), "the server died");
    assert!(client.query("show tables").is_ok());
    eprintln!("20000 mutated datagrams in {:?}", started.elapsed());
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let mut server = Server::start(Path::new(":memory:"), &[]);
    server.client().query("insert into Links values ('aa', -50, 1, 2)").unwrap();
    let status = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let until = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "the server did not stop");
        thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
}

fn lan_client(server: &Server, ip: &str) -> Client {
    let mut c = Client::connect_from(server.addr, format!("{ip}:0").parse().unwrap()).unwrap();
    c.opts.rto = Duration::from_millis(20);
    c
}

/// `rows` AppTuples rows about `ip`, ports from `first_port`, in one insert.
fn report(ip: &str, first_port: usize, rows: usize, app: &str) -> String {
    let tuples: Vec<String> =
        (first_port..first_port + rows).map(|p| format!("(6,'{ip}',{p},'1.1.1.1',443,'{app}','host')")).collect();
    format!("insert into AppTuples values {}", tuples.join(","))
}

fn count(c: &mut Client, query: &str) -> u64 {
    c.query(query).unwrap().rows[0][0].as_u64().unwrap()
}

/// Issue 20, item 4: one LAN address inserting as fast as it can is refused past its row rate,
/// while another address's reports go in during the flood and stay in the ring; loopback is
/// not limited.
#[test]
fn one_lan_address_flooding_reports_cannot_crowd_out_another() {
    // A ring of 6,000 rows: an unlimited flood replaces all of it within a second.
    let lan = ["--treat-as-lan", "127.0.0.2", "--treat-as-lan", "127.0.0.3", "--ring-rows", "6000"];
    let server = Server::start(Path::new(":memory:"), &lan);
    let (mut flooder, mut neighbour, mut local) =
        (lan_client(&server, "127.0.0.2"), lan_client(&server, "127.0.0.3"), server.client());
    neighbour.query(&report("127.0.0.3", 1, 20, "zoom")).unwrap();
    let start = Instant::now();
    let flood = Duration::from_secs(2);
    let (accepted, refusals, neighbour_rows) = thread::scope(|s| {
        let flooding = s.spawn(|| {
            let (mut accepted, mut refusals, mut port) = (0usize, Vec::new(), 1);
            while start.elapsed() < flood {
                match flooder.query(&report("127.0.0.2", port, 400, "flood")) {
                    Ok(_) => accepted += 400,
                    Err(ClientError::Server(m)) => refusals.push(m),
                    Err(e) => panic!("the flooder should get an answer: {e}"),
                }
                port += 400;
            }
            (accepted, refusals)
        });
        // Positive control: the neighbour's reports during the flood, 50 a second, are taken.
        let mut neighbour_rows = 20;
        while start.elapsed() < flood {
            neighbour.query(&report("127.0.0.3", 1000 + neighbour_rows, 1, "zoom")).unwrap();
            neighbour_rows += 1;
            thread::sleep(Duration::from_millis(20));
        }
        let (accepted, refusals) = flooding.join().unwrap();
        (accepted, refusals, neighbour_rows)
    });
    let took = start.elapsed().as_secs_f64();
    assert!(!refusals.is_empty(), "the flood was never refused ({accepted} rows taken in {took:.1} s)");
    let busy = "busy: 127.0.0.2 sent more AppTuples rows than its rate of 200 rows/s (bursts of 2000); retry in ";
    assert!(refusals.iter().all(|m| m.starts_with(busy)), "{:?}", refusals[0]);
    // The burst, the rate over the run, and the one batch that may straddle the two.
    assert!(accepted as f64 <= 2000.0 + 200.0 * took + 400.0, "{accepted} rows taken in {took:.1} s");
    assert!(accepted >= 2000, "the burst should go in: {accepted}");
    let kept = count(&mut local, "select count(*) from AppTuples where saddr = '127.0.0.3'");
    assert_eq!(kept as usize, neighbour_rows, "the neighbour's reports were evicted");
    // The router's own services are not limited: 3,000 rows at once from loopback go in.
    local.query(&report("127.0.0.9", 1, 3000, "local")).unwrap();
    assert_eq!(count(&mut local, "select count(*) from AppTuples where saddr = '127.0.0.9'"), 3000);
}

/// Issue 20, item 6: a router started with the household's key proves it to an agent on the
/// LAN (the proof is the one the agent computes with that key); one with another key cannot,
/// and a router without a key says so. The key file is created at the first start and kept.
#[test]
fn the_router_proves_it_holds_the_households_agent_key() {
    use hwdb::pairing::{self, load_or_create_key};
    let dir = temp_dir("agent-key");
    let key_file = dir.join("agent.key");
    let lan = ["--treat-as-lan", "127.0.0.2", "--agent-key-file", key_file.to_str().unwrap()];
    let server = Server::start(Path::new(":memory:"), &lan);
    let key = load_or_create_key(&key_file).unwrap();
    let nonce: [u8; pairing::NONCE_BYTES] = std::array::from_fn(|i| (i * 7 + 3) as u8);
    let to = "10.2.0.1:987";
    let ask = format!("prove '{}' for '{to}'", pairing::to_hex(&nonce));
    let proof = lan_client(&server, "127.0.0.2").query(&ask).unwrap().rows[0][0].as_str().unwrap().to_string();
    assert_eq!(proof, pairing::to_hex(&pairing::proof(&key, &nonce, to)), "the right key's proof");
    let other_key = [0x5au8; pairing::KEY_BYTES];
    assert_ne!(proof, pairing::to_hex(&pairing::proof(&other_key, &nonce, to)), "a wrong key gives another proof");
    // Restarted, it answers with the same key from the same file.
    drop(server);
    let again = Server::start(Path::new(":memory:"), &lan);
    assert_eq!(lan_client(&again, "127.0.0.2").query(&ask).unwrap().rows[0][0].as_str().unwrap(), proof);
    // A router of another household (its own key file) gives a proof the agent rejects.
    let other_file = dir.join("other.key");
    let other = Server::start(Path::new(":memory:"), &["--agent-key-file", other_file.to_str().unwrap()]);
    assert_ne!(other.client().query(&ask).unwrap().rows[0][0].as_str().unwrap(), proof);
    // Without a key, and with a malformed nonce: clear errors.
    let keyless = Server::start(Path::new(":memory:"), &[]);
    match keyless.client().query(&ask) {
        Err(ClientError::Server(m)) => {
            assert_eq!(m, "this router has no agent key (hwdb runs without --agent-key-file)")
        }
        other => panic!("{other:?}"),
    }
    match again.client().query("prove 'abc' for '10.2.0.1:987'") {
        Err(ClientError::Server(m)) => assert!(m.contains("the nonce must be 32 random bytes"), "{m}"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
