//! `hwdb-bench`: runs the `hwdb` binary beside it (cargo builds both into one target directory)
//! as a child server on loopback and measures ingest rate, window-query latency and resident
//! memory against the project's goals. `hwdb-bench --abuse`: a loopback client's query latency
//! while LAN peers hold all the half-sent requests they may, against the same client's latency to
//! an unattacked server; then another LAN address's report latency and the loopback query's while
//! one LAN address floods AppTuples reports, against the same to an unflooded server. A program of
//! its own, so that neither the library nor the server binary carries it.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};

use hwdb::client::{parse_reply, Client, ClientError};
use hwdb::conns::LAN;
use hwdb::proto::{self, Header, Kind};
use hwdb::rate::LAN_ROWS;

/// Measure hwdb's ingest rate, query latency and memory; prints JSON (see README.md, Bench).
#[derive(Parser)]
#[command(name = "hwdb-bench")]
struct Args {
    /// Also write the JSON here.
    #[arg(long)]
    out: Option<String>,
    /// Smaller, faster run (for smoke tests).
    #[arg(long)]
    quick: bool,
    /// Measure instead a loopback client's latency while LAN peers hold half-sent requests.
    #[arg(long)]
    abuse: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match if args.abuse { abuse(args.quick) } else { run(args.quick) } {
        Ok(json) => {
            let text = serde_json::to_string_pretty(&json).unwrap_or_default();
            println!("{text}");
            if let Some(path) = args.out {
                if let Err(e) = std::fs::write(&path, text + "\n") {
                    eprintln!("hwdb-bench: cannot write {path}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hwdb-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

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

fn spawn_server(ring_rows: usize, extra: &[String]) -> Result<ServerProcess, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("hwdb");
    let port = UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map_err(|e| e.to_string())?.port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new(exe)
        // A byte budget large enough that only the row budget binds (1 M Flows-like rows are ~60 MB).
        .args(["serve", "--listen", &addr.to_string(), "--db", ":memory:", "--ring-rows", &ring_rows.to_string()])
        .args(["--ring-mib", "1024"])
        .args(extra)
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
                    c.query(&format!("insert into BenchFlows values {}", batches[i % batches.len()]))
                        .map_err(|e| e.to_string())?;
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

const SCHEMA: &str =
    "(proto integer, saddr varchar, sport integer, daddr varchar, dport integer, packets integer, bytes integer)";

fn run(quick: bool) -> Result<Value, String> {
    let secs = if quick { 0.5 } else { 3.0 };
    let mut gen = Gen(0x2545F4914F6CDD1D);

    // Ingest: batches of 1000 rows (about 48 KiB, 37 datagrams each).
    let batch_rows = 1000;
    let batches: Vec<String> = (0..32).map(|_| gen.batch(batch_rows).0).collect();
    let server = spawn_server(1_000_000, &[])?;
    let mut c = client(server.addr)?;
    c.query(&format!("create table BenchFlows {SCHEMA}")).map_err(|e| e.to_string())?;
    let one = ingest(server.addr, 1, &batches, batch_rows, secs)?;
    let eight = ingest(server.addr, 8, &batches, batch_rows, secs)?;
    drop(c);
    drop(server);

    // Query latency over a 100k-row table, every row inside the 10-second window.
    let server = spawn_server(1_000_000, &[])?;
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
    let in_window =
        c.query("select count(*) from BenchQ [range 10 seconds]").map_err(|e| e.to_string())?.rows[0][0].clone();
    drop(c);
    drop(server);

    // Memory: resident growth of a fresh server holding 1M rows, against their raw size.
    let total_rows = if quick { 100_000 } else { 1_000_000 };
    let server = spawn_server(total_rows, &[])?;
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

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({
        "n": ms.len(),
        "median_ms": r3(percentile(&ms, 0.5)),
        "p99_ms": r3(percentile(&ms, 0.99)),
        "mean_ms": r3(ms.iter().sum::<f64>() / ms.len() as f64),
        "max_ms": r3(ms.last().copied().unwrap_or(0.0)),
    })
}

/// A LAN peer at `ip` sends the first fragment of `attempts` two-fragment AppTuples inserts
/// (each on a new connection) and never the second. Returns (held, refused) as the server
/// answered: an ack for the next fragment, or a refusal.
fn hold_half_sent(server: SocketAddr, ip: &str, attempts: u32) -> Result<(u32, u32), String> {
    let sock = UdpSocket::bind((ip, 0)).map_err(|e| format!("cannot bind {ip}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(500))).map_err(|e| e.to_string())?;
    let text = format!(
        "insert into AppTuples values (6,'{ip}',5000,'1.1.1.1',443,'{}','laptop')",
        "x".repeat(proto::MAX_PAYLOAD)
    );
    let (mut held, mut refused) = (0, 0);
    let mut buf = [0u8; 2048];
    // In bursts that fit the server's socket buffer, so that every attempt is answered.
    for burst in (1..=attempts).collect::<Vec<_>>().chunks(50) {
        for &conn in burst {
            let d = proto::encode(&Header::new(Kind::Request, conn, 1, 0, 2), proto::fragment(text.as_bytes(), 0));
            sock.send_to(&d, server).map_err(|e| e.to_string())?;
        }
        let expected = held + refused + burst.len() as u32;
        while held + refused < expected {
            let Ok(n) = sock.recv(&mut buf) else { break };
            match proto::decode(&buf[..n]) {
                Ok((h, _)) if h.kind == Kind::RequestAck => held += 1,
                Ok((h, p)) if h.kind == Kind::Response => {
                    let reply = parse_reply(p).map_err(|e| e.to_string())?;
                    if !reply.message.unwrap_or_default().starts_with("busy:") {
                        return Err("a half-sent request was refused for something other than its budget".into());
                    }
                    refused += 1;
                }
                _ => {}
            }
        }
    }
    Ok((held, refused))
}

/// The loopback client's query, timed against `quiet` and `attacked` alternately so that
/// both see the same machine load; returns (quiet, attacked) latencies in ms.
fn interleaved(
    quiet: &mut Client,
    attacked: &mut Client,
    query: &str,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let (mut q, mut a) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..2 * n {
        let (c, out) = if i % 2 == 0 { (&mut *quiet, &mut q) } else { (&mut *attacked, &mut a) };
        let t = Instant::now();
        c.query(query).map_err(|e| format!("the loopback client's query failed: {e}"))?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((q, a))
}

/// `rows` AppTuples rows about `ip`, ports from `first_port`: one agent statement.
fn reports(ip: &str, first_port: usize, rows: usize) -> String {
    let tuples: Vec<String> = (first_port..first_port + rows)
        .map(|p| format!("(6,'{ip}',{},'93.184.216.34',443,'firefox','laptop')", p % 65536))
        .collect();
    format!("insert into AppTuples values {}", tuples.join(","))
}

fn lan_client(server: SocketAddr, ip: &str) -> Result<Client, String> {
    let local = format!("{ip}:0").parse().map_err(|e| format!("{ip}: {e}"))?;
    let mut c = Client::connect_from(server, local).map_err(|e| e.to_string())?;
    c.opts.rto = Duration::from_millis(50);
    Ok(c)
}

/// Issue 20's report flood: one LAN address sends 480-row AppTuples inserts (the agent's
/// statement size) as fast as it can to one of two identical servers. Meanwhile another LAN
/// address's one-row report and a loopback query are timed against both servers alternately,
/// one round every 10 ms (the neighbour's 100 rows/s stay within its own rate).
fn report_flood(quick: bool) -> Result<Value, String> {
    let (flooder, neighbour) = ("127.0.2.2", "127.0.2.3");
    let lan_flags: Vec<String> =
        [flooder, neighbour].iter().flat_map(|p| ["--treat-as-lan".into(), p.to_string()]).collect();
    let quiet_server = spawn_server(200_000, &lan_flags)?;
    let flooded_server = spawn_server(200_000, &lan_flags)?;
    let mut gen = Gen(0x9E3779B97F4A7C15);
    let (mut quiet, mut flooded) = (client(quiet_server.addr)?, client(flooded_server.addr)?);
    for c in [&mut quiet, &mut flooded] {
        for _ in 0..10 {
            c.query(&format!("insert into Flows values {}", gen.batch(1000).0)).map_err(|e| e.to_string())?;
        }
    }
    let (mut quiet_lan, mut flooded_lan) =
        (lan_client(quiet_server.addr, neighbour)?, lan_client(flooded_server.addr, neighbour)?);
    let query = "select saddr, sum(bytes), count(*) from Flows [range 1 hours] group by saddr order by saddr";
    let rounds = if quick { 100 } else { 500 };

    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, server) = (stop.clone(), flooded_server.addr);
        thread::spawn(move || -> Result<(usize, usize, usize), String> {
            let mut c = lan_client(server, flooder)?;
            let (mut accepted, mut refused, mut port) = (0, 0, 0);
            while !stop.load(Ordering::Relaxed) {
                match c.query(&reports(flooder, port, 480)) {
                    Ok(_) => accepted += 480,
                    Err(ClientError::Server(m)) if m.starts_with("busy:") => refused += 1,
                    Err(e) => return Err(format!("the flooder got no clear answer: {e}")),
                }
                port += 480;
            }
            Ok((accepted, refused, port))
        })
    };
    let start = Instant::now();
    let (mut q_insert, mut f_insert, mut q_query, mut f_query) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let begun = Instant::now();
        let timed = |c: &mut Client, text: &str, out: &mut Vec<f64>| -> Result<(), String> {
            let t = Instant::now();
            c.query(text).map_err(|e| format!("round {round}: {e}"))?;
            out.push(t.elapsed().as_secs_f64() * 1000.0);
            Ok(())
        };
        let report = reports(neighbour, round, 1);
        // Alternate which server goes first, so neither always follows the other.
        if round % 2 == 0 {
            timed(&mut quiet_lan, &report, &mut q_insert)?;
            timed(&mut flooded_lan, &report, &mut f_insert)?;
            timed(&mut quiet, query, &mut q_query)?;
            timed(&mut flooded, query, &mut f_query)?;
        } else {
            timed(&mut flooded_lan, &report, &mut f_insert)?;
            timed(&mut quiet_lan, &report, &mut q_insert)?;
            timed(&mut flooded, query, &mut f_query)?;
            timed(&mut quiet, query, &mut q_query)?;
        }
        thread::sleep(Duration::from_millis(10).saturating_sub(begun.elapsed()));
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (accepted, refused, offered) = flood.join().map_err(|_| "the flooder panicked".to_string())??;
    let count = |c: &mut Client, ip: &str| -> Result<u64, String> {
        let r = c.query(&format!("select count(*) from AppTuples where saddr = '{ip}'")).map_err(|e| e.to_string())?;
        Ok(r.rows.first().and_then(|row| row[0].as_u64()).unwrap_or(0))
    };
    let (neighbour_kept, flooder_held) = (count(&mut flooded, neighbour)?, count(&mut flooded, flooder)?);
    let (qi, fi, qq, fq) = (summary(q_insert), summary(f_insert), summary(q_query), summary(f_query));
    Ok(json!({
        "what": format!(
            "{flooder} inserts 480-row AppTuples statements as fast as it can into one of two identical servers \
             for {secs:.1} s; {neighbour}'s one-row report and the loopback query are timed against both alternately"
        ),
        "rate_rows_per_s": LAN_ROWS.per_second,
        "burst_rows": LAN_ROWS.burst,
        "flood_seconds": (secs * 10.0).round() / 10.0,
        "flooder_rows_offered": offered,
        "flooder_rows_accepted": accepted,
        "flooder_statements_refused_busy": refused,
        "flooder_rows_held_at_the_end": flooder_held,
        "neighbour_reports_sent": rounds,
        "neighbour_reports_kept": neighbour_kept,
        "neighbour_insert": {"quiet": qi, "flooded": fi, "p99_ratio": ratio(&fi, &qi, "p99_ms"), "median_ratio": ratio(&fi, &qi, "median_ms")},
        "loopback_query": {"quiet": qq, "flooded": fq, "p99_ratio": ratio(&fq, &qq, "p99_ms"), "median_ratio": ratio(&fq, &qq, "median_ms")},
    }))
}

fn ratio(a: &Value, q: &Value, k: &str) -> f64 {
    let r = a[k].as_f64().unwrap_or(0.0) / q[k].as_f64().unwrap_or(1.0).max(1e-9);
    (r * 100.0).round() / 100.0
}

fn abuse(quick: bool) -> Result<Value, String> {
    let n = if quick { 200 } else { 1000 };
    // 127.0.0.2 .. : as many LAN peers as it takes to fill the whole LAN's allowance.
    let peers: Vec<String> = (0..LAN.conns / LAN.conns_per_owner).map(|i| format!("127.0.1.{}", i + 2)).collect();
    let lan_flags: Vec<String> = peers.iter().flat_map(|p| ["--treat-as-lan".to_string(), p.clone()]).collect();
    let quiet_server = spawn_server(200_000, &lan_flags)?;
    let attacked_server = spawn_server(200_000, &lan_flags)?;
    let mut gen = Gen(0x2545F4914F6CDD1D);
    let (mut quiet, mut attacked) = (client(quiet_server.addr)?, client(attacked_server.addr)?);
    for c in [&mut quiet, &mut attacked] {
        for _ in 0..10 {
            c.query(&format!("insert into Flows values {}", gen.batch(1000).0)).map_err(|e| e.to_string())?;
        }
    }
    // What the web UI asks: traffic per device over the last seconds.
    let query = "select saddr, sum(bytes), count(*) from Flows [range 1 hours] group by saddr order by saddr";
    interleaved(&mut quiet, &mut attacked, query, n / 10)?; // warm-up

    // The reported attack: one LAN peer sends 1,100 half-sent requests.
    let (held_one, refused_one) = hold_half_sent(attacked_server.addr, &peers[0], 1100)?;
    let (quiet_one, under_one) = interleaved(&mut quiet, &mut attacked, query, n)?;
    // Then the whole LAN holds all it may.
    let (mut held_all, mut refused_all) = (held_one, refused_one);
    for p in &peers[1..] {
        let (h, r) = hold_half_sent(attacked_server.addr, p, 2 * LAN.conns_per_owner as u32)?;
        held_all += h;
        refused_all += r;
    }
    let (quiet_all, under_all) = interleaved(&mut quiet, &mut attacked, query, n)?;
    // Half-sent requests are forgotten after 30 s idle; everything above took far less.
    let (still_held, _) = hold_half_sent(attacked_server.addr, &peers[0], 1)?;

    let (q1, a1, q2, a2) = (summary(quiet_one), summary(under_one), summary(quiet_all), summary(under_all));
    drop((quiet_server, attacked_server));
    let flood = report_flood(quick)?;
    let flood_row = |what: &str, k: &str, m: &str| {
        let (a, q) = (&flood[k]["flooded"], &flood[k]["quiet"]);
        json!([
            what,
            format!("{} ms", a[m]),
            format!("{} ms quiet", q[m]),
            format!("{:.2}x", ratio(a, q, m)),
            "< 2x quiet"
        ])
    };
    let rows = json!([
        [
            "loopback query p99, one LAN peer holding its maximum of half-sent requests",
            format!("{} ms", a1["p99_ms"]),
            format!("{} ms quiet", q1["p99_ms"]),
            format!("{:.2}x", ratio(&a1, &q1, "p99_ms")),
            "< 2x quiet"
        ],
        [
            "loopback query p99, the whole LAN holding its maximum",
            format!("{} ms", a2["p99_ms"]),
            format!("{} ms quiet", q2["p99_ms"]),
            format!("{:.2}x", ratio(&a2, &q2, "p99_ms")),
            "< 2x quiet"
        ],
        [
            "loopback query median, the whole LAN holding its maximum",
            format!("{} ms", a2["median_ms"]),
            format!("{} ms quiet", q2["median_ms"]),
            format!("{:.2}x", ratio(&a2, &q2, "median_ms")),
            ""
        ],
        flood_row("another LAN address's report p99, one LAN address flooding AppTuples", "neighbour_insert", "p99_ms"),
        flood_row("loopback query p99, one LAN address flooding AppTuples", "loopback_query", "p99_ms"),
        flood_row(
            "another LAN address's report median, one LAN address flooding AppTuples",
            "neighbour_insert",
            "median_ms"
        ),
        flood_row("loopback query median, one LAN address flooding AppTuples", "loopback_query", "median_ms"),
    ]);
    Ok(json!({
        "benchmark": "hwdb_abuse",
        "cpus": thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "what": format!(
            "a loopback client's query ({query}, 10 000 rows) timed alternately against two identical servers, \
             one of which LAN peers flood with half-sent requests (first fragment of two, never the second): \
             first one peer sending 1,100, then {} peers each filling its allowance of {}; \
             then, on two fresh servers, one LAN address flooding AppTuples inserts against another's reports \
             and the same query (report_flood)",
            peers.len(), LAN.conns_per_owner
        ),
        "one_lan_peer": {
            "half_sent_held": held_one,
            "half_sent_refused_busy": refused_one,
            "quiet": q1,
            "attacked": a1,
            "p99_ratio": ratio(&a1, &q1, "p99_ms"),
        },
        "whole_lan": {
            "peers": peers.len(),
            "half_sent_held": held_all,
            "half_sent_refused_busy": refused_all,
            "first_peer_still_at_its_maximum_at_the_end": still_held == 0,
            "quiet": q2,
            "attacked": a2,
            "p99_ratio": ratio(&a2, &q2, "p99_ms"),
            "median_ratio": ratio(&a2, &q2, "median_ms"),
        },
        "report_flood": flood,
        "goal_p99_ratio": 2.0,
        "rows": rows,
    }))
}
