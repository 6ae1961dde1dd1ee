use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use hwdb::client::{Client, ClientError, Reply, Subscriber};
use hwdb::db::{system_clock, Db};
use hwdb::exec::Limits;
use hwdb::server;
use hwdb::table::Ring;

#[derive(Parser)]
#[command(name = "hwdb", version, about = "Homework stream database")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the database server.
    Serve {
        /// Address for the full-rights (loopback) RPC socket.
        #[arg(long, default_value = "127.0.0.1:987")]
        listen: SocketAddr,
        /// Extra sockets for LAN hosts (end-host agents); repeatable.
        #[arg(long = "lan-listen")]
        lan_listen: Vec<SocketAddr>,
        /// Bind the --lan-listen sockets to this interface (the router's LAN bridge), so that
        /// `--lan-listen 0.0.0.0:987` answers agents at every gateway address and never the WAN.
        #[arg(long = "lan-device")]
        lan_device: Option<String>,
        /// SQLite file for persistent tables (":memory:" keeps nothing across restarts).
        #[arg(long, default_value = "/var/lib/hwdb/hwdb.sqlite")]
        db: String,
        /// Row budget of each table's in-memory ring.
        #[arg(long = "ring-rows", default_value_t = Ring::DEFAULT.rows)]
        ring_rows: usize,
        /// Byte budget of each table's in-memory ring, in MiB (rows' cells and their strings).
        #[arg(long = "ring-mib", default_value_t = Ring::DEFAULT.bytes >> 20)]
        ring_mib: usize,
        /// First retransmission timeout in milliseconds.
        #[arg(long = "rto-ms", default_value_t = 100)]
        rto_ms: u64,
        /// TEST ONLY: give peers with this address LAN rights even though it is loopback.
        #[arg(long = "treat-as-lan")]
        treat_as_lan: Vec<IpAddr>,
        /// Log level on stderr: error, warn, info, debug (refused requests) or trace.
        #[arg(long, default_value_t = tracing::Level::INFO)]
        log: tracing::Level,
        /// The household's agent key (created, random, if the file does not exist), with which
        /// hwdb proves to end-host agents that this is their router.
        #[arg(long = "agent-key-file")]
        agent_key_file: Option<PathBuf>,
    },
    /// Run one statement against a server and print the result.
    Query {
        text: String,
        #[arg(long, default_value = "127.0.0.1:987")]
        server: String,
        /// Print the server's JSON reply instead of a table.
        #[arg(long)]
        json: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Subscribe to a select and print new matching rows as they arrive.
    Subscribe {
        /// A plain select, e.g. "select * from Flows where dport = 53".
        query: String,
        #[arg(long, default_value = "127.0.0.1:987")]
        server: String,
        /// Local address to receive notifications on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long)]
        json: bool,
    },
}

fn render(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "NULL".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_table(r: &Reply) {
    if r.columns.is_empty() {
        if let Some(m) = &r.message {
            println!("{m}");
        }
        return;
    }
    let cells: Vec<Vec<String>> = r.rows.iter().map(|row| row.iter().map(render).collect()).collect();
    let mut widths: Vec<usize> = r.columns.iter().map(|c| c.name.chars().count()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let numeric: Vec<bool> =
        r.columns.iter().map(|c| matches!(c.ty.as_str(), "integer" | "real" | "timestamp")).collect();
    let line = |vals: &[String]| {
        let parts: Vec<String> = vals
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((v, w), num)| if *num { format!("{v:>w$}") } else { format!("{v:<w$}") })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(&r.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
    println!("{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
    for row in &cells {
        line(row);
    }
    println!("({} row{})", cells.len(), if cells.len() == 1 { "" } else { "s" });
}

/// Open the database and serve until SIGTERM or SIGINT; then finish what is in progress.
fn serve(db: &str, ring: Ring, agent_key_file: Option<&Path>, cfg: server::Config) -> hwdb::Result<()> {
    if db != ":memory:" {
        if let Some(dir) = Path::new(db).parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    let database = Arc::new(Db::open(db, ring, system_clock(), Limits::default())?);
    if let Some(path) = agent_key_file {
        database.set_agent_key(hwdb::pairing::load_or_create_key(path)?);
        tracing::info!(path = %path.display(), "agents are answered with the household's key");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let stopped = async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        server::serve(database, cfg, stopped).await
    })
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Serve {
            listen,
            lan_listen,
            lan_device,
            db,
            ring_rows,
            ring_mib,
            rto_ms,
            treat_as_lan,
            log,
            agent_key_file,
        } => {
            tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).with_max_level(log).init();
            let cfg = server::Config {
                listen: vec![listen],
                lan_listen,
                lan_device,
                treat_as_lan,
                rto: Duration::from_millis(rto_ms.max(1)),
            };
            match serve(&db, Ring { rows: ring_rows, bytes: ring_mib << 20 }, agent_key_file.as_deref(), cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Query { text, server, json, timeout } => {
            let result = Client::connect(&server).and_then(|mut c| {
                c.opts.deadline = Duration::from_secs(timeout.max(1));
                c.request(&text)
            });
            let raw = match result {
                Ok(raw) => raw,
                Err(e) => {
                    eprintln!("hwdb: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let reply = match hwdb::client::parse_reply(&raw) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("hwdb: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if json {
                println!("{}", String::from_utf8_lossy(&raw));
            }
            if reply.status != "ok" {
                eprintln!("hwdb: {}", reply.message.unwrap_or_default());
                return ExitCode::FAILURE;
            }
            if !json {
                print_table(&reply);
            }
            ExitCode::SUCCESS
        }
        Cmd::Subscribe { query, server, listen, json } => {
            let run = || -> Result<(), ClientError> {
                let mut sub = Subscriber::bind(&listen)?;
                let addr = sub.local_addr()?;
                let mut c = Client::connect(&server)?;
                let r = c.query(&format!("subscribe {query} to {} {}", addr.ip(), addr.port()))?;
                eprintln!("hwdb: {}", r.message.unwrap_or_default());
                loop {
                    if let Some(n) = sub.recv(Duration::from_secs(3600))? {
                        if json {
                            println!("{}", serde_json::json!({"subscription": n.subscription, "rows": n.rows}));
                        } else {
                            print_table(&n);
                        }
                    }
                }
            };
            match run() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("hwdb: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
