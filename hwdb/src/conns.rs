//! The connection table of one listening socket, and what each peer may hold in it.
//!
//! Every connection is charged to an owner: all loopback peers together are one owner (the
//! router's own services), each LAN address is its own. An owner at its allowance makes room
//! by forgetting its own least recently used idle connection; if all of them are busy, the
//! new request is refused with a clear error. LAN owners together have a smaller pool than
//! loopback's, so nothing the LAN does can take a loopback client's place. Requests being
//! reassembled also draw on a byte pool per class. Only bookkeeping here: the server does
//! the sending.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::access::Caller;

/// What one class of owner may hold at once on one listening socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// Connections of one owner.
    pub conns_per_owner: usize,
    /// Connections of all owners of the class together.
    pub conns: usize,
    /// Bytes of requests still being reassembled, all owners of the class together.
    pub reassembly_bytes: usize,
}

/// The router's own services: all of loopback is one owner.
pub const LOCAL: Allowance = Allowance { conns_per_owner: 1024, conns: 1024, reassembly_bytes: 64 << 20 };
/// An end-host agent needs one connection; 8 leave room for restarts. With LAN statements
/// capped at 64 KiB, a LAN owner can hold about 512 KiB of unfinished requests at most.
pub const LAN: Allowance = Allowance { conns_per_owner: 8, conns: 256, reassembly_bytes: 16 << 20 };

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Local,
    Lan(IpAddr),
}

impl Owner {
    pub fn of(caller: &Caller) -> Owner {
        match caller {
            Caller::Local => Owner::Local,
            Caller::Lan(ip) => Owner::Lan(*ip),
        }
    }

    pub fn allowance(self) -> Allowance {
        match self {
            Owner::Local => LOCAL,
            Owner::Lan(_) => LAN,
        }
    }
}

pub type ConnKey = (SocketAddr, u32);

pub struct ConnHandle<P> {
    pub tx: mpsc::Sender<P>,
    /// Set by the connection's task while no exchange is in progress, so that forgetting
    /// the connection loses nothing but its cached reply.
    pub idle: Arc<AtomicBool>,
    pub last_used: Instant,
    owner: Owner,
}

impl<P> ConnHandle<P> {
    fn ended(&self) -> bool {
        self.tx.is_closed()
    }

    fn evictable(&self) -> bool {
        self.ended() || self.idle.load(Ordering::Relaxed)
    }
}

pub struct ConnTable<P> {
    conns: HashMap<ConnKey, ConnHandle<P>>,
    by_owner: HashMap<Owner, Vec<ConnKey>>,
    lan_conns: usize,
}

impl<P> Default for ConnTable<P> {
    fn default() -> Self {
        ConnTable { conns: HashMap::new(), by_owner: HashMap::new(), lan_conns: 0 }
    }
}

impl<P> ConnTable<P> {
    pub fn get_mut(&mut self, key: &ConnKey) -> Option<&mut ConnHandle<P>> {
        self.conns.get_mut(key)
    }

    pub fn remove(&mut self, key: &ConnKey) {
        let Some(h) = self.conns.remove(key) else { return };
        if let Some(keys) = self.by_owner.get_mut(&h.owner) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.by_owner.remove(&h.owner);
            }
        }
        if matches!(h.owner, Owner::Lan(_)) {
            self.lan_conns -= 1;
        }
    }

    /// Forget connections whose task has ended.
    pub fn sweep(&mut self) {
        self.conns.retain(|_, h| !h.ended());
        self.by_owner.clear();
        self.lan_conns = 0;
        for (k, h) in &self.conns {
            self.by_owner.entry(h.owner).or_default().push(*k);
            if matches!(h.owner, Owner::Lan(_)) {
                self.lan_conns += 1;
            }
        }
    }

    /// The least recently used connection among `keys` that can be forgotten.
    fn victim<'k>(&self, keys: impl Iterator<Item = &'k ConnKey>) -> Option<ConnKey> {
        keys.filter_map(|k| self.conns.get(k).map(|h| (k, h)))
            .filter(|(_, h)| h.evictable())
            .min_by_key(|(_, h)| h.last_used)
            .map(|(k, _)| *k)
    }

    /// Make room for one more connection of `owner`, or say why there is none.
    pub fn make_room(&mut self, owner: Owner) -> Result<(), String> {
        let allowance = owner.allowance();
        let held = self.by_owner.get(&owner).map_or(0, Vec::len);
        if held >= allowance.conns_per_owner {
            let victim = self.victim(self.by_owner.get(&owner).into_iter().flatten()).ok_or_else(|| match owner {
                Owner::Local => format!("busy: {held} loopback requests are in progress; retry when one completes"),
                Owner::Lan(ip) => format!("busy: {held} requests from {ip} are in progress; retry when one completes"),
            })?;
            self.remove(&victim);
        }
        if matches!(owner, Owner::Lan(_)) && self.lan_conns >= allowance.conns {
            let lan_keys = self.by_owner.iter().filter(|(o, _)| matches!(o, Owner::Lan(_))).flat_map(|(_, ks)| ks);
            let victim = self.victim(lan_keys).ok_or_else(|| {
                format!("busy: {} requests from the LAN are in progress; retry when one completes", self.lan_conns)
            })?;
            self.remove(&victim);
        }
        Ok(())
    }

    /// Add a connection; `make_room` must have made room for it.
    pub fn insert(&mut self, key: ConnKey, owner: Owner, tx: mpsc::Sender<P>, idle: Arc<AtomicBool>) {
        self.remove(&key);
        self.conns.insert(key, ConnHandle { tx, idle, last_used: Instant::now(), owner });
        self.by_owner.entry(owner).or_default().push(key);
        if matches!(owner, Owner::Lan(_)) {
            self.lan_conns += 1;
        }
    }
}

/// Bytes of requests being reassembled, per class of owner.
#[derive(Debug, Default)]
pub struct ReassemblyPools {
    local: AtomicUsize,
    lan: AtomicUsize,
}

/// Bytes reserved in a pool until dropped.
#[derive(Debug)]
pub struct Reserved<'p> {
    held: &'p AtomicUsize,
    bytes: usize,
}

impl ReassemblyPools {
    pub fn reserve(&self, owner: Owner, bytes: usize) -> Result<Reserved<'_>, String> {
        let held = if owner == Owner::Local { &self.local } else { &self.lan };
        let limit = owner.allowance().reassembly_bytes;
        held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_add(bytes).filter(|&n| n <= limit))
            .map(|_| Reserved { held, bytes })
            .map_err(|n| format!("busy: {n} bytes of unfinished requests are held; retry later"))
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ip: &str, conn: u32) -> ConnKey {
        (SocketAddr::new(ip.parse().unwrap(), 5000), conn)
    }

    /// Adds a connection for `owner`; the returned receiver keeps it alive, the flag marks it idle.
    fn open(t: &mut ConnTable<()>, k: ConnKey, owner: Owner) -> Result<(mpsc::Receiver<()>, Arc<AtomicBool>), String> {
        t.make_room(owner)?;
        let (tx, rx) = mpsc::channel(1);
        let idle = Arc::new(AtomicBool::new(false));
        t.insert(k, owner, tx, idle.clone());
        Ok((rx, idle))
    }

    #[test]
    fn a_lan_owner_is_held_to_its_own_allowance() {
        let mut t = ConnTable::default();
        let me = Owner::Lan("10.2.0.10".parse().unwrap());
        let mut held = Vec::new();
        for c in 0..LAN.conns_per_owner as u32 {
            held.push(open(&mut t, key("10.2.0.10", c), me).unwrap());
        }
        let err = open(&mut t, key("10.2.0.10", 99), me).unwrap_err();
        assert_eq!(err, "busy: 8 requests from 10.2.0.10 are in progress; retry when one completes");
        // Other owners are unaffected.
        let _neighbour = open(&mut t, key("10.2.0.14", 1), Owner::Lan("10.2.0.14".parse().unwrap())).unwrap();
        let _local = open(&mut t, key("127.0.0.1", 1), Owner::Local).unwrap();
        // Once one of its connections is idle, it makes way for the new one.
        held[3].1.store(true, Ordering::Relaxed);
        let _new = open(&mut t, key("10.2.0.10", 99), me).unwrap();
        assert!(t.get_mut(&key("10.2.0.10", 3)).is_none());
        // A connection whose task has ended makes way too.
        drop(held.remove(0));
        let _another = open(&mut t, key("10.2.0.10", 100), me).unwrap();
    }

    #[test]
    fn the_lan_together_cannot_fill_loopback_places() {
        let mut t = ConnTable::default();
        let mut held = Vec::new();
        for host in 0..LAN.conns / LAN.conns_per_owner {
            let ip = format!("10.2.{host}.10");
            for c in 0..LAN.conns_per_owner as u32 {
                held.push(open(&mut t, key(&ip, c), Owner::Lan(ip.parse().unwrap())).unwrap());
            }
        }
        let err = open(&mut t, key("10.3.0.1", 1), Owner::Lan("10.3.0.1".parse().unwrap())).unwrap_err();
        assert_eq!(err, "busy: 256 requests from the LAN are in progress; retry when one completes");
        for c in 0..LOCAL.conns as u32 {
            held.push(open(&mut t, key("127.0.0.1", c), Owner::Local).unwrap());
        }
        assert!(open(&mut t, key("127.0.0.1", 5000), Owner::Local).unwrap_err().starts_with("busy: 1024 loopback"));
    }

    #[test]
    fn reassembly_pools_are_bounded_per_class_and_released() {
        let pools = ReassemblyPools::default();
        let lan = Owner::Lan("10.2.0.10".parse().unwrap());
        let most = pools.reserve(lan, LAN.reassembly_bytes - 100).unwrap();
        assert!(pools.reserve(lan, 200).unwrap_err().starts_with("busy: 16777116 bytes"));
        let _local = pools.reserve(Owner::Local, LOCAL.reassembly_bytes).unwrap();
        drop(most);
        let _again = pools.reserve(lan, 200).unwrap();
    }
}
