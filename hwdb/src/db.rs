//! The database: the table registry, statement execution, persistence and subscriptions.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::access::{self, Caller};
use crate::exec::{run_select, ColId, Limits, Pred, QueryResult, Scope};
use crate::pairing::{self, Key};
use crate::parse::{self, Error, ItemKind, Lit, Select, Stmt};
use crate::persist::Persist;
use crate::rate::{RowRates, LAN_ROWS};
use crate::table::{Column, Ring, Table, TSTAMP};
use crate::value::{Cell, ColType, Value};

pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0))
}

pub const MAX_TABLES: usize = 1024;
pub const MAX_COLUMNS: usize = 64;
/// Rows queued for one subscriber beyond this are dropped (and counted) rather than
/// letting a dead subscriber grow the server without bound.
pub const MAX_PENDING_ROWS: usize = 100_000;

use ColType::*;
pub type Schema = &'static [(&'static str, ColType)];
/// (name, persistent, columns). Leases, Events, AppPriority and LatencyChecks survive a
/// reboot: they are what the household configured or what explains the home's history.
pub const BUILTIN: &[(&str, bool, Schema)] = &[
    (
        "Flows",
        false,
        &[
            ("proto", Integer),
            ("saddr", Varchar),
            ("sport", Integer),
            ("daddr", Varchar),
            ("dport", Integer),
            ("packets", Integer),
            ("bytes", Integer),
        ],
    ),
    ("Links", false, &[("mac", Varchar), ("rssi", Integer), ("retries", Integer), ("packets", Integer)]),
    (
        "Leases",
        true,
        &[("mac", Varchar), ("ip", Varchar), ("hostname", Varchar), ("action", Varchar), ("state", Varchar)],
    ),
    ("Events", true, &[("kind", Varchar), ("mac", Varchar), ("message", Varchar)]),
    (
        "AppTuples",
        false,
        &[
            ("proto", Integer),
            ("saddr", Varchar),
            ("sport", Integer),
            ("daddr", Varchar),
            ("dport", Integer),
            ("app", Varchar),
            ("host", Varchar),
        ],
    ),
    ("AppTimeseries", false, &[("app", Varchar), ("bytes", Integer), ("packets", Integer)]),
    ("AppPriority", true, &[("app", Varchar), ("priority", Varchar)]),
    (
        "LatencyChecks",
        true,
        &[
            ("grade", Varchar),
            ("idle_ms", Real),
            ("loaded_ms", Real),
            ("loaded_p90_ms", Real),
            ("added_ms", Real),
            ("down_kbit", Integer),
            ("up_kbit", Integer),
            ("loss_pct", Real),
        ],
    ),
];

/// Where a subscription's rows go; the server implements it with a UDP sender task.
pub trait SubscriptionHub: Send + Sync {
    fn open(&self, id: u32, dest: SocketAddr, columns: Vec<(String, ColType)>) -> SubSink;
}

pub struct SubSink {
    pub tx: UnboundedSender<Vec<Vec<Value>>>,
    /// Rows sent but not yet taken by the sender; the sender decrements it.
    pub pending: Arc<AtomicUsize>,
}

struct Subscription {
    id: u32,
    preds: Vec<Pred>,
    proj: Vec<ColId>,
    sink: SubSink,
    dropped: u64,
}

pub struct Entry {
    pub table: Table,
    subs: Vec<Subscription>,
}

struct SubInfo {
    table: String,
    dest: SocketAddr,
    query: String,
}

pub struct Db {
    tables: RwLock<HashMap<String, Arc<RwLock<Entry>>>>,
    ring: Ring,
    persist: Mutex<Persist>,
    clock: Clock,
    pub limits: Limits,
    hub: OnceLock<Arc<dyn SubscriptionHub>>,
    next_sub: AtomicU32,
    subs: Mutex<BTreeMap<u32, SubInfo>>,
    /// Each LAN address's row rate (loopback is not limited).
    lan_rows: Mutex<RowRates>,
    /// The household's agent key, with which `prove` answers (`pairing`); none: `prove` is refused.
    agent_key: OnceLock<Key>,
}

// A panic elsewhere must not wedge every later query, so poisoned locks are entered anyway:
// every mutation leaves the structures consistent between statements.
fn rd<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn wr<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
fn lock<T>(l: &Mutex<T>) -> MutexGuard<'_, T> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

fn cell_for<'a>(lit: &'a Lit, ty: ColType) -> Option<Cell<'a>> {
    Some(match (lit, ty) {
        (Lit::Int(v), Integer) => Cell::Int(*v),
        (Lit::Int(v), Real) => Cell::Real(*v as f64),
        (Lit::Int(v), Timestamp) if *v >= 0 => Cell::Ts(*v as u64),
        (Lit::Real(v), Real) => Cell::Real(*v),
        (Lit::Str(s), Varchar) => Cell::Str(s),
        (Lit::Bool(b), Boolean) => Cell::Bool(*b),
        (Lit::Ts(t), Timestamp) => Cell::Ts(*t),
        _ => return None,
    })
}

fn describe_columns(cols: &[Column]) -> String {
    cols.iter().map(|c| format!("{} {}", c.name, c.ty.name())).collect::<Vec<_>>().join(", ")
}

impl Db {
    /// Open (or create) the SQLite file and build the built-in and persisted tables.
    /// `path` may be `:memory:` to keep nothing across restarts.
    pub fn open(path: &str, ring: Ring, clock: Clock, limits: Limits) -> crate::Result<Db> {
        let mut persist = Persist::open(path)?;
        let mut tables = HashMap::new();
        let catalog = persist.catalog()?;
        for (name, persistent, schema) in BUILTIN {
            let cols: Vec<Column> = schema.iter().map(|(n, t)| Column { name: n.to_string(), ty: *t }).collect();
            if *persistent {
                match persist.catalog_entry(name)? {
                    Some(stored) if stored != cols => {
                        return Err(format!(
                            "database {path}: table {name} has columns ({}), this hwdb expects ({})",
                            describe_columns(&stored),
                            describe_columns(&cols)
                        )
                        .into())
                    }
                    Some(_) => {}
                    None => persist.create(name, &cols)?,
                }
            }
            tables.insert(name.to_ascii_lowercase(), Table::new(name, cols, *persistent, ring));
        }
        for (name, cols) in catalog {
            tables.entry(name.to_ascii_lowercase()).or_insert_with(|| Table::new(&name, cols, true, ring));
        }
        for t in tables.values_mut().filter(|t| t.persistent) {
            let user_cols = t.columns[1..].to_vec();
            let rows = persist.load(&t.name, &user_cols, ring.rows).map_err(|e| format!("database {path}: {e}"))?;
            for (ts, vals) in rows {
                let cells: Vec<Cell> = vals.iter().filter_map(Cell::from_value).collect();
                let ts = ts.max(t.last_ts());
                t.push(ts, &cells);
            }
        }
        Ok(Db {
            tables: RwLock::new(
                tables
                    .into_iter()
                    .map(|(k, t)| (k, Arc::new(RwLock::new(Entry { table: t, subs: Vec::new() }))))
                    .collect(),
            ),
            ring,
            persist: Mutex::new(persist),
            clock,
            limits,
            hub: OnceLock::new(),
            next_sub: AtomicU32::new(1),
            subs: Mutex::new(BTreeMap::new()),
            lan_rows: Mutex::new(RowRates::new(LAN_ROWS, Instant::now())),
            agent_key: OnceLock::new(),
        })
    }

    pub fn set_hub(&self, hub: Arc<dyn SubscriptionHub>) {
        let _ = self.hub.set(hub);
    }

    pub fn set_agent_key(&self, key: Key) {
        let _ = self.agent_key.set(key);
    }

    pub fn now(&self) -> u64 {
        (self.clock)()
    }

    fn entry(&self, name: &str, pos: usize) -> Result<Arc<RwLock<Entry>>, Error> {
        rd(&self.tables)
            .get(&name.to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| Error::at(pos, format!("unknown table '{name}'")))
    }

    /// Screen, parse, authorize and run one statement. Errors come back as text for the client.
    /// A LAN caller's statement is charged to its address's row rate: an insert its rows, a
    /// `prove` one; a caller whose rate is spent is refused before its statement is parsed.
    pub fn execute(&self, text: &str, caller: &Caller) -> Result<QueryResult, String> {
        access::screen(caller, &self.limits, text.len(), text, true)?;
        self.admit(caller)?;
        let stmt = parse::parse(text).map_err(|e| e.render(text))?;
        access::authorize(caller, &stmt)?;
        if let Caller::Lan(ip) = caller {
            let rows = if let Stmt::Insert { rows, .. } = &stmt { *rows } else { 1 };
            lock(&self.lan_rows).take(*ip, rows, Instant::now())?;
        }
        self.run(stmt, text).map_err(|e| e.render(text))
    }

    /// Whether `caller` may send a statement now: a LAN address whose row rate is spent may not.
    pub fn admit(&self, caller: &Caller) -> Result<(), String> {
        match caller {
            Caller::Lan(ip) => lock(&self.lan_rows).ready(*ip, Instant::now()),
            Caller::Local => Ok(()),
        }
    }

    /// `execute`, encoded as the JSON reply the RPC carries (see PROTOCOL.md).
    pub fn execute_json(&self, text: &str, caller: &Caller) -> Vec<u8> {
        let reply = encode_reply(&self.execute(text, caller));
        if reply.len() > self.limits.max_result_bytes {
            return encode_reply(&Err(format!(
                "the result is {} bytes, more than the limit of {}; add a limit or narrow the window",
                reply.len(),
                self.limits.max_result_bytes
            )));
        }
        reply
    }

    fn run(&self, stmt: Stmt, text: &str) -> Result<QueryResult, Error> {
        match stmt {
            Stmt::Create { name, pos, persistent, cols } => {
                let mut seen: Vec<&str> = Vec::new();
                for c in &cols {
                    if c.name.eq_ignore_ascii_case(TSTAMP) {
                        return Err(Error::at(
                            c.pos,
                            "'tstamp' is implicit in every table; choose another column name",
                        ));
                    }
                    if seen.iter().any(|s| s.eq_ignore_ascii_case(c.name)) {
                        return Err(Error::at(c.pos, format!("duplicate column '{}'", c.name)));
                    }
                    seen.push(c.name);
                }
                if cols.len() > MAX_COLUMNS {
                    return Err(Error::at(pos, format!("more than {MAX_COLUMNS} columns")));
                }
                let cols = cols.iter().map(|c| Column { name: c.name.to_string(), ty: c.ty }).collect();
                self.create_table(name, pos, cols, persistent)
            }
            Stmt::Insert { table, pos, values, rows } => {
                let entry = self.entry(table, pos)?;
                let mut e = wr(&entry);
                self.insert(&mut e, pos, &values, rows)
            }
            Stmt::Select(sel) => self.select(&sel),
            Stmt::Subscribe { query, host, host_pos, port } => self.subscribe(&query, &host, host_pos, port, text),
            Stmt::Unsubscribe(id) => {
                let info = lock(&self.subs).remove(&id).ok_or_else(|| Error::plain(format!("no subscription {id}")))?;
                if let Some(entry) = rd(&self.tables).get(&info.table).cloned() {
                    wr(&entry).subs.retain(|s| s.id != id);
                }
                Ok(QueryResult::message(format!("unsubscribed {id}")))
            }
            Stmt::Save { query, name, pos } => self.save(&query, name, pos),
            Stmt::ShowTables => Ok(self.show_tables()),
            Stmt::ShowSubscriptions => Ok(self.show_subscriptions()),
            Stmt::Prove { nonce, nonce_pos, addr } => {
                let key = self
                    .agent_key
                    .get()
                    .ok_or_else(|| Error::plain("this router has no agent key (hwdb runs without --agent-key-file)"))?;
                let nonce = pairing::from_hex::<{ pairing::NONCE_BYTES }>(&nonce).ok_or_else(|| {
                    Error::at(nonce_pos, "the nonce must be 32 random bytes as 64 lowercase hex characters")
                })?;
                Ok(QueryResult {
                    columns: vec![("proof".into(), Varchar)],
                    rows: vec![vec![Value::Str(pairing::to_hex(&pairing::proof(key, &nonce, &addr)).into())]],
                    message: None,
                })
            }
            Stmt::Describe { table, pos } => {
                let entry = self.entry(table, pos)?;
                let e = rd(&entry);
                Ok(QueryResult {
                    columns: vec![("column".into(), Varchar), ("type".into(), Varchar)],
                    rows: e
                        .table
                        .columns
                        .iter()
                        .map(|c| vec![Value::Str(c.name.as_str().into()), Value::Str(c.ty.name().into())])
                        .collect(),
                    message: None,
                })
            }
        }
    }

    fn create_table(&self, name: &str, pos: usize, cols: Vec<Column>, persistent: bool) -> Result<QueryResult, Error> {
        let key = name.to_ascii_lowercase();
        let mut map = wr(&self.tables);
        if let Some(e) = map.get(&key) {
            let e = rd(e);
            return if e.table.columns[1..] == cols[..] && e.table.persistent == persistent {
                Ok(QueryResult::message(format!("table {} already exists", e.table.name)))
            } else {
                Err(Error::at(
                    pos,
                    format!(
                        "table {} already exists with columns ({})",
                        e.table.name,
                        describe_columns(&e.table.columns[1..])
                    ),
                ))
            };
        }
        if map.len() >= MAX_TABLES {
            return Err(Error::at(pos, format!("too many tables (limit {MAX_TABLES})")));
        }
        if persistent {
            lock(&self.persist)
                .create(name, &cols)
                .map_err(|e| Error::plain(format!("cannot persist table {name}: {e}")))?;
        }
        map.insert(
            key,
            Arc::new(RwLock::new(Entry { table: Table::new(name, cols, persistent, self.ring), subs: Vec::new() })),
        );
        Ok(QueryResult::message(format!("created {}table {name}", if persistent { "persistent " } else { "" })))
    }

    fn insert(&self, e: &mut Entry, pos: usize, values: &[(Lit, u32)], rows: usize) -> Result<QueryResult, Error> {
        let t = &mut e.table;
        let ncols = t.columns.len() - 1;
        let arity = values.len() / rows.max(1);
        if arity != ncols {
            return Err(Error::at(
                pos,
                format!(
                    "table {} has {ncols} columns ({}), got {arity} values per row",
                    t.name,
                    describe_columns(&t.columns[1..])
                ),
            ));
        }
        let mut cells = Vec::with_capacity(values.len());
        for ((lit, vpos), col) in values.iter().zip(t.columns[1..].iter().cycle()) {
            cells.push(cell_for(lit, col.ty).ok_or_else(|| {
                Error::at(
                    *vpos as usize,
                    format!("column {} is {}, got {} value", col.name, col.ty.name(), lit.type_name()),
                )
            })?);
        }
        for (row, vals) in cells.chunks(ncols).zip(values.chunks(ncols)) {
            let need = t.row_bytes(row);
            if need > t.byte_capacity() {
                return Err(Error::at(
                    vals[0].1 as usize,
                    format!(
                        "row of {need} bytes is larger than table {}'s ring of {} bytes",
                        t.name,
                        t.byte_capacity()
                    ),
                ));
            }
        }
        let ts = t.next_ts(self.now());
        if t.persistent {
            lock(&self.persist)
                .append(&t.name, ncols, ts, &cells, t.capacity())
                .map_err(|err| Error::plain(format!("cannot persist rows of {}: {err}", t.name)))?;
        }
        for row in cells.chunks(ncols) {
            t.push(ts, row);
        }
        if !e.subs.is_empty() {
            notify(e, rows);
        }
        Ok(QueryResult::message(format!("inserted {rows} row{}", if rows == 1 { "" } else { "s" })))
    }

    fn select(&self, sel: &Select) -> Result<QueryResult, Error> {
        let now = self.now();
        let a = self.entry(sel.sources[0].table, sel.sources[0].pos)?;
        if sel.sources.len() == 1 {
            let g = rd(&a);
            return run_select(sel, [&g.table, &g.table], now, &self.limits);
        }
        let b = self.entry(sel.sources[1].table, sel.sources[1].pos)?;
        if Arc::ptr_eq(&a, &b) {
            let g = rd(&a);
            return run_select(sel, [&g.table, &g.table], now, &self.limits);
        }
        // Fixed lock order (by table name) so two joins can never deadlock.
        let (ga, gb);
        if sel.sources[0].table.to_ascii_lowercase() < sel.sources[1].table.to_ascii_lowercase() {
            ga = rd(&a);
            gb = rd(&b);
        } else {
            gb = rd(&b);
            ga = rd(&a);
        }
        run_select(sel, [&ga.table, &gb.table], now, &self.limits)
    }

    fn subscribe(
        &self,
        sel: &Select,
        host: &str,
        host_pos: usize,
        port: u16,
        text: &str,
    ) -> Result<QueryResult, Error> {
        if sel.sources.len() != 1 || !sel.group_by.is_empty() || !sel.order_by.is_empty() || sel.limit.is_some() {
            return Err(Error::at(
                sel.pos,
                "subscribe takes a plain select: one table, optional where, no group by, order by or limit",
            ));
        }
        let hub = self.hub.get().ok_or_else(|| Error::plain("subscriptions need the network server"))?;
        let dest = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| Error::at(host_pos, format!("cannot resolve host '{host}'")))?;
        let src = &sel.sources[0];
        let entry = self.entry(src.table, src.pos)?;
        let mut e = wr(&entry);
        let (preds, proj, columns) = {
            let scope = Scope::single(&e.table);
            let mut conj = Vec::new();
            if let Some(f) = &sel.filter {
                conj.push(Pred::compile(&scope, f)?);
            }
            let proj: Vec<ColId> = match &sel.items {
                None => {
                    (0..e.table.columns.len()).map(|col| ColId { side: 0, col, ty: e.table.columns[col].ty }).collect()
                }
                Some(items) => items
                    .iter()
                    .map(|it| match &it.kind {
                        ItemKind::Col(c) => scope.resolve(c),
                        ItemKind::Agg(..) => Err(Error::at(it.pos, "subscribe cannot use aggregates")),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let columns: Vec<(String, ColType)> = match &sel.items {
                None => e.table.columns.iter().map(|c| (c.name.clone(), c.ty)).collect(),
                Some(items) => items
                    .iter()
                    .zip(&proj)
                    .map(|(it, id)| (it.alias.map(str::to_string).unwrap_or_else(|| it.kind.to_string()), id.ty))
                    .collect(),
            };
            (conj, proj, columns)
        };
        let id = self.next_sub.fetch_add(1, Ordering::Relaxed);
        let sink = hub.open(id, dest, columns);
        e.subs.push(Subscription { id, preds, proj, sink, dropped: 0 });
        let table = e.table.name.to_ascii_lowercase();
        drop(e);
        lock(&self.subs).insert(id, SubInfo { table, dest, query: text.trim().to_string() });
        Ok(QueryResult {
            columns: vec![("subscription".into(), Integer)],
            rows: vec![vec![Value::Int(id as i64)]],
            message: Some(format!("subscription {id} sends new rows to {dest}")),
        })
    }

    /// Called by the sender when a subscriber stops acknowledging.
    pub fn unsubscribe(&self, id: u32) {
        let info = lock(&self.subs).remove(&id);
        if let Some(info) = info {
            if let Some(entry) = rd(&self.tables).get(&info.table).cloned() {
                wr(&entry).subs.retain(|s| s.id != id);
            }
        }
    }

    fn save(&self, sel: &Select, name: &str, pos: usize) -> Result<QueryResult, Error> {
        let result = self.select(sel)?;
        let mut cols: Vec<Column> = Vec::new();
        for (n, ty) in &result.columns {
            let mut clean: String =
                n.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
            clean = clean.trim_matches('_').replace("__", "_");
            if clean.is_empty() || clean.starts_with(|c: char| c.is_ascii_digit()) {
                clean = format!("c_{clean}");
            }
            if clean == TSTAMP {
                clean = "src_tstamp".into();
            }
            let base = clean.clone();
            let mut k = 2;
            while cols.iter().any(|c| c.name == clean) {
                clean = format!("{base}_{k}");
                k += 1;
            }
            cols.push(Column { name: clean, ty: *ty });
        }
        if rd(&self.tables).contains_key(&name.to_ascii_lowercase()) {
            return Err(Error::at(pos, format!("table {name} already exists")));
        }
        for row in &result.rows {
            if let Some(i) = row.iter().position(|v| *v == Value::Null) {
                return Err(Error::plain(format!(
                    "column {} of the result holds NULL, which tables cannot store",
                    result.columns[i].0
                )));
            }
        }
        self.create_table(name, pos, cols, true)?;
        let entry = self.entry(name, pos)?;
        let mut e = wr(&entry);
        let t = &mut e.table;
        if !result.rows.is_empty() {
            let ncols = result.columns.len();
            let cells: Vec<Cell> = result.rows.iter().flat_map(|r| r.iter().filter_map(Cell::from_value)).collect();
            let ts = t.next_ts(self.now());
            lock(&self.persist)
                .append(&t.name, ncols, ts, &cells, t.capacity())
                .map_err(|err| Error::plain(format!("cannot persist rows of {}: {err}", t.name)))?;
            for row in cells.chunks(ncols) {
                t.push(ts, row);
            }
        }
        Ok(QueryResult::message(format!("saved {} rows as persistent table {name}", result.rows.len())))
    }

    fn show_tables(&self) -> QueryResult {
        let entries: Vec<_> = rd(&self.tables).values().cloned().collect();
        let mut rows: Vec<Vec<Value>> = entries
            .iter()
            .map(|entry| {
                let e = rd(entry);
                let t = &e.table;
                vec![
                    Value::Str(t.name.as_str().into()),
                    Value::Bool(t.persistent),
                    Value::Str(describe_columns(&t.columns[1..]).into()),
                    Value::Int(t.len() as i64),
                    Value::Int(t.capacity() as i64),
                    Value::Int(t.inserted as i64),
                    Value::Int(t.dropped as i64),
                    Value::Int(e.subs.len() as i64),
                    Value::Int(t.data_bytes() as i64),
                    Value::Int(t.bytes() as i64),
                    Value::Int(t.byte_capacity() as i64),
                ]
            })
            .collect();
        rows.sort_by(|a, b| crate::exec::compare_values(&a[0], &b[0]));
        QueryResult {
            columns: vec![
                ("table".into(), Varchar),
                ("persistent".into(), Boolean),
                ("columns".into(), Varchar),
                ("rows".into(), Integer),
                ("capacity".into(), Integer),
                ("inserted".into(), Integer),
                ("dropped".into(), Integer),
                ("subscriptions".into(), Integer),
                ("column_bytes".into(), Integer),
                ("bytes".into(), Integer),
                ("byte_budget".into(), Integer),
            ],
            rows,
            message: None,
        }
    }

    fn show_subscriptions(&self) -> QueryResult {
        let subs: Vec<(u32, String, SocketAddr, String)> =
            lock(&self.subs).iter().map(|(id, s)| (*id, s.table.clone(), s.dest, s.query.clone())).collect();
        let rows = subs
            .into_iter()
            .map(|(id, table, dest, query)| {
                let entry = rd(&self.tables).get(&table).cloned();
                let (name, dropped) = entry
                    .map(|en| {
                        let e = rd(&en);
                        let d = e.subs.iter().find(|s| s.id == id).map(|s| s.dropped).unwrap_or(0);
                        (e.table.name.clone(), d)
                    })
                    .unwrap_or((table, 0));
                vec![
                    Value::Int(id as i64),
                    Value::Str(name.into()),
                    Value::Str(dest.to_string().into()),
                    Value::Str(query.into()),
                    Value::Int(dropped as i64),
                ]
            })
            .collect();
        QueryResult {
            columns: vec![
                ("id".into(), Integer),
                ("table".into(), Varchar),
                ("destination".into(), Varchar),
                ("query".into(), Varchar),
                ("dropped".into(), Integer),
            ],
            rows,
            message: None,
        }
    }
}

/// Hand the newest `batch` rows to every subscription of this table whose filter they pass.
fn notify(e: &mut Entry, batch: usize) {
    let t = &e.table;
    let n = t.len();
    let first = n - batch.min(n);
    let tables = [t, t];
    e.subs.retain_mut(|s| {
        for p in &mut s.preds {
            p.bind(&tables);
        }
        let mut slots: Vec<[u32; 2]> = t.slot_runs(first..n).into_iter().flatten().map(|p| [p as u32; 2]).collect();
        for p in &s.preds {
            p.retain(&tables, &mut slots);
        }
        let rows: Vec<Vec<Value>> =
            slots.iter().map(|&[p, _]| s.proj.iter().map(|c| t.value(p as usize, c.col)).collect()).collect();
        if rows.is_empty() {
            return true;
        }
        if s.sink.pending.load(Ordering::Relaxed) + rows.len() > MAX_PENDING_ROWS {
            s.dropped += rows.len() as u64;
            return true;
        }
        s.sink.pending.fetch_add(rows.len(), Ordering::Relaxed);
        // A closed channel means the sender gave up on the subscriber.
        s.sink.tx.send(rows).is_ok()
    });
}

#[derive(Serialize)]
struct ColumnJson<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
}

#[derive(Serialize)]
struct ReplyJson<'a> {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscription: Option<u32>,
    columns: Vec<ColumnJson<'a>>,
    rows: &'a [Vec<Value>],
}

pub fn encode_reply(r: &Result<QueryResult, String>) -> Vec<u8> {
    let json = match r {
        Ok(q) => ReplyJson {
            status: "ok",
            message: q.message.as_deref(),
            subscription: None,
            columns: q.columns.iter().map(|(n, t)| ColumnJson { name: n, ty: t.name() }).collect(),
            rows: &q.rows,
        },
        Err(msg) => {
            ReplyJson { status: "error", message: Some(msg), subscription: None, columns: Vec::new(), rows: &[] }
        }
    };
    serde_json::to_vec(&json)
        .unwrap_or_else(|_| br#"{"status":"error","message":"cannot encode result","columns":[],"rows":[]}"#.to_vec())
}

/// The payload of a NOTIFY message: new rows for one subscription.
pub fn encode_notification(id: u32, columns: &[(String, ColType)], rows: &[Vec<Value>]) -> Vec<u8> {
    let json = ReplyJson {
        status: "ok",
        message: None,
        subscription: Some(id),
        columns: columns.iter().map(|(n, t)| ColumnJson { name: n, ty: t.name() }).collect(),
        rows,
    };
    serde_json::to_vec(&json).unwrap_or_default()
}
