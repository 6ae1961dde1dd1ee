//! One table: a fixed-budget ring of rows stored column by column.
//!
//! Columns are typed vectors (no per-row allocation, no per-cell enum tag); strings are
//! interned per table with reference counts so repeated addresses and names cost four
//! bytes a row and evicted strings are freed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::parse::Window;
use crate::value::{Cell, ColType, Value};

/// A multiply-rotate hash over 8-byte words (the FxHash scheme): interned keys are short
/// strings and group keys are `u64` words, for which it is several times faster than
/// SipHash; only local clients choose keys, so flooding resistance buys nothing here.
#[derive(Default)]
pub struct WordHash(u64);

impl WordHash {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517cc1b727220a95);
    }
}

impl Hasher for WordHash {
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.mix(b as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.mix(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
}

pub type WordHashBuild = BuildHasherDefault<WordHash>;

/// What one distinct string costs beyond its bytes: its `Arc` header, its map entry and
/// its slot (an estimate, so that a ring's byte budget follows its real footprint).
pub const STRING_OVERHEAD: usize = 64;

#[derive(Default)]
pub struct Interner {
    ids: HashMap<Arc<str>, u32, WordHashBuild>,
    strs: Vec<Option<(Arc<str>, u32)>>,
    free: Vec<u32>,
    /// The distinct strings held, each counted as its length plus `STRING_OVERHEAD`.
    bytes: usize,
}

impl Interner {
    pub fn lookup(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    fn acquire(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            if let Some((_, rc)) = &mut self.strs[id as usize] {
                *rc += 1;
            }
            return id;
        }
        let arc: Arc<str> = Arc::from(s);
        self.bytes += s.len() + STRING_OVERHEAD;
        let id = match self.free.pop() {
            Some(id) => {
                self.strs[id as usize] = Some((arc.clone(), 1));
                id
            }
            None => {
                self.strs.push(Some((arc.clone(), 1)));
                (self.strs.len() - 1) as u32
            }
        };
        self.ids.insert(arc, id);
        id
    }

    fn release(&mut self, id: u32) {
        let slot = &mut self.strs[id as usize];
        if let Some((s, rc)) = slot {
            *rc -= 1;
            if *rc == 0 {
                self.bytes -= s.len() + STRING_OVERHEAD;
                self.ids.remove(&**s);
                *slot = None;
                self.free.push(id);
            }
        }
    }

    pub fn get(&self, id: u32) -> &str {
        match &self.strs[id as usize] {
            Some((s, _)) => s,
            None => "",
        }
    }

    /// One more than the largest id a string may have (ids are dense slots).
    pub fn id_bound(&self) -> usize {
        self.strs.len()
    }

    pub fn distinct(&self) -> usize {
        self.ids.len()
    }
}

enum ColData {
    Int(Vec<i64>),
    Real(Vec<f64>),
    Str(Vec<u32>),
    Bool(Vec<bool>),
    Ts(Vec<u64>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: ColType,
}

pub const TSTAMP: &str = "tstamp";

/// How much one table's ring may hold: the oldest rows make way once either is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub rows: usize,
    /// Fixed-width cells of the rows held plus their distinct strings (see `Table::bytes`).
    pub bytes: usize,
}

impl Ring {
    pub const DEFAULT: Ring = Ring { rows: 200_000, bytes: 16 << 20 };

    pub fn rows(rows: usize) -> Ring {
        Ring { rows, ..Ring::DEFAULT }
    }
}

pub struct Table {
    pub name: String,
    /// `columns[0]` is the implicit `tstamp`.
    pub columns: Vec<Column>,
    pub persistent: bool,
    cap: usize,
    byte_cap: usize,
    /// Bytes of one row's fixed-width cells.
    row_bytes: usize,
    len: usize,
    /// Physical slot of the oldest row once the ring has wrapped.
    head: usize,
    data: Vec<ColData>,
    pub strings: Interner,
    pub inserted: u64,
    pub dropped: u64,
    last_ts: u64,
}

/// Grow a column towards the ring budget without overshooting it, so a full table
/// holds exactly `cap` slots and not the next power of two.
fn reserve<T>(v: &mut Vec<T>, cap: usize) {
    if v.len() == v.capacity() {
        let want = v.capacity().max(1024).min(cap - v.len());
        v.reserve_exact(want);
    }
}

impl Table {
    pub fn new(name: &str, user_cols: Vec<Column>, persistent: bool, ring: Ring) -> Table {
        let mut columns = vec![Column { name: TSTAMP.into(), ty: ColType::Timestamp }];
        columns.extend(user_cols);
        let data = columns
            .iter()
            .map(|c| match c.ty {
                ColType::Integer => ColData::Int(Vec::new()),
                ColType::Real => ColData::Real(Vec::new()),
                ColType::Varchar => ColData::Str(Vec::new()),
                ColType::Boolean => ColData::Bool(Vec::new()),
                ColType::Timestamp => ColData::Ts(Vec::new()),
            })
            .collect();
        let row_bytes = columns.iter().map(|c| c.ty.cell_bytes()).sum();
        Table {
            name: name.into(),
            columns,
            persistent,
            cap: ring.rows.max(1),
            byte_cap: ring.bytes,
            row_bytes,
            len: 0,
            head: 0,
            data,
            strings: Interner::default(),
            inserted: 0,
            dropped: 0,
            last_ts: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn col_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// Timestamps never go backwards within a table, so windows are binary searches.
    /// One batch shares one timestamp; the next batch is at least one ns later.
    pub fn next_ts(&self, now: u64) -> u64 {
        if self.inserted == 0 {
            now
        } else {
            now.max(self.last_ts + 1)
        }
    }

    pub fn last_ts(&self) -> u64 {
        self.last_ts
    }

    /// Physical slot of the `i`th oldest row.
    pub fn phys(&self, i: usize) -> usize {
        let p = self.head + i;
        if p >= self.cap {
            p - self.cap
        } else {
            p
        }
    }

    pub fn byte_capacity(&self) -> usize {
        self.byte_cap
    }

    /// What the ring's byte budget counts: the rows' fixed-width cells and their distinct strings.
    pub fn bytes(&self) -> usize {
        self.len * self.row_bytes + self.strings.bytes
    }

    /// The most a row can add to `bytes()`: its cells, and its strings if none is held yet.
    pub fn row_bytes(&self, cells: &[Cell]) -> usize {
        let strings: usize =
            cells.iter().map(|c| if let Cell::Str(s) = c { s.len() + STRING_OVERHEAD } else { 0 }).sum();
        self.row_bytes + strings
    }

    /// Forget the oldest row, freeing strings no other row holds.
    fn evict_oldest(&mut self) {
        let slot = self.head;
        for d in &self.data {
            if let ColData::Str(v) = d {
                self.strings.release(v[slot]);
            }
        }
        self.head = if self.head + 1 == self.cap { 0 } else { self.head + 1 };
        self.len -= 1;
        self.dropped += 1;
    }

    /// Append one row, dropping the oldest rows until it fits the ring's row and byte budgets
    /// (a row larger than the whole byte budget is the only one kept; callers refuse those).
    /// `cells` must match `columns[1..]` in number and type (checked by the caller); `ts`
    /// must not be older than the newest row.
    pub fn push(&mut self, ts: u64, cells: &[Cell]) {
        debug_assert_eq!(cells.len() + 1, self.columns.len());
        let need = self.row_bytes(cells);
        while self.len > 0 && (self.len == self.cap || self.bytes() + need > self.byte_cap) {
            self.evict_oldest();
        }
        // Slots fill in order from 0 and are reused once the ring has wrapped, so the next
        // slot is either one already allocated or the next one to allocate.
        let slot = self.phys(self.len);
        self.len += 1;
        let cap = self.cap;
        for (i, d) in self.data.iter_mut().enumerate() {
            let cell = if i == 0 { Cell::Ts(ts) } else { cells[i - 1] };
            macro_rules! put {
                ($v:expr, $x:expr) => {
                    if slot < $v.len() {
                        $v[slot] = $x;
                    } else {
                        reserve($v, cap);
                        $v.push($x);
                    }
                };
            }
            match (d, cell) {
                (ColData::Int(v), Cell::Int(x)) => put!(v, x),
                (ColData::Real(v), Cell::Real(x)) => put!(v, x),
                (ColData::Real(v), Cell::Int(x)) => put!(v, x as f64),
                (ColData::Str(v), Cell::Str(s)) => {
                    let id = self.strings.acquire(s);
                    put!(v, id)
                }
                (ColData::Bool(v), Cell::Bool(x)) => put!(v, x),
                (ColData::Ts(v), Cell::Ts(x)) => put!(v, x),
                (ColData::Ts(v), Cell::Int(x)) => put!(v, x.max(0) as u64),
                (d, c) => unreachable!(
                    "cell {c:?} does not fit column type {}",
                    match d {
                        ColData::Int(_) => "integer",
                        ColData::Real(_) => "real",
                        ColData::Str(_) => "varchar",
                        ColData::Bool(_) => "boolean",
                        ColData::Ts(_) => "timestamp",
                    }
                ),
            }
        }
        self.inserted += 1;
        self.last_ts = ts;
    }

    /// The physical slots of logical rows `from..to`, as at most two contiguous runs (the
    /// ring's wrap splits a range in two).
    pub fn slot_runs(&self, logical: std::ops::Range<usize>) -> [std::ops::Range<usize>; 2] {
        if logical.is_empty() {
            return [0..0, 0..0];
        }
        let (first, last) = (self.phys(logical.start), self.phys(logical.end - 1));
        if first <= last {
            [first..last + 1, 0..0]
        } else {
            [first..self.cap, 0..last + 1]
        }
    }

    /// An integer column's cells by physical slot (empty for a column of another type).
    pub fn ints(&self, col: usize) -> &[i64] {
        match &self.data[col] {
            ColData::Int(v) => v,
            _ => &[],
        }
    }
    /// A varchar column's interned string ids by physical slot.
    pub fn str_ids(&self, col: usize) -> &[u32] {
        match &self.data[col] {
            ColData::Str(v) => v,
            _ => &[],
        }
    }
    /// A timestamp column's cells by physical slot.
    pub fn tss(&self, col: usize) -> &[u64] {
        match &self.data[col] {
            ColData::Ts(v) => v,
            _ => &[],
        }
    }

    pub fn int(&self, phys: usize, col: usize) -> i64 {
        match &self.data[col] {
            ColData::Int(v) => v[phys],
            _ => 0,
        }
    }
    pub fn real(&self, phys: usize, col: usize) -> f64 {
        match &self.data[col] {
            ColData::Real(v) => v[phys],
            _ => 0.0,
        }
    }
    pub fn str_id(&self, phys: usize, col: usize) -> u32 {
        match &self.data[col] {
            ColData::Str(v) => v[phys],
            _ => 0,
        }
    }
    pub fn str(&self, phys: usize, col: usize) -> &str {
        self.strings.get(self.str_id(phys, col))
    }
    pub fn boolean(&self, phys: usize, col: usize) -> bool {
        match &self.data[col] {
            ColData::Bool(v) => v[phys],
            _ => false,
        }
    }
    pub fn ts(&self, phys: usize, col: usize) -> u64 {
        match &self.data[col] {
            ColData::Ts(v) => v[phys],
            _ => 0,
        }
    }

    pub fn value(&self, phys: usize, col: usize) -> Value {
        match &self.data[col] {
            ColData::Int(v) => Value::Int(v[phys]),
            ColData::Real(v) => Value::Real(v[phys]),
            ColData::Str(v) => Value::Str(self.strings.get(v[phys]).into()),
            ColData::Bool(v) => Value::Bool(v[phys]),
            ColData::Ts(v) => Value::Ts(v[phys]),
        }
    }

    /// A compact fixed-width key for grouping: the column's raw bits (string id for varchar).
    pub fn key_bits(&self, phys: usize, col: usize) -> u64 {
        match &self.data[col] {
            ColData::Int(v) => v[phys] as u64,
            ColData::Real(v) => v[phys].to_bits(),
            ColData::Str(v) => v[phys] as u64,
            ColData::Bool(v) => v[phys] as u64,
            ColData::Ts(v) => v[phys],
        }
    }

    /// First logical index whose timestamp satisfies `!pred` (timestamps are sorted).
    fn ts_partition(&self, pred: impl Fn(u64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if pred(self.ts(self.phys(mid), 0)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The logical index range a window selects, given the query's `now`.
    pub fn window(&self, w: Window, now: u64) -> std::ops::Range<usize> {
        let n = self.len;
        match w {
            Window::All => 0..n,
            Window::Range(d) => {
                let from = now.saturating_sub(d);
                self.ts_partition(|t| t < from)..n
            }
            Window::Rows(k) => n - (k.min(n as u64) as usize)..n,
            Window::Since(t) => self.ts_partition(|x| x <= t)..n,
            Window::Now if self.is_empty() => 0..0,
            Window::Now => {
                let newest = self.ts(self.phys(n - 1), 0);
                self.ts_partition(|t| t < newest)..n
            }
            Window::Last => n.saturating_sub(1)..n,
        }
    }

    /// Bytes reserved by the column vectors (shown by `show tables`; interned strings excluded).
    pub fn data_bytes(&self) -> usize {
        self.data
            .iter()
            .map(|d| match d {
                ColData::Int(v) => v.capacity() * 8,
                ColData::Real(v) => v.capacity() * 8,
                ColData::Str(v) => v.capacity() * 4,
                ColData::Bool(v) => v.capacity(),
                ColData::Ts(v) => v.capacity() * 8,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(cap: usize) -> Table {
        Table::new("T", vec![Column { name: "s".into(), ty: ColType::Varchar }], false, Ring::rows(cap))
    }

    #[test]
    fn ring_drops_oldest_and_frees_strings() {
        let mut tb = t(3);
        for i in 0..5u64 {
            let s = format!("s{i}");
            tb.push(100 + i, &[Cell::Str(&s)]);
        }
        assert_eq!(tb.len(), 3);
        assert_eq!(tb.dropped, 2);
        let got: Vec<_> = (0..3).map(|i| tb.str(tb.phys(i), 1).to_string()).collect();
        assert_eq!(got, ["s2", "s3", "s4"]);
        assert_eq!(tb.strings.distinct(), 3);
        assert_eq!(tb.strings.lookup("s0"), None);
        assert!(tb.data_bytes() <= 3 * 12);
    }

    #[test]
    fn ring_keeps_to_its_byte_budget() {
        // Each row: 8 bytes of tstamp, 4 of string id, and its own 100-byte string.
        let per_row = 8 + 4 + 100 + STRING_OVERHEAD;
        let mut tb = Table::new(
            "T",
            vec![Column { name: "s".into(), ty: ColType::Varchar }],
            false,
            Ring { rows: 100, bytes: 10 * per_row },
        );
        for i in 0..25u64 {
            tb.push(i, &[Cell::Str(&format!("{i:0100}"))]);
            assert!(tb.bytes() <= 10 * per_row);
        }
        assert_eq!((tb.len(), tb.dropped, tb.strings.distinct()), (10, 15, 10));
        assert_eq!(tb.window(Window::All, 0), 0..10);
        assert_eq!(tb.ts(tb.phys(0), 0), 15, "the oldest rows made way");
        // Repeated strings cost their bytes once, so short rows fill the row budget instead.
        for i in 0..200u64 {
            tb.push(100 + i, &[Cell::Str("same")]);
        }
        assert_eq!(tb.len(), 100);
        assert_eq!(tb.bytes(), 100 * 12 + 4 + STRING_OVERHEAD);
        assert_eq!(tb.str(tb.phys(99), 1), "same");
    }

    #[test]
    fn windows() {
        let mut tb = t(10);
        for ts in [10, 20, 20, 30] {
            tb.push(ts, &[Cell::Str("x")]);
        }
        assert_eq!(tb.window(Window::Range(10), 30), 1..4, "boundary row at now-range is included");
        assert_eq!(tb.window(Window::Range(10), 31), 3..4);
        assert_eq!(tb.window(Window::Since(20), 0), 3..4, "since is exclusive");
        assert_eq!(tb.window(Window::Since(19), 0), 1..4);
        assert_eq!(tb.window(Window::Rows(2), 0), 2..4);
        assert_eq!(tb.window(Window::Rows(99), 0), 0..4);
        assert_eq!(tb.window(Window::Last, 0), 3..4);
        assert_eq!(tb.window(Window::Now, 0), 3..4);
        tb.push(30, &[Cell::Str("y")]);
        assert_eq!(tb.window(Window::Now, 0), 3..5);
        assert_eq!(t(1).window(Window::Now, 0), 0..0);
        assert_eq!(t(1).window(Window::Last, 0), 0..0);
    }
}
