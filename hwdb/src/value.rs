//! Column types and the owned values that leave the store (query results, persistence).

use serde::ser::{Serialize, Serializer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColType {
    Integer,
    Real,
    Varchar,
    Boolean,
    Timestamp,
}

impl ColType {
    pub fn name(self) -> &'static str {
        match self {
            ColType::Integer => "integer",
            ColType::Real => "real",
            ColType::Varchar => "varchar",
            ColType::Boolean => "boolean",
            ColType::Timestamp => "timestamp",
        }
    }

    pub fn from_name(s: &str) -> Option<ColType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "integer" | "int" | "bigint" => ColType::Integer,
            "real" | "float" | "double" => ColType::Real,
            "varchar" | "text" | "string" => ColType::Varchar,
            "boolean" | "bool" => ColType::Boolean,
            "timestamp" | "tstamp" => ColType::Timestamp,
            _ => return None,
        })
    }

    /// Bytes a cell of this type takes in a table's column vector (a string: its interned id).
    pub fn cell_bytes(self) -> usize {
        match self {
            ColType::Integer | ColType::Real | ColType::Timestamp => 8,
            ColType::Varchar => 4,
            ColType::Boolean => 1,
        }
    }

    pub fn is_numeric(self) -> bool {
        matches!(self, ColType::Integer | ColType::Real | ColType::Timestamp)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Str(Box<str>),
    Bool(bool),
    Ts(u64),
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_none(),
            Value::Int(v) => s.serialize_i64(*v),
            // JSON has no NaN/inf; null is the honest rendering.
            Value::Real(v) if !v.is_finite() => s.serialize_none(),
            Value::Real(v) => s.serialize_f64(*v),
            Value::Str(v) => s.serialize_str(v),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::Ts(v) => s.serialize_u64(*v),
        }
    }
}

/// One cell on its way into a table, already converted to the column's type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell<'a> {
    Int(i64),
    Real(f64),
    Str(&'a str),
    Bool(bool),
    Ts(u64),
}

impl<'a> Cell<'a> {
    pub fn from_value(v: &'a Value) -> Option<Cell<'a>> {
        Some(match v {
            Value::Null => return None,
            Value::Int(i) => Cell::Int(*i),
            Value::Real(f) => Cell::Real(*f),
            Value::Str(s) => Cell::Str(s),
            Value::Bool(b) => Cell::Bool(*b),
            Value::Ts(t) => Cell::Ts(*t),
        })
    }
}
