//! `hwdb bench`: runs the server binary as a child process on loopback and measures
//! ingest rate, window-query latency and resident memory against the project's goals.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::Client;

struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_server(ring_rows: usize) -> Result<ServerProcess, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map_err(|e| e.to_string())?.port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new(exe)
        .args(["serve", "--listen", &addr.to_string(), "--db", ":memory:", "--ring-rows", &ring_rows.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start server: {e}"))?;
    let s = ServerProcess { child, addr };
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = client(addr)?;
        c.opts.deadline = Duration::from_millis(300);
        if c.query("show tables").is_ok() {
            return Ok(s);
        }
        if Instant::now() > until {
            return Err("server did not start".into());
        }
    }
}

fn client(addr: SocketAddr) -> Result<Client, String> {
    let mut c = Client::connect(&addr.to_string()).map_err(|e| e.to_string())?;
    c.opts.rto = Duration::from_millis(50);
    Ok(c)
}

fn vm_rss_kib(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmRSS".into())
}

/// Deterministic Flows-like rows: 250 LAN hosts, 5000 remote addresses.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A row as SQL text and its raw size: 8-byte tstamp, five 8-byte integers, the strings' bytes.
    fn row(&mut self) -> (String, usize) {
        let r = self.next();
        let saddr = format!("10.2.{}.{}", (r % 250) / 63, (r % 250) % 63 * 4 + 2);
        let d = (r >> 8) % 5000;
        let daddr = format!("93.184.{}.{}", d / 250, d % 250);
        let dport = [443, 443, 443, 80, 53, 8080, 993, 22][((r >> 24) % 8) as usize];
        let proto = if dport == 53 { 17 } else { 6 };
        let sport = 1024 + (r >> 32) % 60000;
        let packets = 1 + (r >> 40) % 1000;
        let bytes = packets * (60 + (r >> 50) % 1400);
        let raw = 8 + 5 * 8 + saddr.len() + daddr.len();
        (format!("({proto},'{saddr}',{sport},'{daddr}',{dport},{packets},{bytes})"), raw)
    }

    fn batch(&mut self, n: usize) -> (String, usize) {
        let mut raw = 0;
        let rows: Vec<String> = (0..n)
            .map(|_| {
                let (s, r) = self.row();
                raw += r;
                s
            })
            .collect();
        (rows.join(","), raw)
    }
}

fn ingest(addr: SocketAddr, clients: usize, batches: &[String], batch_rows: usize, secs: f64) -> Result<f64, String> {
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|k| {
            let batches = batches.to_vec();
            thread::spawn(move || -> Result<usize, String> {
                let mut c = client(addr)?;
                let mut rows = 0;
                let mut i = k;
                while start.elapsed().as_secs_f64() < secs {
                    c.query(&format!("insert into BenchFlows values {}", batches[i % batches.len()])).map_err(|e| e.to_string())?;
                    rows += batch_rows;
                    i += 1;
                }
                Ok(rows)
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| "client thread panicked".to_string())??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

const SCHEMA: &str = "(proto integer, saddr varchar, sport integer, daddr varchar, dport integer, packets integer, bytes integer)";

pub fn run(quick: bool) -> Result<Value, String> {
    let secs = if quick { 0.5 } else { 3.0 };
    let mut gen = Gen(0x2545F4914F6CDD1D);

    // Ingest: batches of 1000 rows (about 48 KiB, 37 datagrams each).
    let batch_rows = 1000;
    let batches: Vec<String> = (0..32).map(|_| gen.batch(batch_rows).0).collect();
    let server = spawn_server(1_000_000)?;
    let mut c = client(server.addr)?;
    c.query(&format!("create table BenchFlows {SCHEMA}")).map_err(|e| e.to_string())?;
    let one = ingest(server.addr, 1, &batches, batch_rows, secs)?;
    let eight = ingest(server.addr, 8, &batches, batch_rows, secs)?;
    drop(c);
    drop(server);

    // Query latency over a 100k-row table, every row inside the 10-second window.
    let server = spawn_server(1_000_000)?;
    let mut c = client(server.addr)?;
    c.query(&format!("create table BenchQ {SCHEMA}")).map_err(|e| e.to_string())?;
    for _ in 0..100 {
        let (b, _) = gen.batch(1000);
        c.query(&format!("insert into BenchQ values {b}")).map_err(|e| e.to_string())?;
    }
    let n = if quick { 30 } else { 300 };
    let queries = [
        ("filter", "select * from BenchQ [range 10 seconds] where dport = 22 and sport < 2000"),
        ("group_by", "select saddr, count(*), sum(bytes) from BenchQ [range 10 seconds] group by saddr"),
        ("count", "select count(*) from BenchQ [range 10 seconds]"),
        ("recent_100", "select * from BenchQ [range 10 seconds] order by tstamp desc limit 100"),
    ];
    let mut latency = serde_json::Map::new();
    for (name, q) in queries {
        let mut times = Vec::with_capacity(n);
        let mut rows = 0;
        for _ in 0..n {
            let t = Instant::now();
            let r = c.query(q).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            rows = r.rows.len();
        }
        times.sort_by(|a, b| a.total_cmp(b));
        latency.insert(
            name.into(),
            json!({"query": q, "rows_returned": rows, "p50_ms": percentile(&times, 0.5), "p99_ms": percentile(&times, 0.99)}),
        );
    }
    let in_window = c.query("select count(*) from BenchQ [range 10 seconds]").map_err(|e| e.to_string())?.rows[0][0].clone();
    drop(c);
    drop(server);

    // Memory: resident growth of a fresh server holding 1M rows, against their raw size.
    let total_rows = if quick { 100_000 } else { 1_000_000 };
    let server = spawn_server(total_rows)?;
    let mut c = client(server.addr)?;
    c.query(&format!("create table BenchMem {SCHEMA}")).map_err(|e| e.to_string())?;
    let pid = server.child.id();
    let before = vm_rss_kib(pid)?;
    let mut raw = 0usize;
    for _ in 0..total_rows / 1000 {
        let (b, r) = gen.batch(1000);
        raw += r;
        c.query(&format!("insert into BenchMem values {b}")).map_err(|e| e.to_string())?;
    }
    let after = vm_rss_kib(pid)?;
    let held = c.query("select count(*) from BenchMem").map_err(|e| e.to_string())?.rows[0][0].clone();
    let delta = (after.saturating_sub(before) * 1024) as f64;

    Ok(json!({
        "machine": {"cores": thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "ingest": {
            "batch_rows": batch_rows,
            "seconds_per_run": secs,
            "rows_per_s_1_client": one.round(),
            "rows_per_s_8_clients": eight.round(),
            "goal_rows_per_s": 500000,
        },
        "query_latency_100k_rows": {
            "rows_in_window": in_window,
            "queries": latency,
            "goal_p99_ms": 5.0,
        },
        "memory": {
            "rows_held": held,
            "raw_bytes": raw,
            "raw_bytes_per_row": raw as f64 / total_rows as f64,
            "vmrss_before_kib": before,
            "vmrss_after_kib": after,
            "growth_bytes_per_row": delta / total_rows as f64,
            "growth_over_raw": delta / raw as f64,
            "total_rss_over_raw": (after * 1024) as f64 / raw as f64,
            "goal_ratio": 2.0,
        },
    }))
}
