//! Every query form against known data, with a hand-driven clock so window edges are exact.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hwdb::access::{Caller, FORBIDDEN};
use hwdb::db::Db;
use hwdb::exec::{Limits, QueryResult};
use hwdb::table::Ring;
use hwdb::value::Value;

const SEC: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * SEC;

struct Fixture {
    db: Db,
    clock: Arc<AtomicU64>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with(":memory:", 1000, Limits::default())
    }

    fn with(path: &str, ring: usize, limits: Limits) -> Fixture {
        let clock = Arc::new(AtomicU64::new(T0));
        let c = clock.clone();
        let db = Db::open(path, Ring::rows(ring), Arc::new(move || c.load(Ordering::SeqCst)), limits).unwrap();
        Fixture { db, clock }
    }

    fn at(&self, t: u64) {
        self.clock.store(t, Ordering::SeqCst);
    }

    fn ok(&self, q: &str) -> QueryResult {
        self.db.execute(q, &Caller::Local).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn err(&self, q: &str) -> String {
        match self.db.execute(q, &Caller::Local) {
            Ok(r) => panic!("{q} succeeded: {r:?}"),
            Err(e) => e,
        }
    }

    /// Rows rendered compactly, e.g. `["6|10.2.0.10|443"]`.
    fn rows(&self, q: &str) -> Vec<String> {
        self.ok(q)
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| match v {
                        Value::Null => "NULL".to_string(),
                        Value::Int(x) => x.to_string(),
                        Value::Real(x) => format!("{x}"),
                        Value::Str(s) => s.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Ts(t) => format!("t{}", (*t as i128 - T0 as i128) / SEC as i128),
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    }

    fn flows(&self) {
        // One batch per second from T0: (proto, saddr, sport, daddr, dport, packets, bytes).
        let batches = [
            "(6,'10.2.0.10',5000,'1.1.1.1',443,10,1000)",
            "(17,'10.2.0.10',5353,'8.8.8.8',53,1,80),(6,'10.2.0.14',6000,'1.1.1.1',443,5,500)",
            "(6,'10.2.0.14',6001,'9.9.9.9',80,2,200)",
            "(6,'10.2.0.18',7000,'1.1.1.1',443,7,700)",
        ];
        for (i, b) in batches.iter().enumerate() {
            self.at(T0 + i as u64 * SEC);
            self.ok(&format!("insert into Flows values {b}"));
        }
    }
}

#[test]
fn select_forms() {
    let f = Fixture::new();
    f.flows();
    assert_eq!(f.rows("select count(*) from Flows"), ["5"]);
    assert_eq!(
        f.rows("select * from Flows [last]"),
        ["t3|6|10.2.0.18|7000|1.1.1.1|443|7|700"],
        "* includes the implicit tstamp first"
    );
    assert_eq!(f.rows("select sport from Flows where saddr = '10.2.0.14'"), ["6000", "6001"]);
    assert_eq!(f.rows("select sport from Flows where saddr != '10.2.0.10' and dport = 443"), ["6000", "7000"]);
    assert_eq!(f.rows("select sport from Flows where bytes < 500"), ["5353", "6001"]);
    assert_eq!(f.rows("select sport from Flows where bytes <= 500"), ["5353", "6000", "6001"]);
    assert_eq!(f.rows("select sport from Flows where bytes > 700"), ["5000"]);
    assert_eq!(f.rows("select sport from Flows where bytes >= 700"), ["5000", "7000"]);
    assert_eq!(f.rows("select sport from Flows where proto = 17 or dport = 80"), ["5353", "6001"]);
    assert_eq!(f.rows("select sport from Flows where not (proto = 6 and dport = 443)"), ["5353", "6001"]);
    assert_eq!(
        f.rows("select sport from Flows where (dport = 80 or dport = 53) and not saddr = '10.2.0.14'"),
        ["5353"]
    );
    assert_eq!(f.rows("select sport from Flows where saddr = 'nobody'"), Vec::<String>::new());
    assert_eq!(f.rows("select sport from Flows where saddr != 'nobody' limit 2"), ["5000", "5353"]);
    assert_eq!(f.rows("select sport from Flows where daddr > '8'"), ["5353", "6001"], "strings order bytewise");
    assert_eq!(f.rows("select sport as p from Flows order by p desc limit 2"), ["7000", "6001"]);
    assert_eq!(f.rows("select sport from Flows order by bytes asc, sport"), ["5353", "6001", "6000", "7000", "5000"]);
    assert_eq!(f.rows("select sport from Flows where 1 = 1 and sport < 5354"), ["5000", "5353"]);
    assert_eq!(f.rows("select sport from Flows where tstamp >= 1700000002000000000"), ["6001", "7000"]);
}

#[test]
fn aggregates_and_groups() {
    let f = Fixture::new();
    f.flows();
    assert_eq!(
        f.rows("select saddr, count(*), sum(bytes), avg(bytes), min(sport), max(daddr) from Flows group by saddr"),
        ["10.2.0.10|2|1080|540|5000|8.8.8.8", "10.2.0.14|2|700|350|6000|9.9.9.9", "10.2.0.18|1|700|700|7000|1.1.1.1"],
        "groups come out in order of first appearance"
    );
    assert_eq!(
        f.rows("select daddr, sum(bytes) as total from Flows group by daddr order by total desc, daddr limit 2"),
        ["1.1.1.1|2200", "9.9.9.9|200"]
    );
    assert_eq!(
        f.rows("select dport, count(*) from Flows group by dport order by count(*) desc, dport"),
        ["443|3", "53|1", "80|1"]
    );
    assert_eq!(
        f.rows("select proto, dport, count(*) from Flows where proto = 6 group by proto, dport"),
        ["6|443|3", "6|80|1"]
    );
    assert_eq!(
        f.rows("select count(*), sum(bytes), avg(bytes), min(sport) from Flows where proto = 99"),
        ["0|NULL|NULL|NULL"]
    );
    assert_eq!(f.rows("select saddr, count(*) from Flows where proto = 99 group by saddr"), Vec::<String>::new());
    assert!(f.err("select saddr, count(*) from Flows").contains("column 'saddr' must appear in group by"));
    assert!(f.err("select sum(saddr) from Flows").contains("sum(saddr) needs a numeric column"));
    assert!(f.err("select * from Flows group by saddr").contains("select * cannot be combined with group by"));
    assert!(f
        .err("select saddr from Flows group by saddr order by bytes")
        .contains("must name a column of the select list"));
}

#[test]
fn window_edges() {
    let f = Fixture::new();
    f.flows(); // batches at T0, T0+1s (2 rows), T0+2s, T0+3s
    f.at(T0 + 3 * SEC);
    assert_eq!(
        f.rows("select sport from Flows [range 1 seconds]"),
        ["6001", "7000"],
        "a row exactly at now-range is included"
    );
    f.at(T0 + 3 * SEC + 1);
    assert_eq!(f.rows("select sport from Flows [range 1 seconds]"), ["7000"], "one ns later it is out");
    f.at(T0 + 10 * SEC);
    assert_eq!(f.rows("select sport from Flows [range 1 seconds]"), Vec::<String>::new());
    assert_eq!(f.rows("select count(*) from Flows [range 1 minutes]"), ["5"]);
    assert_eq!(f.rows("select count(*) from Flows [range 8 seconds]"), ["2"]);
    assert_eq!(f.rows("select count(*) from Flows [range 9 seconds]"), ["4"]);
    assert_eq!(f.rows("select count(*) from Flows [range 9000 milliseconds]"), ["4"]);
    assert_eq!(f.rows("select count(*) from Flows [range 1 hours]"), ["5"]);
    assert_eq!(f.rows("select sport from Flows [rows 2]"), ["6001", "7000"]);
    assert_eq!(f.rows("select sport from Flows [rows 0]"), Vec::<String>::new());
    assert_eq!(f.rows("select sport from Flows [last]"), ["7000"]);
    let t1 = T0 + SEC;
    assert_eq!(f.rows(&format!("select sport from Flows [since {t1}]")), ["6001", "7000"], "since is exclusive");
    assert_eq!(f.rows(&format!("select sport from Flows [since {}]", t1 - 1)), ["5353", "6000", "6001", "7000"]);
    assert_eq!(f.rows(&format!("select sport from Flows [since @{t1:x}@]")), ["6001", "7000"], "hex form");
    f.at(T0 + 20 * SEC);
    f.ok("insert into Flows values (1,'a',1,'b',1,1,1),(1,'a',2,'b',1,1,1),(1,'a',3,'b',1,1,1)");
    assert_eq!(f.rows("select sport from Flows [now]"), ["1", "2", "3"], "[now] is the newest batch");
    assert_eq!(f.rows("select sport from Flows [now] where sport > 1 limit 1"), ["2"]);
    // A clock that steps back still yields increasing timestamps.
    f.at(T0);
    f.ok("insert into Flows values (1,'a',4,'b',1,1,1)");
    assert_eq!(f.rows("select sport from Flows [now]"), ["4"]);
    assert_eq!(f.rows("select tstamp from Flows [last]"), ["t20"]);
}

#[test]
fn ring_budget_and_show_tables() {
    let f = Fixture::with(":memory:", 3, Limits::default());
    for i in 0..5 {
        f.ok(&format!("insert into Links values ('aa:bb:cc:dd:ee:{i:02}', -40, 0, {i})"));
    }
    assert_eq!(f.rows("select packets from Links"), ["2", "3", "4"]);
    let show = f.rows("show tables");
    let links = show.iter().find(|r| r.starts_with("Links|")).unwrap();
    assert_eq!(
        links,
        "Links|false|mac varchar, rssi integer, retries integer, packets integer|3|3|5|2|0|108|351|16777216"
    );
    assert!(show.iter().any(|r| r.starts_with("AppPriority|true|")));
    assert_eq!(
        f.rows("describe Links"),
        ["tstamp|timestamp", "mac|varchar", "rssi|integer", "retries|integer", "packets|integer"]
    );
    // A batch larger than the ring keeps its newest rows.
    f.ok("insert into Links values ('x',1,1,10),('x',1,1,11),('x',1,1,12),('x',1,1,13)");
    assert_eq!(f.rows("select packets from Links"), ["11", "12", "13"]);
}

#[test]
fn create_insert_types() {
    let f = Fixture::new();
    f.ok("create table Dev (name varchar, up boolean, load real, seen timestamp, n integer)");
    assert_eq!(
        f.ok("create table Dev (name varchar, up boolean, load real, seen timestamp, n integer)").message.unwrap(),
        "table Dev already exists"
    );
    assert!(f.err("create table dev (name varchar)").contains("already exists with columns"));
    f.ok("insert into Dev values ('tv', true, 1, @10@, -3), ('pc', false, 2.5, 99, 4)");
    assert_eq!(f.rows("select name, up, load, seen, n from dev where up = true"), ["tv|true|1|t-1699999999|-3"]);
    assert_eq!(f.rows("select name from Dev where load > 1.5 and seen = @63@"), ["pc"]);
    assert_eq!(f.err("insert into Dev values ('tv', 1, 1, 1, 1)"), "1:31: column up is boolean, got integer value");
    assert_eq!(f.err("insert into Dev values ('tv')"), "1:13: table Dev has 5 columns (name varchar, up boolean, load real, seen timestamp, n integer), got 1 values per row");
    assert_eq!(f.err("select nme from Dev"), "1:8: unknown column 'nme' in Dev");
    assert_eq!(f.err("select * from Nope"), "1:15: unknown table 'Nope'");
    assert_eq!(f.err("select * from Dev where name = 3"), "1:25: cannot compare name (varchar) with integer value");
    assert!(f.err("create table X (tstamp integer)").contains("'tstamp' is implicit"));
    assert!(f.err("create table X (a integer, A real)").contains("duplicate column 'A'"));
    assert_eq!(
        f.err("create table X (a blob)"),
        "1:19: expected column type (integer, real, varchar, boolean, timestamp), found 'blob'"
    );
}

#[test]
fn join_maps_flows_to_apps() {
    let f = Fixture::new();
    f.flows();
    f.ok("insert into AppTuples values (6,'10.2.0.10',5000,'1.1.1.1',443,'firefox','laptop'), \
          (6,'10.2.0.14',6001,'9.9.9.9',80,'curl','pi'), (6,'10.2.0.99',1,'1.1.1.1',443,'other','x')");
    f.at(T0 + 5 * SEC);
    assert_eq!(
        f.rows(
            "select f.saddr, f.sport, a.app, f.bytes from Flows [range 10 seconds] as f, AppTuples [range 1 hours] as a \
             where f.saddr = a.saddr and f.sport = a.sport"
        ),
        ["10.2.0.10|5000|firefox|1000", "10.2.0.14|6001|curl|200"]
    );
    assert_eq!(
        f.rows("select a.app, sum(f.bytes) from Flows f, AppTuples a where f.saddr = a.saddr and f.sport = a.sport and f.bytes > 500 group by a.app"),
        ["firefox|1000"]
    );
    assert_eq!(f.rows("select app, bytes from Flows [range 2 seconds] as f, AppTuples as a where f.saddr = a.saddr and f.sport = a.sport"), Vec::<String>::new());
    let star = f.ok("select * from Flows [last] f, AppTuples [last] a where f.daddr = a.daddr");
    assert_eq!(star.columns[0].0, "f.tstamp");
    assert_eq!(star.columns[8].0, "a.tstamp");
    assert_eq!(star.rows.len(), 1);
    assert!(f.err("select saddr from Flows f, AppTuples a").contains("column 'saddr' is ambiguous"));
    assert!(f.err("select * from Flows, Flows").contains("give one an alias"));
    assert_eq!(
        f.rows("select x.sport, y.sport from Flows x, Flows y where x.sport = y.sport and x.dport = 53"),
        ["5353|5353"]
    );
}

#[test]
fn save_and_persistence() {
    let dir = std::env::temp_dir().join(format!("hwdb-q-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.sqlite");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().unwrap();
    {
        let f = Fixture::with(p, 100, Limits::default());
        f.flows();
        f.ok("insert into AppPriority values ('zoom','high'),('steam','default')");
        f.ok("create persistent table Names (mac varchar, name varchar)");
        f.ok("insert into Names values ('aa','tv')");
        f.ok("create table Scratch (x integer)");
        assert_eq!(
            f.ok("save (select saddr, sum(bytes) from Flows group by saddr) as Usage").message.unwrap(),
            "saved 3 rows as persistent table Usage"
        );
        assert!(f.err("save (select * from Flows) as Usage").contains("already exists"));
    }
    let f = Fixture::with(p, 100, Limits::default());
    assert_eq!(f.rows("select app, priority from AppPriority"), ["zoom|high", "steam|default"]);
    assert_eq!(f.rows("select * from Names"), ["t3|aa|tv"], "original timestamps survive");
    assert_eq!(
        f.rows("select saddr, sum_bytes from Usage order by saddr"),
        ["10.2.0.10|1080", "10.2.0.14|700", "10.2.0.18|700"]
    );
    assert_eq!(f.rows("select count(*) from Flows"), ["0"], "ephemeral tables start empty");
    assert!(f.err("select * from Scratch").contains("unknown table"));
    // The persisted copy is trimmed to the ring budget like the ring itself.
    for i in 0..150 {
        f.ok(&format!("insert into Names values ('m{i}','n')"));
    }
    drop(f);
    let f = Fixture::with(p, 100, Limits::default());
    assert_eq!(f.rows("select count(*), min(mac) from Names where mac != 'aa'"), ["100|m100"]);
    drop(f);

    std::fs::write(&path, b"this is not a database, just some text that is long enough to look like a header...")
        .unwrap();
    let _ = std::fs::remove_file(dir.join("p.sqlite-wal"));
    let _ = std::fs::remove_file(dir.join("p.sqlite-shm"));
    let err = Db::open(p, Ring::rows(10), Arc::new(|| 0), Limits::default()).err().expect("corrupt file must not open");
    assert!(err.to_string().contains("not a database"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn work_is_bounded() {
    let limits = Limits {
        max_query_bytes: 4096,
        max_lan_query_bytes: 4096,
        max_scan_rows: 50,
        max_result_rows: 20,
        max_result_bytes: 1 << 20,
        max_join_pairs: 100,
    };
    let f = Fixture::with(":memory:", 1000, limits);
    let batch: Vec<String> = (0..40).map(|i| format!("(6,'10.0.0.{i}',{i},'1.1.1.1',443,1,1)")).collect();
    f.ok(&format!("insert into Flows values {}", batch.join(",")));
    assert!(f.err("select * from Flows").contains("more than the limit of 20"));
    assert_eq!(f.ok("select * from Flows limit 20").rows.len(), 20);
    assert_eq!(f.ok("select count(*) from Flows").rows[0][0], Value::Int(40));
    assert!(f.err("select * from Flows a, Flows b").contains("the windows hold 80 rows"));
    assert!(f.err("select * from Flows [rows 20] a, Flows [rows 20] b").contains("more than 100 row pairs"));
    assert_eq!(f.ok("select * from Flows [rows 20] a, Flows [rows 20] b where a.sport = b.sport").rows.len(), 20);
    let long = format!("select * from Flows where {}", vec!["sport = 1"; 1000].join(" or "));
    assert!(f.err(&long).contains("longer than the limit of 4096 bytes"));
}

#[test]
fn lan_callers_are_confined() {
    let f = Fixture::new();
    let lan = Caller::Lan("10.2.0.10".parse().unwrap());
    let ok = "insert into AppTuples values (6,'10.2.0.10',5000,'1.1.1.1',443,'firefox','laptop')";
    f.db.execute(ok, &lan).unwrap();
    for q in [
        "select * from AppTuples",
        "insert into AppTuples values (6,'10.2.0.11',5000,'1.1.1.1',443,'firefox','laptop')",
        "insert into Flows values (6,'10.2.0.10',5000,'1.1.1.1',443,1,1)",
    ] {
        assert!(f.db.execute(q, &lan).unwrap_err().starts_with(FORBIDDEN), "{q}");
    }
    assert_eq!(f.rows("select count(*) from AppTuples"), ["1"]);
    // Rights are checked before anything costly: a LAN caller's select is refused as such,
    // however malformed, and its statements are held to a smaller size.
    let malformed = format!("select * from Flows where {}", "(".repeat(10_000));
    assert!(f.db.execute(&malformed, &lan).unwrap_err().starts_with(FORBIDDEN));
    assert!(f.err(&malformed).contains("nested deeper"), "the same from loopback is parsed");
    let row = "(6,'10.2.0.10',5000,'1.1.1.1',443,'firefox','laptop')";
    let big = format!("insert into AppTuples values {}", vec![row; 1500].join(","));
    assert!(big.len() > 64 << 10);
    let err = f.db.execute(&big, &lan).unwrap_err();
    assert!(err.contains("longer than the limit of 65536 bytes for LAN clients"), "{err}");
    assert_eq!(f.ok(&big).message.as_deref(), Some("inserted 1500 rows"));
}

/// Thousands of random and mutated statements: the parser and executor must answer every
/// one with a result or an error, never a panic.
#[test]
fn random_input_never_panics() {
    let f = Fixture::with(":memory:", 50, Limits::default());
    f.flows();
    f.ok("insert into AppTuples values (6,'10.2.0.10',5000,'1.1.1.1',443,'firefox','laptop')");
    let seeds = [
        "select saddr, count(*), sum(bytes) from Flows [range 10 seconds] where dport = 443 and not (sport < 10 or saddr = 'x') group by saddr order by saddr desc limit 3",
        "select f.saddr, a.app from Flows [range 10 seconds] as f, AppTuples [range 1 hours] as a where f.saddr = a.saddr and f.sport = a.sport",
        "insert into Flows values (6,'10.2.0.10',5000,'1.1.1.1',443,10,1000),(17,'a',1,'b',2,3,4)",
        "select * from Flows [since @17a2b3c4d5e6f708@] where bytes >= 1.5e3",
        "create persistent table T (a integer, b varchar, c real, d boolean, e timestamp)",
        "save (select * from Flows [now]) as S",
        "show tables",
        "describe Flows",
        "select min(daddr), max(tstamp), avg(bytes) from Flows [rows 3]",
        "unsubscribe 4",
    ];
    let alphabet: Vec<&str> = vec![
        "select",
        "from",
        "where",
        "and",
        "or",
        "not",
        "(",
        ")",
        "[",
        "]",
        ",",
        "*",
        "=",
        "!=",
        "<",
        ">=",
        "'s'",
        "\"",
        "'",
        "1",
        "-1",
        "1.5",
        "@ff@",
        "@",
        "Flows",
        "AppTuples",
        "saddr",
        "count(",
        "sum(",
        "group",
        "by",
        "order",
        "limit",
        "range",
        "rows",
        "since",
        "now",
        "last",
        "seconds",
        "insert",
        "into",
        "values",
        "create",
        "table",
        "save",
        "as",
        "subscribe",
        "to",
        ".",
        ";",
        "--",
        "\n",
        "é",
        "\u{0}",
        "99999999999999999999",
        "true",
        "false",
    ];
    let mut state: u64 = 0x9e3779b97f4a7c15;
    let mut rnd = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..20000 {
        let q = match rnd(3) {
            0 => {
                let mut s: Vec<char> = seeds[rnd(seeds.len())].chars().collect();
                for _ in 0..1 + rnd(4) {
                    let i = rnd(s.len() + 1);
                    match rnd(3) {
                        0 if i < s.len() => {
                            s.remove(i);
                        }
                        1 => s.insert(i, alphabet[rnd(alphabet.len())].chars().next().unwrap_or(' ')),
                        _ => {
                            let tok: Vec<char> = alphabet[rnd(alphabet.len())].chars().collect();
                            for (k, c) in tok.into_iter().enumerate() {
                                s.insert(i + k, c);
                            }
                        }
                    }
                }
                s.into_iter().collect::<String>()
            }
            1 => (0..rnd(20)).map(|_| alphabet[rnd(alphabet.len())]).collect::<Vec<_>>().join(" "),
            _ => (0..rnd(60)).map(|_| char::from_u32(rnd(0x3000) as u32).unwrap_or('?')).collect(),
        };
        // Subscriptions need the network server; everything else runs for real.
        let _ = f.db.execute(&q, &Caller::Local);
        let _ = f.db.execute(&q, &Caller::Lan("10.2.0.10".parse().unwrap()));
    }
    assert_eq!(f.rows("select count(*) from Flows where sport = 5000").len(), 1);
}

/// Issue 10, item 9: AppTuples rows were bounded in count but not in bytes (44 MiB from
/// 1 KB strings). The ring's default byte budget holds whatever the strings' size.
#[test]
fn rings_are_bounded_by_bytes() {
    let f = Fixture::with(":memory:", 200_000, Limits::default());
    let big = "x".repeat(1000);
    for batch in 0..50 {
        let rows: Vec<String> =
            (0..1000).map(|i| format!("(6,'10.2.0.10',{i},'1.1.1.1',443,'{batch}-{i}-{big}','h')")).collect();
        f.ok(&format!("insert into AppTuples values {}", rows.join(",")));
    }
    let stats = |table: &str| {
        let r = f.ok("show tables");
        let col =
            |name: &str| r.columns.iter().position(|(n, _)| n == name).unwrap_or_else(|| panic!("no column {name}"));
        let row = r.rows.iter().find(|row| row[col("table")] == Value::Str(table.into())).unwrap();
        let int = |name: &str| match row[col(name)] {
            Value::Int(v) => v,
            ref v => panic!("{name}: {v:?}"),
        };
        (int("rows"), int("bytes"), int("byte_budget"))
    };
    let (rows, bytes, budget) = stats("AppTuples");
    assert!(bytes <= budget && budget <= 16 << 20, "{bytes} bytes held, budget {budget}");
    assert!(rows > 1000 && rows < 50_000, "{rows} rows");
    // The newest rows are the ones kept.
    assert_eq!(f.rows(&format!("select count(*) from AppTuples where app = '49-999-{big}'")), ["1"]);
    // Small rows still fill the row budget.
    let small: Vec<String> = (0..1000).map(|i| format!("('aa:{i}', -50, 1, 2)")).collect();
    for _ in 0..201 {
        f.ok(&format!("insert into Links values {}", small.join(",")));
    }
    assert_eq!(stats("Links").0, 200_000);
}

/// A random where-clause: its text, and a straightforward evaluation of it over one row
/// `(tstamp, a integer, s varchar, r real, b boolean)`, independent of the query engine.
enum Clause {
    Int(&'static str, i64),
    Str(&'static str, String),
    Real(&'static str, f64),
    Bool(bool),
    Ts(&'static str, u64),
    IntCol(&'static str),
    Not(Box<Clause>),
    And(Box<Clause>, Box<Clause>),
    Or(Box<Clause>, Box<Clause>),
}

const OPS: [&str; 6] = ["=", "!=", "<", "<=", ">", ">="];

fn holds<T: PartialOrd>(x: T, op: &str, y: T) -> bool {
    match op {
        "=" => x == y,
        "!=" => x != y,
        "<" => x < y,
        "<=" => x <= y,
        ">" => x > y,
        _ => x >= y,
    }
}

impl Clause {
    fn sql(&self) -> String {
        match self {
            Clause::Int(op, v) => format!("a {op} {v}"),
            Clause::Str(op, v) => format!("s {op} '{v}'"),
            Clause::Real(op, v) => format!("r {op} {v:?}"),
            Clause::Bool(v) => format!("b = {v}"),
            Clause::Ts(op, v) => format!("tstamp {op} {v}"),
            Clause::IntCol(op) => format!("a {op} c"),
            Clause::Not(c) => format!("not ({})", c.sql()),
            Clause::And(x, y) => format!("({}) and ({})", x.sql(), y.sql()),
            Clause::Or(x, y) => format!("({}) or ({})", x.sql(), y.sql()),
        }
    }

    fn eval(&self, row: &[Value]) -> bool {
        let (Value::Ts(ts), Value::Int(a), Value::Str(s), Value::Real(r), Value::Bool(b), Value::Int(c)) =
            (&row[0], &row[1], &row[2], &row[3], &row[4], &row[5])
        else {
            panic!("unexpected row {row:?}")
        };
        match self {
            Clause::Int(op, v) => holds(a, op, v),
            Clause::Str(op, v) => holds(s.as_ref(), op, v.as_str()),
            Clause::Real(op, v) => holds(r, op, v),
            Clause::Bool(v) => b == v,
            Clause::Ts(op, v) => holds(ts, op, v),
            Clause::IntCol(op) => holds(a, op, c),
            Clause::Not(x) => !x.eval(row),
            Clause::And(x, y) => x.eval(row) && y.eval(row),
            Clause::Or(x, y) => x.eval(row) || y.eval(row),
        }
    }
}

fn random_clause(depth: u32, rnd: &mut dyn FnMut(u64) -> u64, tstamps: &[u64]) -> Clause {
    let op = OPS[rnd(6) as usize];
    let sub = |rnd: &mut dyn FnMut(u64) -> u64| Box::new(random_clause(depth - 1, rnd, tstamps));
    match rnd(if depth == 0 { 6 } else { 9 }) {
        0 => Clause::Int(op, rnd(50) as i64 - 25),
        // 'zz' is held by no row.
        1 => {
            let v = if rnd(8) == 0 { "zz".into() } else { format!("h{}", rnd(12)) };
            Clause::Str(["=", "!="][rnd(2) as usize], v)
        }
        2 => Clause::Real(op, rnd(100) as f64 + 0.5 * rnd(2) as f64),
        3 => Clause::Bool(rnd(2) == 0),
        4 => Clause::Ts(op, tstamps[rnd(tstamps.len() as u64) as usize]),
        5 => Clause::IntCol(op),
        6 => Clause::Not(sub(rnd)),
        7 => Clause::And(sub(rnd), sub(rnd)),
        _ => Clause::Or(sub(rnd), sub(rnd)),
    }
}

/// The scan's column-at-a-time filters, chunking, ring wrap-around and newest-first order, and the aggregation's
/// chunked groups, against a row-by-row evaluation of random clauses over random rows.
#[test]
fn scans_and_aggregates_match_a_row_by_row_evaluation() {
    let mut state: u64 = 0x2545F4914F6CDD1D;
    let mut rnd = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    // A ring smaller than what is inserted, so the scanned rows wrap around its end, and more
    // rows than one scan chunk.
    let f = Fixture::with(":memory:", 9000, Limits::default());
    f.ok("create table T (a integer, s varchar, r real, b boolean, c integer)");
    for batch in 0..30u64 {
        f.at(T0 + batch * SEC);
        let rows: Vec<String> = (0..500)
            .map(|_| {
                let b = if rnd(2) == 0 { "true" } else { "false" };
                format!("({},'h{}',{}.5,{b},{})", rnd(40) as i64 - 20, rnd(12), rnd(100), rnd(40) as i64 - 20)
            })
            .collect();
        f.ok(&format!("insert into T values {}", rows.join(",")));
    }
    let all = f.ok("select * from T").rows;
    assert_eq!(all.len(), 9000);
    let tstamps: Vec<u64> = all.iter().map(|r| if let Value::Ts(t) = r[0] { t } else { 0 }).collect();

    let mut matched_some = 0;
    for i in 0..300 {
        let w = random_clause(2 + i % 2, &mut rnd, &tstamps);
        let expected: Vec<&Vec<Value>> = all.iter().filter(|r| w.eval(r)).collect();
        matched_some += usize::from(!expected.is_empty() && expected.len() < all.len());
        let q = format!("select * from T where {}", w.sql());
        let got = f.ok(&q).rows;
        assert_eq!(got.len(), expected.len(), "{q}");
        assert!(got.iter().zip(&expected).all(|(g, e)| g == *e), "{q}");

        let limit = rnd(50);
        let q = format!("select * from T where {} limit {limit}", w.sql());
        assert_eq!(f.ok(&q).rows.len(), expected.len().min(limit as usize), "{q}");

        // Newest first, scanned from the window's end: the same rows as the whole result reversed.
        let q = format!("select * from T where {} order by tstamp desc limit {limit}", w.sql());
        let newest: Vec<Vec<Value>> = expected.iter().rev().take(limit as usize).map(|r| (*r).clone()).collect();
        assert_eq!(f.ok(&q).rows, newest, "{q}");

        // Per group of s: count(*), sum(a), min(r), in the groups' order of appearance.
        let mut groups: Vec<(String, i64, i64, f64)> = Vec::new();
        for r in &expected {
            let (Value::Str(s), Value::Int(a), Value::Real(x)) = (&r[2], &r[1], &r[3]) else { panic!() };
            match groups.iter_mut().find(|g| g.0 == s.as_ref()) {
                Some(g) => {
                    g.1 += 1;
                    g.2 += a;
                    g.3 = g.3.min(*x);
                }
                None => groups.push((s.to_string(), 1, *a, *x)),
            }
        }
        let q = format!("select s, count(*), sum(a), min(r) from T where {} group by s", w.sql());
        let want: Vec<Vec<Value>> = groups
            .iter()
            .map(|(s, n, a, x)| vec![Value::Str(s.as_str().into()), Value::Int(*n), Value::Int(*a), Value::Real(*x)])
            .collect();
        assert_eq!(f.ok(&q).rows, want, "{q}");
        let q = format!("select count(*) from T where {}", w.sql());
        assert_eq!(f.ok(&q).rows, vec![vec![Value::Int(expected.len() as i64)]], "{q}");
    }
    // The clauses are not all trivially true or false.
    assert!(matched_some > 100, "{matched_some}");
}
