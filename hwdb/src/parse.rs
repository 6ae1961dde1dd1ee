//! Lexer and recursive-descent parser for the hwdb query language (grammar in README.md).
//!
//! The AST borrows from the query text so that parsing a large insert batch allocates
//! little more than the flat value vector.

use std::borrow::Cow;
use std::fmt;

use crate::value::ColType;

/// Deeper nesting than this is refused rather than risking the stack.
pub const MAX_DEPTH: usize = 64;
/// A `where` clause's trees are walked recursively when compiled, evaluated and dropped,
/// and a flat `a and b and c ...` chain is as deep as it is long: bound its size too.
pub const MAX_COMPARISONS: usize = 1024;
pub const MAX_SOURCES: usize = 2;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// Byte offset into the query text, when the error belongs to a place in it.
    pub pos: Option<usize>,
    pub msg: String,
}

impl Error {
    pub fn at(pos: usize, msg: impl Into<String>) -> Error {
        Error { pos: Some(pos), msg: msg.into() }
    }
    pub fn plain(msg: impl Into<String>) -> Error {
        Error { pos: None, msg: msg.into() }
    }
    /// `line:col: message`, with 1-based line and character column.
    pub fn render(&self, text: &str) -> String {
        match self.pos {
            None => self.msg.clone(),
            Some(pos) => {
                let pos = pos.min(text.len());
                let before = text.get(..pos).unwrap_or(text);
                let line = before.matches('\n').count() + 1;
                let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
                format!("{line}:{col}: {}", self.msg)
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok<'a> {
    Ident(&'a str),
    Int(i64),
    Real(f64),
    Str(Cow<'a, str>),
    Ts(u64),
    Sym(&'static str),
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token<'a> {
    pub tok: Tok<'a>,
    pub pos: usize,
    pub end: usize,
}

pub struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Lexer<'a> {
        Lexer { src, pos: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.src.as_bytes()
    }

    fn skip_space(&mut self) {
        let b = self.bytes();
        loop {
            while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if b[self.pos..].starts_with(b"--") {
                while self.pos < b.len() && b[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                return;
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Token<'a>> {
        self.skip_space();
        let b = self.bytes();
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return Ok(Token { tok: Tok::Eof, pos: start, end: start });
        };
        // The punctuation between an insert's values, first.
        if let Some(sym) = match c {
            b',' => Some(","),
            b'(' => Some("("),
            b')' => Some(")"),
            _ => None,
        } {
            self.pos = start + 1;
            return Ok(Token { tok: Tok::Sym(sym), pos: start, end: start + 1 });
        }
        let tok = match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'_' => {
                let mut p = start + 1;
                while p < b.len() && (b[p].is_ascii_alphanumeric() || b[p] == b'_') {
                    p += 1;
                }
                self.pos = p;
                Tok::Ident(&self.src[start..p])
            }
            b'0'..=b'9' => self.number(start, start)?,
            b'-' if b.get(start + 1).is_some_and(|d| d.is_ascii_digit()) => self.number(start, start + 1)?,
            b'\'' | b'"' => self.string(start, c)?,
            b'@' => {
                let mut p = start + 1;
                while p < b.len() && b[p].is_ascii_hexdigit() {
                    p += 1;
                }
                if p == start + 1 || b.get(p) != Some(&b'@') || p - start - 1 > 16 {
                    return Err(Error::at(start, "malformed timestamp: expected @<1-16 hex digits>@"));
                }
                let v = u64::from_str_radix(&self.src[start + 1..p], 16)
                    .map_err(|_| Error::at(start, "malformed timestamp"))?;
                self.pos = p + 1;
                Tok::Ts(v)
            }
            _ => {
                // `<>` and `==` are spellings of `!=` and `=`.
                let (sym, len) = match (c, b.get(start + 1)) {
                    (b'!', Some(b'=')) | (b'<', Some(b'>')) => ("!=", 2),
                    (b'<', Some(b'=')) => ("<=", 2),
                    (b'>', Some(b'=')) => (">=", 2),
                    (b'=', Some(b'=')) => ("=", 2),
                    (b'.', _) => (".", 1),
                    (b'*', _) => ("*", 1),
                    (b'[', _) => ("[", 1),
                    (b']', _) => ("]", 1),
                    (b';', _) => (";", 1),
                    (b'=', _) => ("=", 1),
                    (b'<', _) => ("<", 1),
                    (b'>', _) => (">", 1),
                    _ => {
                        let ch = self.src[start..].chars().next().unwrap_or('?');
                        return Err(Error::at(start, format!("unexpected character {ch:?}")));
                    }
                };
                self.pos = start + len;
                Tok::Sym(sym)
            }
        };
        Ok(Token { tok, pos: start, end: self.pos })
    }

    fn number(&mut self, start: usize, digits: usize) -> Result<Tok<'a>> {
        let b = self.bytes();
        let mut p = digits;
        while p < b.len() && b[p].is_ascii_digit() {
            p += 1;
        }
        let mut real = false;
        if b.get(p) == Some(&b'.') && b.get(p + 1).is_some_and(|d| d.is_ascii_digit()) {
            real = true;
            p += 1;
            while p < b.len() && b[p].is_ascii_digit() {
                p += 1;
            }
        }
        if matches!(b.get(p), Some(b'e' | b'E')) {
            let mut q = p + 1;
            if matches!(b.get(q), Some(b'+' | b'-')) {
                q += 1;
            }
            if b.get(q).is_some_and(|d| d.is_ascii_digit()) {
                real = true;
                p = q;
                while p < b.len() && b[p].is_ascii_digit() {
                    p += 1;
                }
            }
        }
        if b.get(p).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
            return Err(Error::at(start, "malformed number"));
        }
        self.pos = p;
        if real {
            return self.src[start..p].parse().map(Tok::Real).map_err(|_| Error::at(start, "malformed number"));
        }
        // Digits straight to the value (inserts are mostly integers); a negative number
        // accumulates downwards so that i64::MIN fits.
        let negative = digits > start;
        let mut v: i64 = 0;
        for &d in &b[digits..p] {
            let d = i64::from(d - b'0');
            v = v
                .checked_mul(10)
                .and_then(|v| if negative { v.checked_sub(d) } else { v.checked_add(d) })
                .ok_or_else(|| Error::at(start, "integer out of range (64-bit signed)"))?;
        }
        Ok(Tok::Int(v))
    }

    fn string(&mut self, start: usize, quote: u8) -> Result<Tok<'a>> {
        let b = self.bytes();
        let mut p = start + 1;
        let mut owned: Option<String> = None;
        let mut seg = p;
        loop {
            match b.get(p) {
                None => return Err(Error::at(start, "unterminated string")),
                Some(&c) if c == quote => {
                    if b.get(p + 1) == Some(&quote) {
                        // A doubled quote stands for one quote character.
                        let s = owned.get_or_insert_with(String::new);
                        s.push_str(&self.src[seg..=p]);
                        p += 2;
                        seg = p;
                    } else {
                        break;
                    }
                }
                Some(_) => p += 1,
            }
        }
        self.pos = p + 1;
        Ok(Tok::Str(match owned {
            Some(mut s) => {
                s.push_str(&self.src[seg..p]);
                Cow::Owned(s)
            }
            None => Cow::Borrowed(&self.src[seg..p]),
        }))
    }

    /// A host name or address for `subscribe ... to HOST PORT`: a quoted string or a run
    /// of non-space characters (so `127.0.0.1` and `::1` need no quotes).
    fn raw_word(&mut self) -> Result<(usize, Cow<'a, str>)> {
        self.skip_space();
        let start = self.pos;
        let b = self.bytes();
        match b.get(start) {
            None => Err(Error::at(start, "expected host, found end of input")),
            Some(&q @ (b'\'' | b'"')) => match self.string(start, q)? {
                Tok::Str(s) => Ok((start, s)),
                _ => unreachable!("string() only returns strings"),
            },
            Some(_) => {
                let mut p = start;
                while p < b.len() && !b[p].is_ascii_whitespace() {
                    p += 1;
                }
                self.pos = p;
                Ok((start, Cow::Borrowed(&self.src[start..p])))
            }
        }
    }
}

// ---------------------------------------------------------------- AST

#[derive(Debug, Clone, PartialEq)]
pub enum Lit<'a> {
    Int(i64),
    Real(f64),
    Str(Cow<'a, str>),
    Bool(bool),
    Ts(u64),
}

impl Lit<'_> {
    pub fn type_name(&self) -> &'static str {
        match self {
            Lit::Int(_) => "integer",
            Lit::Real(_) => "real",
            Lit::Str(_) => "string",
            Lit::Bool(_) => "boolean",
            Lit::Ts(_) => "timestamp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColRef<'a> {
    pub qual: Option<&'a str>,
    pub name: &'a str,
    pub pos: usize,
}

impl fmt::Display for ColRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.qual {
            Some(q) => write!(f, "{q}.{}", self.name),
            None => f.write_str(self.name),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl AggFn {
    fn from_name(s: &str) -> Option<AggFn> {
        Some(match s.to_ascii_lowercase().as_str() {
            "count" => AggFn::Count,
            "sum" => AggFn::Sum,
            "avg" => AggFn::Avg,
            "min" => AggFn::Min,
            "max" => AggFn::Max,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            AggFn::Count => "count",
            AggFn::Sum => "sum",
            AggFn::Avg => "avg",
            AggFn::Min => "min",
            AggFn::Max => "max",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ItemKind<'a> {
    Col(ColRef<'a>),
    /// `None` argument is `count(*)`.
    Agg(AggFn, Option<ColRef<'a>>),
}

impl fmt::Display for ItemKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemKind::Col(c) => write!(f, "{c}"),
            ItemKind::Agg(a, None) => write!(f, "{}(*)", a.name()),
            ItemKind::Agg(a, Some(c)) => write!(f, "{}({c})", a.name()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Item<'a> {
    pub kind: ItemKind<'a>,
    pub alias: Option<&'a str>,
    pub pos: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    All,
    /// Nanoseconds back from the time of the query, boundary included.
    Range(u64),
    Rows(u64),
    /// Rows strictly after this timestamp.
    Since(u64),
    Now,
    Last,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Source<'a> {
    pub table: &'a str,
    pub pos: usize,
    pub window: Window,
    pub alias: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand<'a> {
    Col(ColRef<'a>),
    Lit(Lit<'a>, usize),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr<'a> {
    And(Box<Expr<'a>>, Box<Expr<'a>>),
    Or(Box<Expr<'a>>, Box<Expr<'a>>),
    Not(Box<Expr<'a>>),
    Cmp(CmpOp, Operand<'a>, Operand<'a>, usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct OrderKey<'a> {
    pub key: ItemKind<'a>,
    pub desc: bool,
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Select<'a> {
    /// `None` is `*`.
    pub items: Option<Vec<Item<'a>>>,
    pub sources: Vec<Source<'a>>,
    pub filter: Option<Expr<'a>>,
    pub group_by: Vec<ColRef<'a>>,
    pub order_by: Vec<OrderKey<'a>>,
    pub limit: Option<u64>,
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColDef<'a> {
    pub name: &'a str,
    pub ty: ColType,
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Stmt<'a> {
    Create {
        name: &'a str,
        pos: usize,
        persistent: bool,
        cols: Vec<ColDef<'a>>,
    },
    /// `values` is row-major and flat: `rows` tuples of `values.len() / rows` literals each.
    Insert {
        table: &'a str,
        pos: usize,
        values: Vec<(Lit<'a>, u32)>,
        rows: usize,
    },
    Select(Select<'a>),
    Subscribe {
        query: Select<'a>,
        host: Cow<'a, str>,
        host_pos: usize,
        port: u16,
    },
    Unsubscribe(u32),
    Save {
        query: Select<'a>,
        name: &'a str,
        pos: usize,
    },
    ShowTables,
    ShowSubscriptions,
    Describe {
        table: &'a str,
        pos: usize,
    },
    /// `prove 'NONCE' for 'ADDRESS'`: an agent asks the router to prove it holds the
    /// household's agent key (`pairing`).
    Prove {
        nonce: Cow<'a, str>,
        nonce_pos: usize,
        addr: Cow<'a, str>,
    },
}

// ---------------------------------------------------------------- parser

pub fn parse(text: &str) -> Result<Stmt<'_>> {
    let mut p = Parser::new(text)?;
    let stmt = p.statement()?;
    if p.is_sym(";") {
        p.advance()?;
    }
    if p.cur.tok != Tok::Eof {
        return Err(p.unexpected("end of input"));
    }
    Ok(stmt)
}

const CLAUSE_WORDS: [&str; 8] = ["where", "group", "order", "limit", "to", "as", "on", "from"];

struct Parser<'a> {
    src: &'a str,
    lex: Lexer<'a>,
    cur: Token<'a>,
    depth: usize,
    comparisons: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Result<Parser<'a>> {
        let mut lex = Lexer::new(src);
        let cur = lex.next_token()?;
        Ok(Parser { src, lex, cur, depth: 0, comparisons: 0 })
    }

    fn advance(&mut self) -> Result<Token<'a>> {
        let next = self.lex.next_token()?;
        Ok(std::mem::replace(&mut self.cur, next))
    }

    fn found(&self) -> String {
        if self.cur.tok == Tok::Eof {
            return "end of input".into();
        }
        let text = &self.src[self.cur.pos..self.cur.end];
        let short: String = text.chars().take(24).collect();
        if short.len() < text.len() {
            format!("'{short}...'")
        } else {
            format!("'{short}'")
        }
    }

    fn unexpected(&self, expected: &str) -> Error {
        Error::at(self.cur.pos, format!("expected {expected}, found {}", self.found()))
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.cur.tok, Tok::Ident(s) if s.eq_ignore_ascii_case(kw))
    }

    fn is_sym(&self, sym: &str) -> bool {
        matches!(self.cur.tok, Tok::Sym(s) if s == sym)
    }

    fn expect_kw(&mut self, kw: &str) -> Result<()> {
        if self.is_kw(kw) {
            self.advance()?;
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{kw}'")))
        }
    }

    fn expect_sym(&mut self, sym: &str) -> Result<()> {
        if self.is_sym(sym) {
            self.advance()?;
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{sym}'")))
        }
    }

    fn ident(&mut self, what: &str) -> Result<(&'a str, usize)> {
        match self.cur.tok {
            Tok::Ident(s) => {
                let pos = self.cur.pos;
                self.advance()?;
                Ok((s, pos))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn string(&mut self, what: &str) -> Result<(Cow<'a, str>, usize)> {
        match &self.cur.tok {
            Tok::Str(s) => {
                let (s, pos) = (s.clone(), self.cur.pos);
                self.advance()?;
                Ok((s, pos))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn uint(&mut self, what: &str) -> Result<u64> {
        match self.cur.tok {
            Tok::Int(v) if v >= 0 => {
                self.advance()?;
                Ok(v as u64)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn statement(&mut self) -> Result<Stmt<'a>> {
        let Tok::Ident(word) = self.cur.tok else {
            return Err(self.unexpected("a statement (select, insert, create, subscribe, ...)"));
        };
        match word.to_ascii_lowercase().as_str() {
            "select" => Ok(Stmt::Select(self.select()?)),
            "insert" => self.insert(),
            "create" => self.create(),
            "subscribe" => {
                self.advance()?;
                let query = self.select()?;
                if !self.is_kw("to") {
                    return Err(self.unexpected("'to'"));
                }
                // `cur` is `to`; the lexer stands just after it, where the host begins.
                let (host_pos, host) = self.lex.raw_word()?;
                self.advance()?;
                let port_pos = self.cur.pos;
                let port = self.uint("port number")?;
                if port == 0 || port > 65535 {
                    return Err(Error::at(port_pos, "port must be 1..65535"));
                }
                Ok(Stmt::Subscribe { query, host, host_pos, port: port as u16 })
            }
            "unsubscribe" => {
                self.advance()?;
                let pos = self.cur.pos;
                let id = self.uint("subscription id")?;
                let id = u32::try_from(id).map_err(|_| Error::at(pos, "no such subscription"))?;
                Ok(Stmt::Unsubscribe(id))
            }
            "save" => {
                self.advance()?;
                self.expect_sym("(")?;
                let query = self.select()?;
                self.expect_sym(")")?;
                self.expect_kw("as")?;
                let (name, pos) = self.ident("table name")?;
                Ok(Stmt::Save { query, name, pos })
            }
            "show" => {
                self.advance()?;
                if self.is_kw("tables") {
                    self.advance()?;
                    Ok(Stmt::ShowTables)
                } else if self.is_kw("subscriptions") {
                    self.advance()?;
                    Ok(Stmt::ShowSubscriptions)
                } else {
                    Err(self.unexpected("'tables' or 'subscriptions'"))
                }
            }
            "describe" => {
                self.advance()?;
                let (table, pos) = self.ident("table name")?;
                Ok(Stmt::Describe { table, pos })
            }
            "prove" => {
                self.advance()?;
                let (nonce, nonce_pos) = self.string("the nonce, a quoted string")?;
                self.expect_kw("for")?;
                let (addr, _) = self.string("the address the request was sent to, a quoted string")?;
                Ok(Stmt::Prove { nonce, nonce_pos, addr })
            }
            _ => Err(self.unexpected("a statement (select, insert, create, subscribe, ...)")),
        }
    }

    fn create(&mut self) -> Result<Stmt<'a>> {
        self.advance()?;
        let persistent = self.is_kw("persistent");
        if persistent {
            self.advance()?;
        }
        self.expect_kw("table")?;
        let (name, pos) = self.ident("table name")?;
        self.expect_sym("(")?;
        let mut cols = Vec::new();
        loop {
            let (cname, cpos) = self.ident("column name")?;
            let tpos = self.cur.pos;
            let (tname, _) = self.ident("column type")?;
            let ty = ColType::from_name(tname).ok_or_else(|| {
                Error::at(
                    tpos,
                    format!("expected column type (integer, real, varchar, boolean, timestamp), found '{tname}'"),
                )
            })?;
            cols.push(ColDef { name: cname, ty, pos: cpos });
            if self.is_sym(",") {
                self.advance()?;
            } else {
                break;
            }
        }
        self.expect_sym(")")?;
        Ok(Stmt::Create { name, pos, persistent, cols })
    }

    fn insert(&mut self) -> Result<Stmt<'a>> {
        self.advance()?;
        self.expect_kw("into")?;
        let (table, pos) = self.ident("table name")?;
        self.expect_kw("values")?;
        let mut values = Vec::new();
        let mut rows = 0;
        let mut arity = 0;
        loop {
            let tuple_pos = self.cur.pos;
            self.expect_sym("(")?;
            let before = values.len();
            loop {
                let vpos = self.cur.pos as u32;
                let lit = self.literal()?;
                values.push((lit, vpos));
                if self.is_sym(",") {
                    self.advance()?;
                } else {
                    break;
                }
            }
            self.expect_sym(")")?;
            let n = values.len() - before;
            if rows == 0 {
                arity = n;
            } else if n != arity {
                return Err(Error::at(tuple_pos, format!("row has {n} values, the first row has {arity}")));
            }
            rows += 1;
            if rows == 1 {
                // Room for as many more rows as the rest of the text holds tuples like this one.
                let tuple_len = (self.cur.pos - tuple_pos).max(1);
                values.reserve(n * ((self.src.len() - self.cur.pos) / tuple_len));
            }
            if self.is_sym(",") {
                self.advance()?;
            } else {
                break;
            }
        }
        Ok(Stmt::Insert { table, pos, values, rows })
    }

    fn literal(&mut self) -> Result<Lit<'a>> {
        let is_value = match &self.cur.tok {
            Tok::Int(_) | Tok::Real(_) | Tok::Ts(_) | Tok::Str(_) => true,
            Tok::Ident(s) => s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false"),
            _ => false,
        };
        if !is_value {
            return Err(self.unexpected("a value (number, string, true/false, @hex@)"));
        }
        Ok(match self.advance()?.tok {
            Tok::Int(v) => Lit::Int(v),
            Tok::Real(v) => Lit::Real(v),
            Tok::Ts(v) => Lit::Ts(v),
            Tok::Str(s) => Lit::Str(s),
            Tok::Ident(s) => Lit::Bool(s.eq_ignore_ascii_case("true")),
            _ => unreachable!("checked above"),
        })
    }

    fn colref(&mut self) -> Result<ColRef<'a>> {
        let (first, pos) = self.ident("column name")?;
        if self.is_sym(".") {
            self.advance()?;
            let (name, _) = self.ident("column name after '.'")?;
            Ok(ColRef { qual: Some(first), name, pos })
        } else {
            Ok(ColRef { qual: None, name: first, pos })
        }
    }

    /// A column reference or an aggregate call, as used in select lists and order by.
    fn item_kind(&mut self) -> Result<ItemKind<'a>> {
        if let Tok::Ident(name) = self.cur.tok {
            if let Some(f) = AggFn::from_name(name) {
                // Only a following '(' makes it a call, so columns may be named "count".
                let save_lex = self.lex.pos;
                let save_cur = self.cur.clone();
                self.advance()?;
                if self.is_sym("(") {
                    self.advance()?;
                    let arg = if self.is_sym("*") {
                        if f != AggFn::Count {
                            return Err(Error::at(
                                self.cur.pos,
                                format!("{}(*) is not allowed; name a column", f.name()),
                            ));
                        }
                        self.advance()?;
                        None
                    } else {
                        Some(self.colref()?)
                    };
                    self.expect_sym(")")?;
                    return Ok(ItemKind::Agg(f, arg));
                }
                self.lex.pos = save_lex;
                self.cur = save_cur;
            }
        }
        Ok(ItemKind::Col(self.colref()?))
    }

    fn select(&mut self) -> Result<Select<'a>> {
        let pos = self.cur.pos;
        self.expect_kw("select")?;
        let items = if self.is_sym("*") {
            self.advance()?;
            None
        } else {
            let mut items = Vec::new();
            loop {
                let ipos = self.cur.pos;
                let kind = self.item_kind()?;
                let alias = if self.is_kw("as") {
                    self.advance()?;
                    Some(self.ident("alias")?.0)
                } else {
                    None
                };
                items.push(Item { kind, alias, pos: ipos });
                if self.is_sym(",") {
                    self.advance()?;
                } else {
                    break;
                }
            }
            Some(items)
        };
        self.expect_kw("from")?;
        let mut sources = vec![self.source()?];
        while self.is_sym(",") {
            if sources.len() == MAX_SOURCES {
                return Err(Error::at(self.cur.pos, "only joins of two tables are supported"));
            }
            self.advance()?;
            sources.push(self.source()?);
        }
        let filter = if self.is_kw("where") {
            self.advance()?;
            Some(self.expr()?)
        } else {
            None
        };
        let mut group_by = Vec::new();
        if self.is_kw("group") {
            self.advance()?;
            self.expect_kw("by")?;
            loop {
                group_by.push(self.colref()?);
                if self.is_sym(",") {
                    self.advance()?;
                } else {
                    break;
                }
            }
        }
        let mut order_by = Vec::new();
        if self.is_kw("order") {
            self.advance()?;
            self.expect_kw("by")?;
            loop {
                let kpos = self.cur.pos;
                let key = self.item_kind()?;
                let desc = if self.is_kw("desc") {
                    self.advance()?;
                    true
                } else {
                    if self.is_kw("asc") {
                        self.advance()?;
                    }
                    false
                };
                order_by.push(OrderKey { key, desc, pos: kpos });
                if self.is_sym(",") {
                    self.advance()?;
                } else {
                    break;
                }
            }
        }
        let limit = if self.is_kw("limit") {
            self.advance()?;
            Some(self.uint("row count")?)
        } else {
            None
        };
        Ok(Select { items, sources, filter, group_by, order_by, limit, pos })
    }

    fn source(&mut self) -> Result<Source<'a>> {
        let (table, pos) = self.ident("table name")?;
        let window = if self.is_sym("[") {
            self.advance()?;
            let w = self.window()?;
            self.expect_sym("]")?;
            w
        } else {
            Window::All
        };
        let alias = if self.is_kw("as") {
            self.advance()?;
            Some(self.ident("alias")?.0)
        } else {
            match self.cur.tok {
                Tok::Ident(s) if !CLAUSE_WORDS.iter().any(|w| s.eq_ignore_ascii_case(w)) => {
                    self.advance()?;
                    Some(s)
                }
                _ => None,
            }
        };
        Ok(Source { table, pos, window, alias })
    }

    fn window(&mut self) -> Result<Window> {
        let expected = "'range', 'rows', 'since', 'now' or 'last'";
        let Tok::Ident(word) = self.cur.tok else {
            return Err(self.unexpected(expected));
        };
        match word.to_ascii_lowercase().as_str() {
            "range" => {
                self.advance()?;
                let npos = self.cur.pos;
                let n = self.uint("a number")?;
                let upos = self.cur.pos;
                let (unit, _) = self.ident("a time unit (milliseconds, seconds, minutes, hours, days)")?;
                let scale: u64 = match unit.to_ascii_lowercase().as_str() {
                    "millisecond" | "milliseconds" | "ms" => 1_000_000,
                    "second" | "seconds" | "sec" | "secs" | "s" => 1_000_000_000,
                    "minute" | "minutes" | "min" | "mins" => 60_000_000_000,
                    "hour" | "hours" => 3_600_000_000_000,
                    "day" | "days" => 86_400_000_000_000,
                    _ => {
                        return Err(Error::at(
                            upos,
                            format!(
                                "expected a time unit (milliseconds, seconds, minutes, hours, days), found '{unit}'"
                            ),
                        ))
                    }
                };
                let ns = n.checked_mul(scale).ok_or_else(|| Error::at(npos, "range too large"))?;
                Ok(Window::Range(ns))
            }
            "rows" => {
                self.advance()?;
                Ok(Window::Rows(self.uint("a row count")?))
            }
            "since" => {
                self.advance()?;
                let t = match self.cur.tok {
                    Tok::Ts(t) => t,
                    Tok::Int(t) if t >= 0 => t as u64,
                    _ => return Err(self.unexpected("a timestamp (@<hex>@ or nanoseconds)")),
                };
                self.advance()?;
                Ok(Window::Since(t))
            }
            "now" => {
                self.advance()?;
                Ok(Window::Now)
            }
            "last" => {
                self.advance()?;
                Ok(Window::Last)
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn nest(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::at(self.cur.pos, format!("expression nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr<'a>> {
        self.nest()?;
        let mut left = self.and_expr()?;
        while self.is_kw("or") {
            self.advance()?;
            let right = self.and_expr()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Expr<'a>> {
        let mut left = self.not_expr()?;
        while self.is_kw("and") {
            self.advance()?;
            let right = self.not_expr()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not_expr(&mut self) -> Result<Expr<'a>> {
        if self.is_kw("not") {
            self.advance()?;
            self.nest()?;
            let inner = self.not_expr()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        if self.is_sym("(") {
            self.advance()?;
            let e = self.expr()?;
            self.expect_sym(")")?;
            return Ok(e);
        }
        let pos = self.cur.pos;
        self.comparisons += 1;
        if self.comparisons > MAX_COMPARISONS {
            return Err(Error::at(pos, format!("expression has more than {MAX_COMPARISONS} comparisons")));
        }
        let left = self.operand()?;
        let op = match self.cur.tok {
            Tok::Sym("=") => CmpOp::Eq,
            Tok::Sym("!=") => CmpOp::Ne,
            Tok::Sym("<") => CmpOp::Lt,
            Tok::Sym("<=") => CmpOp::Le,
            Tok::Sym(">") => CmpOp::Gt,
            Tok::Sym(">=") => CmpOp::Ge,
            _ => return Err(self.unexpected("a comparison (=, !=, <, <=, >, >=)")),
        };
        self.advance()?;
        let right = self.operand()?;
        Ok(Expr::Cmp(op, left, right, pos))
    }

    fn operand(&mut self) -> Result<Operand<'a>> {
        match self.cur.tok {
            Tok::Ident(s) if !s.eq_ignore_ascii_case("true") && !s.eq_ignore_ascii_case("false") => {
                Ok(Operand::Col(self.colref()?))
            }
            _ => {
                let pos = self.cur.pos;
                Ok(Operand::Lit(self.literal().map_err(|_| self.unexpected("a column or a value"))?, pos))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(q: &str) -> String {
        parse(q).unwrap_err().render(q)
    }

    #[test]
    fn precise_errors() {
        assert_eq!(err("select a, b, c form Flows"), "1:16: expected 'from', found 'form'");
        assert_eq!(
            err("select *\nfrom Flows [range 5 weeks]"),
            "2:21: expected a time unit (milliseconds, seconds, minutes, hours, days), found 'weeks'"
        );
        assert_eq!(err("select * from"), "1:14: expected table name, found end of input");
        assert_eq!(err("insert into T values (1, 'x"), "1:26: unterminated string");
        assert_eq!(err("insert into T values (1), (1, 2)"), "1:27: row has 2 values, the first row has 1");
        assert_eq!(err("select * from T where a = "), "1:27: expected a column or a value, found end of input");
        assert_eq!(err("select * from T limit 5 x"), "1:25: expected end of input, found 'x'");
        assert_eq!(
            err("frobnicate"),
            "1:1: expected a statement (select, insert, create, subscribe, ...), found 'frobnicate'"
        );
        assert_eq!(err("select * from T # "), "1:17: unexpected character '#'");
    }

    #[test]
    fn nesting_is_bounded() {
        let q = format!("select * from T where {}a = 1{}", "(".repeat(100), ")".repeat(100));
        assert!(err(&q).contains("nested deeper"));
        let q = format!("select * from T where {}a = 1", "not ".repeat(1000));
        assert!(err(&q).contains("nested deeper"));
        for op in [" and ", " or "] {
            let chain = |n| format!("select * from T where {}", vec!["a = 1"; n].join(op));
            assert!(parse(&chain(MAX_COMPARISONS)).is_ok());
            let q = chain(MAX_COMPARISONS + 1);
            let at = q.rfind("a = 1").unwrap() + 1;
            assert_eq!(err(&q), format!("1:{at}: expression has more than 1024 comparisons"));
        }
    }

    #[test]
    fn literals() {
        match parse("insert into T values (1, -2, 3.5, 'it''s', \"q\", true, @ff@, 1e3)").unwrap() {
            Stmt::Insert { values, rows, .. } => {
                assert_eq!(rows, 1);
                let v: Vec<_> = values.into_iter().map(|(l, _)| l).collect();
                assert_eq!(
                    v,
                    vec![
                        Lit::Int(1),
                        Lit::Int(-2),
                        Lit::Real(3.5),
                        Lit::Str("it's".into()),
                        Lit::Str("q".into()),
                        Lit::Bool(true),
                        Lit::Ts(255),
                        Lit::Real(1000.0)
                    ]
                );
            }
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn windows_and_clauses() {
        let Stmt::Select(s) = parse(
            "SELECT f.saddr, count(*) AS n FROM Flows [range 10 seconds] AS f, AppTuples [since @1a@] a \
             WHERE f.saddr = a.saddr AND NOT (f.sport < 10 OR f.sport >= 20) GROUP BY f.saddr ORDER BY n DESC LIMIT 3;",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.sources[0].window, Window::Range(10_000_000_000));
        assert_eq!(s.sources[1].window, Window::Since(0x1a));
        assert_eq!(s.sources[1].alias, Some("a"));
        assert_eq!(s.limit, Some(3));
        assert!(s.order_by[0].desc);
        assert_eq!(s.items.unwrap()[1].alias, Some("n"));
        for (q, w) in [
            ("select * from T [rows 5]", Window::Rows(5)),
            ("select * from T [now]", Window::Now),
            ("select * from T [last]", Window::Last),
            ("select * from T [since 12345]", Window::Since(12345)),
            ("select * from T [range 2 hours]", Window::Range(7_200_000_000_000)),
        ] {
            let Stmt::Select(s) = parse(q).unwrap() else { panic!() };
            assert_eq!(s.sources[0].window, w, "{q}");
        }
    }

    #[test]
    fn subscribe_host_forms() {
        for (q, host) in [
            ("subscribe select * from Flows to 127.0.0.1 5000", "127.0.0.1"),
            ("subscribe select * from Flows where dport = 80 to ::1 5000", "::1"),
            ("subscribe select * from Flows to 'localhost' 5000", "localhost"),
        ] {
            match parse(q).unwrap() {
                Stmt::Subscribe { host: h, port, .. } => {
                    assert_eq!(h, host);
                    assert_eq!(port, 5000);
                }
                s => panic!("{s:?}"),
            }
        }
    }
}
