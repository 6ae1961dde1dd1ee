//! SQLite backing for persistent tables.
//!
//! Every insert into a persistent table is one transaction that commits before the client
//! gets its acknowledgement, so a kill at any moment loses nothing acknowledged. WAL with
//! `synchronous=FULL` also survives power loss, which on a router is the common "restart".

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, ToSql};

use crate::table::Column;
use crate::value::{Cell, ColType, Value};

pub struct Persist {
    conn: Connection,
}

impl ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Cell::Int(v) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(v)),
            Cell::Real(v) => ToSqlOutput::Owned(rusqlite::types::Value::Real(v)),
            Cell::Str(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Cell::Bool(b) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(b as i64)),
            // Nanosecond timestamps fit i64 until 2262.
            Cell::Ts(t) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(t as i64)),
        })
    }
}

fn data_table(name: &str) -> String {
    // Names are validated identifiers, so quoting cannot be escaped out of.
    format!("\"t_{}\"", name.to_ascii_lowercase())
}

fn encode_columns(cols: &[Column]) -> String {
    cols.iter().map(|c| format!("{} {}", c.name, c.ty.name())).collect::<Vec<_>>().join(",")
}

fn decode_columns(s: &str) -> Option<Vec<Column>> {
    s.split(',')
        .map(|part| {
            let (name, ty) = part.split_once(' ')?;
            Some(Column { name: name.to_string(), ty: ColType::from_name(ty)? })
        })
        .collect()
}

impl Persist {
    pub fn open(path: &str) -> Result<Persist, String> {
        let fail = |e: rusqlite::Error| format!("cannot use database {path}: {e}");
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(fail)?;
        // SQLite opens lazily; the first statement is what discovers a non-database file.
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(fail)?;
        if check != "ok" {
            return Err(format!("cannot use database {path}: integrity check failed: {check}"));
        }
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS hwdb_catalog (name TEXT PRIMARY KEY, columns TEXT NOT NULL);",
        )
        .map_err(fail)?;
        Ok(Persist { conn })
    }

    /// Persistent tables recorded in the database, as (name, user columns).
    pub fn catalog(&self) -> Result<Vec<(String, Vec<Column>)>, String> {
        let mut st =
            self.conn.prepare("SELECT name, columns FROM hwdb_catalog ORDER BY name").map_err(|e| e.to_string())?;
        let rows =
            st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let (name, cols) = row.map_err(|e| e.to_string())?;
            let cols =
                decode_columns(&cols).ok_or_else(|| format!("catalog entry for {name} is malformed: {cols:?}"))?;
            out.push((name, cols));
        }
        Ok(out)
    }

    pub fn catalog_entry(&self, name: &str) -> Result<Option<Vec<Column>>, String> {
        let cols: Option<String> = self
            .conn
            .query_row("SELECT columns FROM hwdb_catalog WHERE name = ?1 COLLATE NOCASE", [name], |r| r.get(0))
            .optional()
            .map_err(|e| e.to_string())?;
        match cols {
            None => Ok(None),
            Some(c) => decode_columns(&c).map(Some).ok_or_else(|| format!("catalog entry for {name} is malformed")),
        }
    }

    pub fn create(&mut self, name: &str, cols: &[Column]) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        let mut ddl = format!("CREATE TABLE IF NOT EXISTS {} (tstamp INTEGER NOT NULL", data_table(name));
        for c in cols {
            let ty = match c.ty {
                ColType::Integer | ColType::Boolean | ColType::Timestamp => "INTEGER",
                ColType::Real => "REAL",
                ColType::Varchar => "TEXT",
            };
            ddl.push_str(&format!(", \"{}\" {ty} NOT NULL", c.name));
        }
        ddl.push(')');
        tx.execute(&ddl, []).map_err(|e| e.to_string())?;
        tx.execute("INSERT INTO hwdb_catalog (name, columns) VALUES (?1, ?2)", [name, &encode_columns(cols)])
            .map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())
    }

    /// The newest `limit` rows, oldest first.
    pub fn load(&self, name: &str, cols: &[Column], limit: usize) -> Result<Vec<(u64, Vec<Value>)>, String> {
        let sql = format!("SELECT * FROM {} ORDER BY rowid DESC LIMIT ?1", data_table(name));
        let mut st = self.conn.prepare(&sql).map_err(|e| e.to_string())?;
        let rows = st
            .query_map([limit as i64], |r| {
                let ts: i64 = r.get(0)?;
                let mut vals = Vec::with_capacity(cols.len());
                for (i, c) in cols.iter().enumerate() {
                    vals.push(match c.ty {
                        ColType::Integer => Value::Int(r.get(i + 1)?),
                        ColType::Real => Value::Real(r.get(i + 1)?),
                        ColType::Varchar => Value::Str(r.get::<_, String>(i + 1)?.into()),
                        ColType::Boolean => Value::Bool(r.get::<_, i64>(i + 1)? != 0),
                        ColType::Timestamp => Value::Ts(r.get::<_, i64>(i + 1)? as u64),
                    });
                }
                Ok((ts as u64, vals))
            })
            .map_err(|e| e.to_string())?;
        let mut out: Vec<_> = rows.collect::<Result<_, _>>().map_err(|e| format!("table {name}: {e}"))?;
        out.reverse();
        Ok(out)
    }

    /// Append rows (flat, `ncols` per row) in one transaction and trim the table to the
    /// newest `keep` rows, matching what the in-memory ring holds.
    pub fn append(&mut self, name: &str, ncols: usize, ts: u64, cells: &[Cell], keep: usize) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        {
            let marks = vec!["?"; ncols + 1].join(",");
            let mut st = tx
                .prepare_cached(&format!("INSERT INTO {} VALUES ({marks})", data_table(name)))
                .map_err(|e| e.to_string())?;
            let tsc = Cell::Ts(ts);
            for row in cells.chunks(ncols) {
                let params: Vec<&dyn ToSql> =
                    std::iter::once(&tsc as &dyn ToSql).chain(row.iter().map(|c| c as &dyn ToSql)).collect();
                st.execute(params.as_slice()).map_err(|e| e.to_string())?;
            }
            let last = tx.last_insert_rowid();
            tx.execute(&format!("DELETE FROM {} WHERE rowid <= ?1", data_table(name)), [last - keep as i64])
                .map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }
}
