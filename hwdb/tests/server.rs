//! End-to-end tests against the real `hwdb serve` binary over loopback UDP.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hwdb::client::{Client, ClientError, Subscriber};
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
        .query(&format!("subscribe select sport, bytes from Flows where dport = 443 and saddr != '10.2.0.99' to 127.0.0.1 {}", relay.addr.port()))
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
    assert!(matches!(c.query(&format!("unsubscribe {id}")), Err(ClientError::Server(m)) if m == format!("no subscription {id}")));
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
    assert_eq!(prio.rows, vec![vec![serde_json::json!("zoom"), serde_json::json!("high")], vec![serde_json::json!("steam"), serde_json::json!("default")]]);
    assert_eq!(c.query("select name from Names where mac = 'aa:bb'").unwrap().rows, vec![vec![serde_json::json!("tv")]]);
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
    let run = |q: &str, extra: &[&str]| Command::new(BIN).args(["query", q, "--server", &server.addr.to_string()]).args(extra).output().unwrap();
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
    let out = Command::new(BIN).args(["query", "show tables", "--server", &format!("127.0.0.1:{}", free_port()), "--timeout", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no answer from the server"));
}
