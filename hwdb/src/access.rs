//! Who may do what: pure functions of the peer address and the statement.
//!
//! A LAN caller is judged twice: `screen` looks only at a statement's size and first words,
//! so anything a LAN peer may not run is refused before it is reassembled or parsed; then
//! `authorize` checks the parsed insert row by row.

use std::net::IpAddr;

use crate::exec::Limits;
use crate::parse::{Lexer, Lit, Stmt, Tok};

pub const FORBIDDEN: &str = "forbidden: LAN clients may only insert into AppTuples rows for their own address";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Loopback: the router's own services and people on its console.
    Local,
    /// Anyone else: end-host agents reporting their flows.
    Lan(IpAddr),
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// `treat_as_lan` exists for tests, which can only use loopback addresses.
pub fn caller_for(peer: IpAddr, treat_as_lan: &[IpAddr]) -> Caller {
    let peer = canonical(peer);
    if !treat_as_lan.iter().any(|a| canonical(*a) == peer) && peer.is_loopback() {
        Caller::Local
    } else {
        Caller::Lan(peer)
    }
}

/// The statements a LAN caller may run begin with these words: its reports, and asking the
/// router to prove it is the household's (`pairing`).
const LAN_STATEMENT_STARTS: [&[&str]; 2] = [&["insert", "into", "apptuples", "values"], &["prove"]];

impl Caller {
    pub fn max_statement_bytes(&self, limits: &Limits) -> usize {
        match self {
            Caller::Local => limits.max_query_bytes,
            Caller::Lan(_) => limits.max_lan_query_bytes,
        }
    }
}

/// What can be judged from the start of a statement: its size (`len`, or a lower bound on it
/// while the rest is still on the way) and, for a LAN caller, its first words. `head` is the
/// statement's beginning, all of it when `whole`; words it cuts off are not judged.
pub fn screen(caller: &Caller, limits: &Limits, len: usize, head: &str, whole: bool) -> Result<(), String> {
    if matches!(caller, Caller::Lan(_)) && !may_start_lan_statement(head, whole) {
        return Err(FORBIDDEN.into());
    }
    let limit = caller.max_statement_bytes(limits);
    if len > limit {
        let who = if matches!(caller, Caller::Lan(_)) { " for LAN clients" } else { "" };
        return Err(format!("query is longer than the limit of {limit} bytes{who}"));
    }
    Ok(())
}

/// False once the words in `head` show it is none of the statements a LAN caller may run.
fn may_start_lan_statement(head: &str, whole: bool) -> bool {
    LAN_STATEMENT_STARTS.iter().any(|words| may_start_with(head, whole, words))
}

fn may_start_with(head: &str, whole: bool, words: &[&str]) -> bool {
    let mut lex = Lexer::new(head);
    for word in words {
        match lex.next_token() {
            Ok(t) if !whole && t.end >= head.len() => return true,
            Ok(t) if matches!(t.tok, Tok::Ident(w) if w.eq_ignore_ascii_case(word)) => {}
            _ => return false,
        }
    }
    true
}

/// Column position of `saddr` among AppTuples' user columns.
const APPTUPLES_SADDR: usize = 1;
const APPTUPLES_ARITY: usize = 7;

pub fn authorize(caller: &Caller, stmt: &Stmt) -> Result<(), String> {
    let Caller::Lan(ip) = caller else { return Ok(()) };
    if matches!(stmt, Stmt::Prove { .. }) {
        return Ok(());
    }
    let Stmt::Insert { table, values, rows, .. } = stmt else {
        return Err(FORBIDDEN.into());
    };
    if !table.eq_ignore_ascii_case("AppTuples") || values.len() != rows * APPTUPLES_ARITY {
        return Err(FORBIDDEN.into());
    }
    for (r, row) in values.chunks(APPTUPLES_ARITY).enumerate() {
        let saddr = match &row[APPTUPLES_SADDR].0 {
            Lit::Str(s) => s.as_ref(),
            _ => "",
        };
        if saddr.parse::<IpAddr>().map(canonical).ok() != Some(*ip) {
            return Err(format!("{FORBIDDEN} (row {} has saddr '{saddr}', you are {ip})", r + 1));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn callers() {
        assert_eq!(caller_for(ip("127.0.0.1"), &[]), Caller::Local);
        assert_eq!(caller_for(ip("127.9.9.9"), &[]), Caller::Local);
        assert_eq!(caller_for(ip("::1"), &[]), Caller::Local);
        assert_eq!(caller_for(ip("::ffff:127.0.0.1"), &[]), Caller::Local);
        assert_eq!(caller_for(ip("10.2.0.10"), &[]), Caller::Lan(ip("10.2.0.10")));
        assert_eq!(caller_for(ip("::ffff:10.2.0.10"), &[]), Caller::Lan(ip("10.2.0.10")));
        assert_eq!(caller_for(ip("127.0.0.2"), &[ip("127.0.0.2")]), Caller::Lan(ip("127.0.0.2")));
    }

    #[test]
    fn screening_judges_only_what_has_arrived() {
        let lan = Caller::Lan(ip("10.2.0.10"));
        let limits = Limits::default();
        let insert = "insert into AppTuples values (6, '10.2.0.10', 5000, '1.1.1.1', 443, 'x', 'y')";
        assert_eq!(screen(&lan, &limits, insert.len(), insert, true), Ok(()));
        assert_eq!(screen(&lan, &limits, 9000, "  -- agent\nINSERT into apptuples VALUES (6", false), Ok(()));
        // A fragment that ends inside the third word cannot be judged on it yet.
        assert_eq!(screen(&lan, &limits, 9000, "insert into AppTup", false), Ok(()));
        for head in ["select * from Flows", "insert into Flows values", "insert into AppTuplesX values", "'"] {
            assert_eq!(screen(&lan, &limits, 9000, head, false).unwrap_err(), FORBIDDEN, "{head:?}");
            assert_eq!(screen(&Caller::Local, &limits, 9000, head, false), Ok(()), "{head:?}");
        }
        assert_eq!(screen(&lan, &limits, 100, "insert into", true).unwrap_err(), FORBIDDEN);
        assert_eq!(screen(&lan, &limits, 100, "prove 'ab' for '10.2.0.1:987'", true), Ok(()));
        assert_eq!(screen(&lan, &limits, 100, "proven", true).unwrap_err(), FORBIDDEN);
        let too_long = limits.max_lan_query_bytes + 1;
        assert!(screen(&lan, &limits, too_long, insert, false).unwrap_err().ends_with("bytes for LAN clients"));
        assert_eq!(screen(&Caller::Local, &limits, too_long, insert, false), Ok(()));
    }

    #[test]
    fn lan_rules() {
        let me = Caller::Lan(ip("10.2.0.10"));
        let ok = "insert into AppTuples values (6, '10.2.0.10', 5000, '1.1.1.1', 443, 'firefox', 'laptop'), \
                  (17, '10.2.0.10', 5001, '8.8.8.8', 53, 'dig', 'laptop')";
        assert_eq!(authorize(&me, &parse(ok).unwrap()), Ok(()));
        assert_eq!(authorize(&me, &parse("prove 'ab' for '10.2.0.1:987'").unwrap()), Ok(()));
        assert_eq!(authorize(&Caller::Local, &parse("select * from Flows").unwrap()), Ok(()));
        for bad in [
            "select * from AppTuples",
            "insert into Flows values (6, '10.2.0.10', 1, '1.1.1.1', 2, 3, 4)",
            "insert into AppTuples values (6, '10.2.0.11', 5000, '1.1.1.1', 443, 'x', 'y')",
            "insert into AppTuples values (6, '10.2.0.10', 5000, '1.1.1.1', 443, 'x', 'y'), (6, '10.2.0.99', 1, '1.1.1.1', 443, 'x', 'y')",
            "insert into AppTuples values (6, 10, 5000, '1.1.1.1', 443, 'x', 'y')",
            "insert into AppTuples values (6, '10.2.0.10')",
            "create table X (a integer)",
            "subscribe select * from AppTuples to 10.2.0.10 5000",
            "show tables",
        ] {
            let err = authorize(&me, &parse(bad).unwrap()).unwrap_err();
            assert!(err.starts_with(FORBIDDEN), "{bad}: {err}");
        }
    }
}
