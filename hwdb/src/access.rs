//! Who may do what: a pure function of the peer address and the parsed statement.

use std::net::IpAddr;

use crate::parse::{Lit, Stmt};

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

/// Column position of `saddr` among AppTuples' user columns.
const APPTUPLES_SADDR: usize = 1;
const APPTUPLES_ARITY: usize = 7;

pub fn authorize(caller: &Caller, stmt: &Stmt) -> Result<(), String> {
    let Caller::Lan(ip) = caller else { return Ok(()) };
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
    fn lan_rules() {
        let me = Caller::Lan(ip("10.2.0.10"));
        let ok = "insert into AppTuples values (6, '10.2.0.10', 5000, '1.1.1.1', 443, 'firefox', 'laptop'), \
                  (17, '10.2.0.10', 5001, '8.8.8.8', 53, 'dig', 'laptop')";
        assert_eq!(authorize(&me, &parse(ok).unwrap()), Ok(()));
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
