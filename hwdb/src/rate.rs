//! Each LAN address's row rate: a token bucket per address, so that one device's agent (or
//! anything speaking for that address) cannot fill every table's ring with its own rows and
//! evict every other device's reports. Pure bookkeeping: the caller passes the time.
//!
//! The numbers come from what an agent really sends. It reports a connection once, when it
//! opens; at start-up it reports every open connection at once, in statements of about 480
//! rows (32 KiB). A busy desktop holds a few hundred connections; the agent's bench machine
//! held 1,000 (`bench/results/agent.json`). A burst of 2,000 rows takes such a start-up scan
//! twice over (an agent restarted at once), and 200 rows/s afterwards is far above how fast a
//! computer opens new connections (a web page opens tens), while one flooding address needs
//! 1,000 s to cycle a 200,000-row ring instead of about 1 s.
//!
//! The state is bounded: at most `addresses` buckets. A bucket that has refilled is the same
//! as no bucket, so it is forgotten when room is needed; if every bucket is still draining
//! (a LAN of forged addresses), addresses without one share a single overflow bucket.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowRate {
    /// Rows per second an address may insert on average.
    pub per_second: f64,
    /// Rows an address may insert at once after a quiet while; the most one insert may hold.
    pub burst: f64,
    /// Addresses with a bucket of their own at most.
    pub addresses: usize,
}

/// The LAN's rate: see the module's comment for why these numbers.
pub const LAN_ROWS: RowRate = RowRate { per_second: 200.0, burst: 2000.0, addresses: 1024 };

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// After a refusal the address was told to retry at this time; until then it may send
    /// nothing (so a flood is refused before it is parsed, not after).
    hold: Instant,
}

impl Bucket {
    fn full(rate: &RowRate, now: Instant) -> Bucket {
        Bucket { tokens: rate.burst, at: now, hold: now }
    }

    fn refill(&mut self, rate: &RowRate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(rate.burst);
        self.at = now;
    }
}

pub struct RowRates {
    rate: RowRate,
    buckets: HashMap<IpAddr, Bucket>,
    overflow: Bucket,
}

impl RowRates {
    pub fn new(rate: RowRate, now: Instant) -> RowRates {
        RowRates { rate, buckets: HashMap::new(), overflow: Bucket::full(&rate, now) }
    }

    /// Addresses that have a bucket of their own now.
    pub fn tracked(&self) -> usize {
        self.buckets.len()
    }

    fn bucket(&mut self, ip: IpAddr, now: Instant) -> &mut Bucket {
        let rate = self.rate;
        if !self.buckets.contains_key(&ip) && self.buckets.len() >= rate.addresses {
            self.buckets.retain(|_, b| {
                b.refill(&rate, now);
                b.tokens < rate.burst
            });
        }
        if self.buckets.contains_key(&ip) || self.buckets.len() < rate.addresses {
            self.buckets.entry(ip).or_insert_with(|| Bucket::full(&rate, now))
        } else {
            &mut self.overflow
        }
    }

    /// Whether `ip` may send a statement at all at `now`, taking nothing: its bucket holds at
    /// least one row and the time it was told to retry at has come. Asked at a request's first
    /// datagram, so a refused address costs no reassembly and no parsing.
    pub fn ready(&mut self, ip: IpAddr, now: Instant) -> Result<(), String> {
        let rate = self.rate;
        let bucket = self.bucket(ip, now);
        if now < bucket.hold {
            return Err(busy(ip, &rate, bucket.hold - now));
        }
        self.refilled(ip, 1, now).map(|_| ())
    }

    /// Take `rows` from `ip`'s bucket at `now`, or say why not: `busy:` and when to retry if the
    /// bucket holds too few (nothing is taken then), or that `rows` is more than any one insert
    /// may hold.
    pub fn take(&mut self, ip: IpAddr, rows: usize, now: Instant) -> Result<(), String> {
        let rate = self.rate;
        if rows as f64 > rate.burst {
            return Err(format!(
                "an insert from the LAN may hold at most {} rows; this one holds {rows}: send it in smaller statements",
                rate.burst
            ));
        }
        self.refilled(ip, rows, now)?.tokens -= rows as f64;
        Ok(())
    }

    /// `ip`'s bucket refilled to `now`, if it holds `rows`.
    fn refilled(&mut self, ip: IpAddr, rows: usize, now: Instant) -> Result<&mut Bucket, String> {
        let rate = self.rate;
        let bucket = self.bucket(ip, now);
        bucket.refill(&rate, now);
        if bucket.tokens < rows as f64 {
            let wait = Duration::from_secs_f64((rows as f64 - bucket.tokens) / rate.per_second);
            bucket.hold = now + wait;
            return Err(busy(ip, &rate, wait));
        }
        Ok(bucket)
    }
}

fn busy(ip: IpAddr, rate: &RowRate, wait: Duration) -> String {
    format!(
        "busy: {ip} sent more AppTuples rows than its rate of {} rows/s (bursts of {}); retry in {:.2} s",
        rate.per_second,
        rate.burst,
        wait.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: RowRate = RowRate { per_second: 100.0, burst: 1000.0, addresses: 4 };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_gets_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut r = RowRates::new(RATE, t0);
        let me = ip("10.2.0.10");
        for _ in 0..10 {
            r.take(me, 100, t0).unwrap();
        }
        let err = r.take(me, 100, t0).unwrap_err();
        assert_eq!(
            err,
            "busy: 10.2.0.10 sent more AppTuples rows than its rate of 100 rows/s (bursts of 1000); retry in 1.00 s"
        );
        // Another address is not affected (the positive control).
        r.take(ip("10.2.0.11"), 1000, t0).unwrap();
        // Until the time it was told, it may send nothing, not even what would fit by then.
        assert!(r.ready(me, t0 + Duration::from_millis(500)).unwrap_err().ends_with("retry in 0.50 s"));
        // A second later a 100-row batch has come back.
        r.take(me, 100, t0 + Duration::from_secs(1)).unwrap();
        // A long quiet refills the bucket to its burst and no further.
        r.take(me, 1000, t0 + Duration::from_secs(3600)).unwrap();
        assert!(r.ready(me, t0 + Duration::from_secs(3600)).unwrap_err().ends_with("retry in 0.01 s"));
        r.ready(me, t0 + Duration::from_millis(3_600_020)).unwrap();
        assert!(r.take(me, 1001, t0).unwrap_err().starts_with("an insert from the LAN may hold at most 1000 rows"));
    }

    #[test]
    fn forged_addresses_cannot_grow_the_state_nor_starve_real_ones() {
        let t0 = Instant::now();
        let mut r = RowRates::new(RATE, t0);
        // Four addresses drain their buckets; every further address shares the overflow bucket.
        for i in 0..4 {
            r.take(ip(&format!("10.2.0.{i}")), 1000, t0).unwrap();
        }
        for i in 0..10_000u32 {
            let _ = r.take(IpAddr::from((0x0a030000u32 + i).to_be_bytes()), 1, t0);
            assert!(r.tracked() <= RATE.addresses);
        }
        assert!(r.take(ip("10.9.9.9"), 1, t0).is_err(), "the overflow bucket is drained");
        // Once a bucket has refilled it is forgotten to make room for a newcomer.
        let later = t0 + Duration::from_secs(10);
        r.take(ip("10.9.9.9"), 1000, later).unwrap();
        assert_eq!(r.tracked(), 1);
    }
}
