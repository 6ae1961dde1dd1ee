//! Compiling and running `select` over one table or a two-table join.
//!
//! Rows are addressed as `[u32; 2]` physical slots (both equal for single-table queries),
//! and cells are read straight from the column vectors while the caller holds the read
//! locks; only the final output is copied out as owned values.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Range;

use crate::parse::{AggFn, CmpOp, ColRef, Error, Expr, ItemKind, Lit, Operand, Select};
use crate::table::{Table, WordHashBuild};
use crate::value::{ColType, Value};

#[derive(Clone, Debug)]
pub struct Limits {
    pub max_query_bytes: usize,
    /// LAN peers only insert their own flows' rows, in modest batches.
    pub max_lan_query_bytes: usize,
    pub max_scan_rows: usize,
    pub max_result_rows: usize,
    pub max_result_bytes: usize,
    pub max_join_pairs: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_query_bytes: 1 << 20,
            max_lan_query_bytes: 64 << 10,
            max_scan_rows: 4_000_000,
            max_result_rows: 1_000_000,
            max_result_bytes: 32 << 20,
            max_join_pairs: 1_000_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryResult {
    pub columns: Vec<(String, ColType)>,
    pub rows: Vec<Vec<Value>>,
    pub message: Option<String>,
}

impl QueryResult {
    pub fn message(msg: impl Into<String>) -> QueryResult {
        QueryResult { message: Some(msg.into()), ..Default::default() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColId {
    pub side: usize,
    pub col: usize,
    pub ty: ColType,
}

pub type Row = [u32; 2];

pub struct Scope<'t> {
    pub tables: [&'t Table; 2],
    pub names: Vec<(&'t str, Option<&'t str>)>,
}

impl<'t> Scope<'t> {
    pub fn single(t: &'t Table) -> Scope<'t> {
        Scope { tables: [t, t], names: vec![(t.name.as_str(), None)] }
    }

    fn qualifier(&self, side: usize) -> &str {
        let (table, alias) = self.names[side];
        alias.unwrap_or(table)
    }

    pub fn resolve(&self, c: &ColRef) -> Result<ColId, Error> {
        let mut found: Vec<ColId> = Vec::new();
        for side in 0..self.names.len() {
            if let Some(q) = c.qual {
                let (table, alias) = self.names[side];
                let matches = match alias {
                    Some(a) => a.eq_ignore_ascii_case(q),
                    None => table.eq_ignore_ascii_case(q),
                };
                if !matches {
                    continue;
                }
            }
            let t = self.tables[side];
            if let Some(col) = t.col_index(c.name) {
                found.push(ColId { side, col, ty: t.columns[col].ty });
            }
        }
        match found.len() {
            1 => Ok(found[0]),
            0 if c.qual.is_some()
                && !(0..self.names.len()).any(|s| {
                    let (table, alias) = self.names[s];
                    alias.unwrap_or(table).eq_ignore_ascii_case(c.qual.unwrap_or(""))
                }) =>
            {
                Err(Error::at(c.pos, format!("unknown table or alias '{}'", c.qual.unwrap_or(""))))
            }
            0 => {
                let tables: Vec<_> = (0..self.names.len()).map(|s| self.tables[s].name.as_str()).collect();
                Err(Error::at(c.pos, format!("unknown column '{c}' in {}", tables.join(", "))))
            }
            _ => Err(Error::at(
                c.pos,
                format!(
                    "column '{}' is ambiguous; write {}.{0} or {}.{0}",
                    c.name,
                    self.qualifier(0),
                    self.qualifier(1)
                ),
            )),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Scalar<'t> {
    Null,
    Int(i64),
    Real(f64),
    Str(&'t str),
    Bool(bool),
    Ts(u64),
}

impl<'t> Scalar<'t> {
    fn of(v: &'t Value) -> Scalar<'t> {
        match v {
            Value::Null => Scalar::Null,
            Value::Int(x) => Scalar::Int(*x),
            Value::Real(x) => Scalar::Real(*x),
            Value::Str(x) => Scalar::Str(x),
            Value::Bool(x) => Scalar::Bool(*x),
            Value::Ts(x) => Scalar::Ts(*x),
        }
    }

    fn f64(self) -> Option<f64> {
        match self {
            Scalar::Int(x) => Some(x as f64),
            Scalar::Real(x) => Some(x),
            Scalar::Ts(x) => Some(x as f64),
            _ => None,
        }
    }

    fn to_value(self) -> Value {
        match self {
            Scalar::Null => Value::Null,
            Scalar::Int(x) => Value::Int(x),
            Scalar::Real(x) => Value::Real(x),
            Scalar::Str(x) => Value::Str(x.into()),
            Scalar::Bool(x) => Value::Bool(x),
            Scalar::Ts(x) => Value::Ts(x),
        }
    }
}

/// Total order for sorting; `None` only for incomparable types (rejected at compile time).
fn compare(a: Scalar, b: Scalar) -> Option<Ordering> {
    use Scalar::*;
    match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(&y)),
        (Ts(x), Ts(y)) => Some(x.cmp(&y)),
        (Int(x), Ts(y)) => Some((x as i128).cmp(&(y as i128))),
        (Ts(x), Int(y)) => Some((x as i128).cmp(&(y as i128))),
        (Str(x), Str(y)) => Some(x.cmp(y)),
        (Bool(x), Bool(y)) => Some(x.cmp(&y)),
        (Null, Null) => Some(Ordering::Equal),
        (Null, _) => Some(Ordering::Less),
        (_, Null) => Some(Ordering::Greater),
        (x, y) => x.f64()?.partial_cmp(&y.f64()?),
    }
}

pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    compare(Scalar::of(a), Scalar::of(b)).unwrap_or(Ordering::Equal)
}

#[inline]
fn get<'t>(tables: &[&'t Table; 2], row: Row, c: ColId) -> Scalar<'t> {
    let t = tables[c.side];
    let p = row[c.side] as usize;
    match c.ty {
        ColType::Integer => Scalar::Int(t.int(p, c.col)),
        ColType::Real => Scalar::Real(t.real(p, c.col)),
        ColType::Varchar => Scalar::Str(t.str(p, c.col)),
        ColType::Boolean => Scalar::Bool(t.boolean(p, c.col)),
        ColType::Timestamp => Scalar::Ts(t.ts(p, c.col)),
    }
}

#[derive(Debug, Clone)]
pub enum Opd {
    Col(ColId),
    Lit(Value),
}

#[derive(Debug, Clone)]
pub enum Pred {
    Const(bool),
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Not(Box<Pred>),
    Cmp {
        op: CmpOp,
        l: Opd,
        r: Opd,
    },
    /// String equality against a literal compares interned ids, not bytes. `id` is bound
    /// to the table's interner before each evaluation pass; `None` means no row can hold it.
    StrEq {
        c: ColId,
        lit: Box<str>,
        id: Option<u32>,
        negate: bool,
    },
    /// Integer column against an integer literal: the common case, read without `Scalar`.
    IntCmp {
        c: ColId,
        op: CmpOp,
        v: i64,
    },
    /// Timestamp column against a non-negative literal.
    TsCmp {
        c: ColId,
        op: CmpOp,
        v: u64,
    },
}

/// `lit op col` is `col flip(op) lit`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        o => o,
    }
}

fn lit_value(l: &Lit) -> Value {
    match l {
        Lit::Int(v) => Value::Int(*v),
        Lit::Real(v) => Value::Real(*v),
        Lit::Str(s) => Value::Str(s.as_ref().into()),
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Ts(t) => Value::Ts(*t),
    }
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Int(_) => "integer",
        Value::Real(_) => "real",
        Value::Str(_) => "string",
        Value::Bool(_) => "boolean",
        Value::Ts(_) => "timestamp",
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Family {
    Num,
    Str,
    Bool,
}

fn family_of_type(t: ColType) -> Family {
    match t {
        ColType::Varchar => Family::Str,
        ColType::Boolean => Family::Bool,
        _ => Family::Num,
    }
}

fn family_of_value(v: &Value) -> Family {
    match v {
        Value::Str(_) => Family::Str,
        Value::Bool(_) => Family::Bool,
        _ => Family::Num,
    }
}

impl Pred {
    pub fn compile(scope: &Scope, e: &Expr) -> Result<Pred, Error> {
        Ok(match e {
            Expr::And(a, b) => Pred::And(Box::new(Pred::compile(scope, a)?), Box::new(Pred::compile(scope, b)?)),
            Expr::Or(a, b) => Pred::Or(Box::new(Pred::compile(scope, a)?), Box::new(Pred::compile(scope, b)?)),
            Expr::Not(a) => Pred::Not(Box::new(Pred::compile(scope, a)?)),
            Expr::Cmp(op, l, r, pos) => {
                let opd = |o: &Operand| -> Result<(Opd, Family, String), Error> {
                    Ok(match o {
                        Operand::Col(c) => {
                            let id = scope.resolve(c)?;
                            (Opd::Col(id), family_of_type(id.ty), format!("{c} ({})", id.ty.name()))
                        }
                        Operand::Lit(l, _) => {
                            let v = lit_value(l);
                            let f = family_of_value(&v);
                            let desc = format!("{} value", value_kind(&v));
                            (Opd::Lit(v), f, desc)
                        }
                    })
                };
                let (lo, lf, ld) = opd(l)?;
                let (ro, rf, rd) = opd(r)?;
                if lf != rf {
                    return Err(Error::at(*pos, format!("cannot compare {ld} with {rd}")));
                }
                match (lo, ro) {
                    (Opd::Lit(a), Opd::Lit(b)) => Pred::Const(eval_op(*op, compare(Scalar::of(&a), Scalar::of(&b)))),
                    (Opd::Col(c), Opd::Lit(Value::Str(s))) | (Opd::Lit(Value::Str(s)), Opd::Col(c))
                        if matches!(op, CmpOp::Eq | CmpOp::Ne) =>
                    {
                        Pred::StrEq { c, lit: s, id: None, negate: *op == CmpOp::Ne }
                    }
                    (Opd::Col(c), Opd::Lit(v)) => typed(c, *op, v),
                    (Opd::Lit(v), Opd::Col(c)) => typed(c, flip(*op), v),
                    (l, r) => Pred::Cmp { op: *op, l, r },
                }
            }
        })
    }

    pub fn bind(&mut self, tables: &[&Table; 2]) {
        match self {
            Pred::And(a, b) | Pred::Or(a, b) => {
                a.bind(tables);
                b.bind(tables);
            }
            Pred::Not(a) => a.bind(tables),
            Pred::StrEq { c, lit, id, .. } => *id = tables[c.side].strings.lookup(lit),
            Pred::Const(_) | Pred::Cmp { .. } | Pred::IntCmp { .. } | Pred::TsCmp { .. } => {}
        }
    }

    pub fn eval(&self, tables: &[&Table; 2], row: Row) -> bool {
        match self {
            Pred::Const(b) => *b,
            Pred::And(a, b) => a.eval(tables, row) && b.eval(tables, row),
            Pred::Or(a, b) => a.eval(tables, row) || b.eval(tables, row),
            Pred::Not(a) => !a.eval(tables, row),
            Pred::StrEq { c, id, negate, .. } => {
                let hit = match id {
                    Some(id) => tables[c.side].str_id(row[c.side] as usize, c.col) == *id,
                    None => false,
                };
                hit != *negate
            }
            Pred::IntCmp { c, op, v } => eval_op(*op, Some(tables[c.side].int(row[c.side] as usize, c.col).cmp(v))),
            Pred::TsCmp { c, op, v } => eval_op(*op, Some(tables[c.side].ts(row[c.side] as usize, c.col).cmp(v))),
            Pred::Cmp { op, l, r } => eval_op(*op, compare(operand(tables, row, l), operand(tables, row, r))),
        }
    }

    /// Keep the rows this predicate holds for: `eval` over every row, with the common
    /// comparisons of a column with a literal run as tight loops over the column's cells.
    pub fn retain(&self, tables: &[&Table; 2], rows: &mut Vec<Row>) {
        match self {
            Pred::Const(true) => {}
            Pred::Const(false) => rows.clear(),
            Pred::And(a, b) => {
                a.retain(tables, rows);
                b.retain(tables, rows);
            }
            Pred::IntCmp { c, op, v } => retain_cmp(rows, tables[c.side].ints(c.col), c.side, *op, *v),
            Pred::TsCmp { c, op, v } => retain_cmp(rows, tables[c.side].tss(c.col), c.side, *op, *v),
            Pred::StrEq { id: None, negate, .. } => {
                if !negate {
                    rows.clear();
                }
            }
            Pred::StrEq { c, id: Some(id), negate, .. } => {
                let op = if *negate { CmpOp::Ne } else { CmpOp::Eq };
                retain_cmp(rows, tables[c.side].str_ids(c.col), c.side, op, *id)
            }
            _ => rows.retain(|r| self.eval(tables, *r)),
        }
    }

    /// Bit mask of the join sides this predicate reads.
    fn sides(&self) -> u8 {
        match self {
            Pred::Const(_) => 0,
            Pred::And(a, b) | Pred::Or(a, b) => a.sides() | b.sides(),
            Pred::Not(a) => a.sides(),
            Pred::StrEq { c, .. } | Pred::IntCmp { c, .. } | Pred::TsCmp { c, .. } => 1 << c.side,
            Pred::Cmp { l, r, .. } => {
                let m = |o: &Opd| match o {
                    Opd::Col(c) => 1u8 << c.side,
                    Opd::Lit(_) => 0,
                };
                m(l) | m(r)
            }
        }
    }
}

fn typed(c: ColId, op: CmpOp, v: Value) -> Pred {
    match (c.ty, &v) {
        (ColType::Integer, Value::Int(x)) => Pred::IntCmp { c, op, v: *x },
        (ColType::Timestamp, Value::Ts(x)) => Pred::TsCmp { c, op, v: *x },
        (ColType::Timestamp, Value::Int(x)) if *x >= 0 => Pred::TsCmp { c, op, v: *x as u64 },
        _ => Pred::Cmp { op, l: Opd::Col(c), r: Opd::Lit(v) },
    }
}

/// Keep the rows whose cell of `side` in `cells` compares with `v` by `op`: one loop per
/// operator, so the comparison is not re-dispatched per row.
fn retain_cmp<T: Ord + Copy>(rows: &mut Vec<Row>, cells: &[T], side: usize, op: CmpOp, v: T) {
    let cell = |r: &Row| cells[r[side] as usize];
    match op {
        CmpOp::Eq => rows.retain(|r| cell(r) == v),
        CmpOp::Ne => rows.retain(|r| cell(r) != v),
        CmpOp::Lt => rows.retain(|r| cell(r) < v),
        CmpOp::Le => rows.retain(|r| cell(r) <= v),
        CmpOp::Gt => rows.retain(|r| cell(r) > v),
        CmpOp::Ge => rows.retain(|r| cell(r) >= v),
    }
}

fn operand<'a>(tables: &[&'a Table; 2], row: Row, o: &'a Opd) -> Scalar<'a> {
    match o {
        Opd::Col(c) => get(tables, row, *c),
        Opd::Lit(v) => Scalar::of(v),
    }
}

fn eval_op(op: CmpOp, ord: Option<Ordering>) -> bool {
    let Some(o) = ord else { return false };
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Ne => o != Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Ge => o != Ordering::Less,
    }
}

fn split_and<'e, 'a>(e: &'e Expr<'a>, out: &mut Vec<&'e Expr<'a>>) {
    match e {
        Expr::And(a, b) => {
            split_and(a, out);
            split_and(b, out);
        }
        other => out.push(other),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum JoinKey<'t> {
    Int(i128),
    Bits(u64),
    Str(&'t str),
}

fn join_key<'t>(s: Scalar<'t>) -> JoinKey<'t> {
    match s {
        Scalar::Int(x) => JoinKey::Int(x as i128),
        Scalar::Ts(x) => JoinKey::Int(x as i128),
        Scalar::Real(x) => JoinKey::Bits(x.to_bits()),
        Scalar::Bool(x) => JoinKey::Bits(x as u64),
        Scalar::Str(x) => JoinKey::Str(x),
        Scalar::Null => JoinKey::Bits(u64::MAX),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Out {
    Col(ColId),
    Agg(AggFn, Option<ColId>),
}

enum Acc<'t> {
    Count(i64),
    Sum { i: i64, f: f64, any: bool },
    Avg { sum: f64, n: u64 },
    Min(Option<Scalar<'t>>),
    Max(Option<Scalar<'t>>),
}

impl<'t> Acc<'t> {
    fn new(f: AggFn) -> Acc<'t> {
        match f {
            AggFn::Count => Acc::Count(0),
            AggFn::Sum => Acc::Sum { i: 0, f: 0.0, any: false },
            AggFn::Avg => Acc::Avg { sum: 0.0, n: 0 },
            AggFn::Min => Acc::Min(None),
            AggFn::Max => Acc::Max(None),
        }
    }

    fn add(&mut self, v: Scalar<'t>) {
        match self {
            Acc::Count(n) => *n += 1,
            Acc::Sum { i, f, any } => {
                *any = true;
                match v {
                    Scalar::Int(x) => *i = i.saturating_add(x),
                    other => *f += other.f64().unwrap_or(0.0),
                }
            }
            Acc::Avg { sum, n } => {
                *sum += v.f64().unwrap_or(0.0);
                *n += 1;
            }
            Acc::Min(m) => {
                if m.is_none_or(|cur| compare(v, cur) == Some(Ordering::Less)) {
                    *m = Some(v);
                }
            }
            Acc::Max(m) => {
                if m.is_none_or(|cur| compare(v, cur) == Some(Ordering::Greater)) {
                    *m = Some(v);
                }
            }
        }
    }

    /// Count `n` more rows (for `count(*)`, which reads no cell).
    fn add_count(&mut self, n: usize) {
        if let Acc::Count(c) = self {
            *c += n as i64;
        }
    }

    fn finish(&self, real_sum: bool) -> Value {
        match self {
            Acc::Count(n) => Value::Int(*n),
            Acc::Sum { any: false, .. } => Value::Null,
            Acc::Sum { f, .. } if real_sum => Value::Real(*f),
            Acc::Sum { i, .. } => Value::Int(*i),
            Acc::Avg { n: 0, .. } => Value::Null,
            Acc::Avg { sum, n } => Value::Real(sum / *n as f64),
            Acc::Min(m) | Acc::Max(m) => m.map(|s| s.to_value()).unwrap_or(Value::Null),
        }
    }
}

fn agg_type(f: AggFn, arg: Option<ColId>, pos: usize, shown: &ItemKind) -> Result<ColType, Error> {
    match (f, arg) {
        (AggFn::Count, _) => Ok(ColType::Integer),
        (AggFn::Sum, Some(c)) if matches!(c.ty, ColType::Integer | ColType::Real) => Ok(c.ty),
        (AggFn::Avg, Some(c)) if c.ty.is_numeric() => Ok(ColType::Real),
        (AggFn::Min | AggFn::Max, Some(c)) => Ok(c.ty),
        (_, Some(c)) => {
            Err(Error::at(pos, format!("{shown} needs a numeric column, {} is {}", shown_arg(shown), c.ty.name())))
        }
        (_, None) => Err(Error::at(pos, format!("{shown} needs a column"))),
    }
}

fn shown_arg(k: &ItemKind) -> String {
    match k {
        ItemKind::Agg(_, Some(c)) => c.to_string(),
        other => other.to_string(),
    }
}

/// What a select asks of its tables, resolved before any row is read: the names in scope, the
/// windows' row ranges and the output columns.
struct Plan<'t> {
    scope: Scope<'t>,
    ranges: Vec<Range<usize>>,
    outs: Vec<(String, Out)>,
    /// Grouped, or with an aggregate in the select list: one output row per group.
    aggregate: bool,
    /// A query without aggregates: the columns its rows are ordered by, each descending or not.
    row_order: Vec<(ColId, bool)>,
    /// Ordered by one table's `tstamp` alone: the scan's own order (newest first if descending).
    time_order: bool,
    /// The limit when the scan may stop at it (no aggregate; no order by, or the scan's own).
    early_limit: Option<u64>,
}

impl Plan<'_> {
    fn newest_first(&self) -> bool {
        self.time_order && self.row_order[0].1
    }
}

/// Run a select against the locked tables. `tables[1]` is ignored unless the query joins.
/// Plan, scan the windows, then aggregate or sort; the limits hold at every step.
pub fn run_select(sel: &Select, tables: [&Table; 2], now: u64, limits: &Limits) -> Result<QueryResult, Error> {
    let plan = plan(sel, tables, now, limits)?;
    let rows = if plan.aggregate {
        let mut agg = Aggregation::new(sel, &plan)?;
        scan(sel, &plan, limits, &mut |chunk| agg.add(chunk, limits).map(|()| true))?;
        let mut groups = agg.finish();
        sort_groups(sel, &plan, &mut groups)?;
        limited(groups, sel.limit, limits)?
    } else {
        // The scan may stop once it has the rows a limit without `order by` asks for.
        let stop_at = plan.early_limit.map(|l| l.min(usize::MAX as u64) as usize).unwrap_or(usize::MAX);
        let mut rows = Vec::new();
        scan(sel, &plan, limits, &mut |chunk| {
            rows.extend_from_slice(&chunk[..chunk.len().min(stop_at - rows.len())]);
            Ok(rows.len() < stop_at)
        })?;
        let rows = limited(sort(sel, &plan, rows), sel.limit, limits)?;
        project(&plan, &rows)
    };
    Ok(QueryResult { columns: plan.columns(), rows, message: None })
}

fn plan<'t>(sel: &Select<'t>, tables: [&'t Table; 2], now: u64, limits: &Limits) -> Result<Plan<'t>, Error> {
    let nsrc = sel.sources.len();
    let scope = Scope {
        tables,
        names: sel.sources.iter().enumerate().map(|(i, s)| (tables[i].name.as_str(), s.alias)).collect(),
    };
    if nsrc == 2 {
        let q = |i: usize| scope.qualifier(i).to_ascii_lowercase();
        if q(0) == q(1) {
            return Err(Error::at(sel.sources[1].pos, "both sides of a join have the same name; give one an alias"));
        }
    }
    let ranges: Vec<_> = sel.sources.iter().enumerate().map(|(i, s)| tables[i].window(s.window, now)).collect();
    let scanned: usize = ranges.iter().map(|r| r.len()).sum();
    if scanned > limits.max_scan_rows {
        return Err(Error::plain(format!(
            "the windows hold {scanned} rows, more than the scan limit of {}; narrow the window",
            limits.max_scan_rows
        )));
    }

    let mut outs: Vec<(String, Out)> = Vec::new();
    let grouped = !sel.group_by.is_empty();
    match &sel.items {
        None => {
            if grouped {
                return Err(Error::at(sel.pos, "select * cannot be combined with group by"));
            }
            for (side, table) in tables.iter().enumerate().take(nsrc) {
                for (col, c) in table.columns.iter().enumerate() {
                    let name = if nsrc == 1 { c.name.clone() } else { format!("{}.{}", scope.qualifier(side), c.name) };
                    outs.push((name, Out::Col(ColId { side, col, ty: c.ty })));
                }
            }
        }
        Some(items) => {
            for it in items {
                let out = match &it.kind {
                    ItemKind::Col(c) => Out::Col(scope.resolve(c)?),
                    ItemKind::Agg(f, arg) => {
                        let arg = arg.as_ref().map(|c| scope.resolve(c)).transpose()?;
                        agg_type(*f, arg, it.pos, &it.kind)?;
                        Out::Agg(*f, arg)
                    }
                };
                outs.push((it.alias.map(str::to_string).unwrap_or_else(|| it.kind.to_string()), out));
            }
        }
    }
    let aggregate = grouped || outs.iter().any(|(_, o)| matches!(o, Out::Agg(..)));
    let row_order = if aggregate { Vec::new() } else { row_order(sel, &scope, &outs)? };
    let time_order = nsrc == 1 && row_order.len() == 1 && row_order[0].0.col == 0;
    let early_limit = if !aggregate && (row_order.is_empty() || time_order) { sel.limit } else { None };
    Ok(Plan { scope, ranges, outs, aggregate, row_order, time_order, early_limit })
}

impl Plan<'_> {
    /// The result's columns: names and types.
    fn columns(&self) -> Vec<(String, ColType)> {
        self.outs
            .iter()
            .map(|(name, o)| {
                let ty = match o {
                    Out::Col(c) => c.ty,
                    Out::Agg(f, arg) => agg_type(*f, *arg, 0, &ItemKind::Agg(*f, None)).unwrap_or(ColType::Integer),
                };
                (name.clone(), ty)
            })
            .collect()
    }
}

/// The first `limit` rows, if the result may hold them.
fn limited<T>(mut rows: Vec<T>, limit: Option<u64>, limits: &Limits) -> Result<Vec<T>, Error> {
    if let Some(l) = limit {
        rows.truncate(l.min(usize::MAX as u64) as usize);
    }
    check_rows(rows.len(), limits)?;
    Ok(rows)
}

/// A query without aggregates: its matching rows in `order by`'s order (a select-list alias or
/// a column of the tables), else in time order.
fn sort(sel: &Select, plan: &Plan, rows: Vec<Row>) -> Vec<Row> {
    if plan.row_order.is_empty() || plan.time_order {
        // A single table's rows come from the scan in tstamp order, newest first if asked.
        return rows;
    }
    sort_rows(rows, &plan.row_order, sel.limit, &plan.scope.tables)
}

/// The columns a query without aggregates is ordered by: a select-list alias or a column of the
/// tables.
fn row_order(sel: &Select, scope: &Scope, outs: &[(String, Out)]) -> Result<Vec<(ColId, bool)>, Error> {
    let mut keys = Vec::new();
    for k in &sel.order_by {
        let ItemKind::Col(c) = &k.key else {
            return Err(Error::at(k.pos, "order by an aggregate needs an aggregate query"));
        };
        let by_alias = match (c.qual, &sel.items) {
            (None, Some(items)) => items.iter().zip(outs).find_map(|(it, (_, o))| match (it.alias, o) {
                (Some(a), Out::Col(id)) if a.eq_ignore_ascii_case(c.name) => Some(*id),
                _ => None,
            }),
            _ => None,
        };
        let id = match by_alias {
            Some(id) => id,
            None => scope.resolve(c)?,
        };
        keys.push((id, k.desc));
    }
    Ok(keys)
}

/// The output columns' values of each row.
fn project(plan: &Plan, rows: &[Row]) -> Vec<Vec<Value>> {
    let tables = plan.scope.tables;
    rows.iter()
        .map(|r| {
            plan.outs
                .iter()
                .map(|(_, o)| match o {
                    Out::Col(c) => tables[c.side].value(r[c.side] as usize, c.col),
                    Out::Agg(..) => Value::Null,
                })
                .collect()
        })
        .collect()
}

/// An aggregate query's groups (of `group by`'s columns; one group without), fed the matching
/// rows chunk by chunk as the scan finds them.
struct Aggregation<'p, 't> {
    plan: &'p Plan<'t>,
    group_cols: Vec<ColId>,
    /// Each aggregate's argument, in select-list order.
    args: Vec<Option<ColId>>,
    /// Each group's first row, whose cells the group's plain columns show.
    reps: Vec<Row>,
    /// The groups' accumulators, `args.len()` per group in group order (one vector, so that
    /// adding a row's value is one index).
    accs: Vec<Acc<'t>>,
    /// One varchar group column (the usual case: by address, by app) finds its group by the
    /// string's interned id; another single column hashes a bare word instead of a boxed slice.
    by_id: Vec<u32>,
    index1: HashMap<u64, u32, WordHashBuild>,
    index: HashMap<Box<[u64]>, u32, WordHashBuild>,
    /// The group of each row of the chunk being added.
    chunk_groups: Vec<u32>,
}

impl<'p, 't> Aggregation<'p, 't> {
    fn new(sel: &Select, plan: &'p Plan<'t>) -> Result<Aggregation<'p, 't>, Error> {
        let group_cols: Vec<ColId> = sel.group_by.iter().map(|c| plan.scope.resolve(c)).collect::<Result<_, _>>()?;
        if let Some(items) = &sel.items {
            for (it, (_, o)) in items.iter().zip(&plan.outs) {
                if let Out::Col(c) = o {
                    if !group_cols.contains(c) {
                        return Err(Error::at(
                            it.pos,
                            format!("column '{}' must appear in group by or inside an aggregate", it.kind),
                        ));
                    }
                }
            }
        }
        let by_id = match group_cols[..] {
            [c] if c.ty == ColType::Varchar => vec![u32::MAX; plan.scope.tables[c.side].strings.id_bound()],
            _ => Vec::new(),
        };
        let args = plan.outs.iter().filter_map(|(_, o)| if let Out::Agg(_, a) = o { Some(*a) } else { None }).collect();
        let mut agg = Aggregation {
            plan,
            group_cols,
            args,
            reps: Vec::new(),
            accs: Vec::new(),
            by_id,
            index1: HashMap::default(),
            index: HashMap::default(),
            chunk_groups: Vec::new(),
        };
        if agg.group_cols.is_empty() {
            agg.new_group([0, 0]);
        }
        Ok(agg)
    }

    fn new_group(&mut self, rep: Row) -> u32 {
        let accs =
            self.plan.outs.iter().filter_map(|(_, o)| if let Out::Agg(f, _) = o { Some(Acc::new(*f)) } else { None });
        self.accs.extend(accs);
        self.reps.push(rep);
        (self.reps.len() - 1) as u32
    }

    /// The group of row `r`, a new one if none has its key yet.
    fn group_of(&mut self, r: Row, key: &mut Vec<u64>, limits: &Limits) -> Result<u32, Error> {
        let tables = self.plan.scope.tables;
        key.clear();
        key.extend(self.group_cols.iter().map(|c| tables[c.side].key_bits(r[c.side] as usize, c.col)));
        let found = if key.len() == 1 { self.index1.get(&key[0]) } else { self.index.get(key.as_slice()) };
        match found {
            Some(&g) => Ok(g),
            None => self.add_group(r, key, limits),
        }
    }

    /// A new group, whose first row is `r` and key `key`.
    fn add_group(&mut self, r: Row, key: &[u64], limits: &Limits) -> Result<u32, Error> {
        if self.reps.len() >= limits.max_result_rows {
            return Err(Error::plain(format!("more than {} groups", limits.max_result_rows)));
        }
        let g = self.new_group(r);
        if !self.by_id.is_empty() {
            self.by_id[key[0] as usize] = g;
        } else if key.len() == 1 {
            self.index1.insert(key[0], g);
        } else {
            self.index.insert(key.into(), g);
        }
        Ok(g)
    }

    /// Add a chunk of matching rows: their groups first, then each aggregate over the chunk,
    /// so that an aggregate's argument is read as a run of one column's cells.
    fn add(&mut self, rows: &[Row], limits: &Limits) -> Result<(), Error> {
        let tables = self.plan.scope.tables;
        let mut chunk_groups = std::mem::take(&mut self.chunk_groups);
        chunk_groups.clear();
        if self.group_cols.is_empty() {
            chunk_groups.resize(rows.len(), 0);
        } else if !self.by_id.is_empty() {
            let c = self.group_cols[0];
            let ids = tables[c.side].str_ids(c.col);
            for &r in rows {
                let id = ids[r[c.side] as usize];
                chunk_groups.push(match self.by_id[id as usize] {
                    u32::MAX => self.add_group(r, &[u64::from(id)], limits)?,
                    g => g,
                });
            }
        } else {
            let mut key = Vec::with_capacity(self.group_cols.len());
            for &r in rows {
                chunk_groups.push(self.group_of(r, &mut key, limits)?);
            }
        }
        let n = self.args.len();
        for (k, arg) in self.args.iter().enumerate() {
            let acc = |g: u32| g as usize * n + k;
            match arg {
                None if self.group_cols.is_empty() => self.accs[k].add_count(rows.len()),
                None => {
                    for &g in &chunk_groups {
                        self.accs[acc(g)].add_count(1);
                    }
                }
                Some(c) if c.ty == ColType::Integer => {
                    let cells = tables[c.side].ints(c.col);
                    for (r, &g) in rows.iter().zip(&chunk_groups) {
                        self.accs[acc(g)].add(Scalar::Int(cells[r[c.side] as usize]));
                    }
                }
                Some(c) => {
                    for (r, &g) in rows.iter().zip(&chunk_groups) {
                        self.accs[acc(g)].add(get(&tables, *r, *c));
                    }
                }
            }
        }
        self.chunk_groups = chunk_groups;
        Ok(())
    }

    /// One output row per group, in the groups' order of appearance: its columns from the
    /// group's first row, its aggregates over all of its rows.
    fn finish(self) -> Vec<Vec<Value>> {
        let (tables, outs) = (self.plan.scope.tables, &self.plan.outs);
        let n = self.args.len();
        self.reps
            .iter()
            .enumerate()
            .map(|(g, rep)| {
                let mut accs = self.accs[g * n..][..n].iter();
                outs.iter()
                    .map(|(_, o)| match o {
                        Out::Col(c) => tables[c.side].value(rep[c.side] as usize, c.col),
                        Out::Agg(_, arg) => {
                            let real = arg.is_some_and(|c| c.ty == ColType::Real);
                            accs.next().map(|a| a.finish(real)).unwrap_or(Value::Null)
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

/// An aggregate query's output rows in `order by`'s order: each key names a column of the select
/// list (by its name, its column or its aggregate).
fn sort_groups(sel: &Select, plan: &Plan, out_rows: &mut [Vec<Value>]) -> Result<(), Error> {
    if sel.order_by.is_empty() {
        return Ok(());
    }
    let outs = &plan.outs;
    let mut keys = Vec::new();
    for k in &sel.order_by {
        let idx = match &k.key {
            ItemKind::Col(c) if c.qual.is_none() && outs.iter().any(|(n, _)| n.eq_ignore_ascii_case(c.name)) => {
                outs.iter().position(|(n, _)| n.eq_ignore_ascii_case(c.name))
            }
            ItemKind::Col(c) => {
                let id = plan.scope.resolve(c)?;
                outs.iter().position(|(_, o)| *o == Out::Col(id))
            }
            ItemKind::Agg(f, arg) => {
                let arg = arg.as_ref().map(|c| plan.scope.resolve(c)).transpose()?;
                outs.iter().position(|(_, o)| *o == Out::Agg(*f, arg))
            }
        };
        let idx =
            idx.ok_or_else(|| Error::at(k.pos, format!("order by {} must name a column of the select list", k.key)))?;
        keys.push((idx, k.desc));
    }
    out_rows.sort_by(|a, b| {
        for (i, desc) in &keys {
            let o = compare_values(&a[*i], &b[*i]);
            if o != Ordering::Equal {
                return if *desc { o.reverse() } else { o };
            }
        }
        Ordering::Equal
    });
    Ok(())
}

/// Order rows by the keys, stable with respect to their current (time) order. With a
/// limit only the first `limit` are fully sorted.
fn sort_rows(rows: Vec<Row>, keys: &[(ColId, bool)], limit: Option<u64>, tables: &[&Table; 2]) -> Vec<Row> {
    let nk = keys.len();
    let mut vals: Vec<Scalar> = Vec::with_capacity(rows.len() * nk);
    for r in &rows {
        vals.extend(keys.iter().map(|(id, _)| get(tables, *r, *id)));
    }
    let cmp = |a: &u32, b: &u32| {
        let (ka, kb) = (&vals[*a as usize * nk..][..nk], &vals[*b as usize * nk..][..nk]);
        for (i, (_, desc)) in keys.iter().enumerate() {
            let o = compare(ka[i], kb[i]).unwrap_or(Ordering::Equal);
            if o != Ordering::Equal {
                return if *desc { o.reverse() } else { o };
            }
        }
        a.cmp(b)
    };
    let mut idx: Vec<u32> = (0..rows.len() as u32).collect();
    match limit.map(|l| l.min(usize::MAX as u64) as usize) {
        Some(k) if k < idx.len() => {
            if k > 0 {
                idx.select_nth_unstable_by(k - 1, cmp);
            }
            idx.truncate(k);
            idx.sort_unstable_by(cmp);
        }
        _ => idx.sort_unstable_by(cmp),
    }
    idx.iter().map(|&i| rows[i as usize]).collect()
}

fn check_rows(n: usize, limits: &Limits) -> Result<(), Error> {
    if n > limits.max_result_rows {
        return Err(Error::plain(format!(
            "the result has {n} rows, more than the limit of {}; add a limit or narrow the window",
            limits.max_result_rows
        )));
    }
    Ok(())
}

/// Hand `sink` the rows (pairs, for a join) of the windows that match the filter, in time
/// order, in chunks until it returns false: a single table's scanned with the filter's
/// conjuncts; a join's sides each filtered by their own conjuncts, then hash-joined on the
/// equalities between them.
fn scan(
    sel: &Select,
    plan: &Plan,
    limits: &Limits,
    sink: &mut dyn FnMut(&[Row]) -> Result<bool, Error>,
) -> Result<(), Error> {
    let (scope, ranges) = (&plan.scope, &plan.ranges);
    let tables = scope.tables;
    let mut conjuncts = Vec::new();
    if let Some(f) = &sel.filter {
        split_and(f, &mut conjuncts);
    }
    let mut preds: Vec<Pred> = conjuncts.iter().map(|e| Pred::compile(scope, e)).collect::<Result<_, _>>()?;
    for p in &mut preds {
        p.bind(&tables);
    }

    if sel.sources.len() == 1 {
        // In chunks, so that a limit stops the scan soon after it is reached and the rows
        // in flight stay in cache.
        const CHUNK: usize = 4096;
        let runs = tables[0].slot_runs(ranges[0].clone());
        let mut spans: Vec<Range<usize>> =
            runs.iter().flat_map(|run| run.clone().step_by(CHUNK).map(|s| s..run.end.min(s + CHUNK))).collect();
        let newest_first = plan.newest_first();
        if newest_first {
            spans.reverse();
        }
        let mut chunk = Vec::with_capacity(CHUNK);
        for span in spans {
            chunk.clear();
            let row = |p: usize| [p as u32, p as u32];
            if newest_first {
                chunk.extend(span.rev().map(row));
            } else {
                chunk.extend(span.map(row));
            }
            for p in &preds {
                p.retain(&tables, &mut chunk);
            }
            if !chunk.is_empty() && !sink(&chunk)? {
                break;
            }
        }
        return Ok(());
    }

    // Join: push single-side conjuncts down, hash-join on cross-side equalities.
    let mut side_preds: [Vec<&Pred>; 2] = [Vec::new(), Vec::new()];
    let mut keys: Vec<(ColId, ColId, usize)> = Vec::new();
    let mut residual: Vec<&Pred> = Vec::new();
    for (p, e) in preds.iter().zip(&conjuncts) {
        match p.sides() {
            0 | 1 => side_preds[0].push(p),
            2 => side_preds[1].push(p),
            _ => match p {
                Pred::Cmp { op: CmpOp::Eq, l: Opd::Col(a), r: Opd::Col(b), .. } if a.side != b.side => {
                    let (a, b) = if a.side == 0 { (*a, *b) } else { (*b, *a) };
                    let pos = match e {
                        Expr::Cmp(_, _, _, pos) => *pos,
                        _ => 0,
                    };
                    let fam = |t: ColType| match t {
                        ColType::Integer | ColType::Timestamp => 0,
                        ColType::Real => 1,
                        ColType::Varchar => 2,
                        ColType::Boolean => 3,
                    };
                    if fam(a.ty) != fam(b.ty) {
                        return Err(Error::at(
                            pos,
                            format!("join columns differ in type ({} and {})", a.ty.name(), b.ty.name()),
                        ));
                    }
                    keys.push((a, b, pos));
                }
                _ => residual.push(p),
            },
        }
    }
    let side_rows = |side: usize| -> Vec<u32> {
        let mut rows: Vec<Row> =
            tables[side].slot_runs(ranges[side].clone()).into_iter().flatten().map(|p| [p as u32, p as u32]).collect();
        for p in &side_preds[side] {
            p.retain(&tables, &mut rows);
        }
        rows.into_iter().map(|[p, _]| p).collect()
    };
    let left = side_rows(0);
    let right = side_rows(1);
    let too_many = || {
        Error::plain(format!(
            "the join produces more than {} row pairs; add an equality between the tables or narrow the windows",
            limits.max_join_pairs
        ))
    };
    let mut pairs: Vec<Row> = Vec::new();
    if keys.is_empty() {
        if left.len().saturating_mul(right.len()) > limits.max_join_pairs {
            return Err(too_many());
        }
        for &a in &left {
            for &b in &right {
                pairs.push([a, b]);
            }
        }
    } else {
        // Index the right side and probe with the left, so pairs come out in the left
        // table's time order (then the right's), like a single-table scan.
        let mut index: HashMap<Vec<JoinKey>, Vec<u32>> = HashMap::new();
        for &b in &right {
            let k: Vec<JoinKey> = keys.iter().map(|(_, kb, _)| join_key(get(&tables, [b, b], *kb))).collect();
            index.entry(k).or_default().push(b);
        }
        let mut k = Vec::with_capacity(keys.len());
        for &a in &left {
            k.clear();
            k.extend(keys.iter().map(|(ka, _, _)| join_key(get(&tables, [a, a], *ka))));
            if let Some(matches) = index.get(&k) {
                if pairs.len() + matches.len() > limits.max_join_pairs {
                    return Err(too_many());
                }
                pairs.extend(matches.iter().map(|&b| [a, b]));
            }
        }
    }
    for p in residual {
        p.retain(&tables, &mut pairs);
    }
    sink(&pairs).map(|_| ())
}
