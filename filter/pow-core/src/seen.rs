//! The per-VM seen-set: a solved challenge is spent and cannot be verified again before it
//! expires.
//!
//! It lives in proxy-wasm shared data (behind [`SharedStore`], so that it is tested natively),
//! in [`SHARDS`] entries `pow.seen.<shard>`, the shard chosen by the client's binding network
//! (its /24 or /64). An entry is a list of records, oldest first: the challenge's expiry (8 bytes,
//! little-endian) and its first [`ID_LEN`] bytes. A write drops the records that have expired,
//! and when the shard is full, the oldest records (counted as evicted). Writes use the store's
//! compare-and-swap and retry a few times.
//!
//! Availability comes first: a full shard evicts rather than refuses, and a store that fails or
//! stays busy lets the solution through, counted as unrecorded. So one client spending its own
//! cheap solutions as fast as it can only ever evicts records of its own shard: nobody is locked
//! out, and memory stays within `SHARDS * SHARD_CAPACITY * RECORD_LEN` bytes. The key depends on
//! nothing in the configuration (the challenge TTL included), so a new configuration never
//! reopens solutions already spent. Only solved challenges are written, so unauthenticated
//! traffic never writes here.
//!
//! The seen-set also records when it started ([`EPOCH_KEY`], written by the first VM of the
//! proxy at configure time). Shared data lives as long as the proxy process: after a restart the
//! set is empty and cannot know what was spent before, so a challenge issued before the set
//! started is refused as a possible replay (a key rotation that restarts the proxy is covered
//! alike). What it cannot see stays possible: a solution spent at one gateway replica and
//! replayed at another (each has its own set), or one whose record a full shard evicted, within
//! the challenge's lifetime; a clearance cookie is a bearer token until its own expiry.

use crate::net::Net;

/// Shared-data entries (one per group of client networks).
pub const SHARDS: u64 = 64;
/// Spent challenges remembered per shard (24 bytes each: 6 KiB a shard at most).
pub const SHARD_CAPACITY: usize = 256;
/// Bytes of a challenge remembered (128 bits: collisions are out of reach).
pub const ID_LEN: usize = 16;
/// Bytes of one record: expiry, then the challenge's first bytes.
pub const RECORD_LEN: usize = 8 + ID_LEN;
const CAS_RETRIES: usize = 8;
/// The shared-data key of the time (Unix seconds, 8 bytes little-endian) the seen-set started.
pub const EPOCH_KEY: &str = "pow.seen.epoch";

/// Why a store operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// Someone wrote in between (CAS_MISMATCH).
    CasMismatch,
    /// Any other failure of the host.
    Failed,
}

/// The proxy-wasm shared data, or a stand-in for it.
pub trait SharedStore {
    /// The value and its CAS token; `None` when the key does not exist.
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError>;
    /// Writes only if the value's CAS token is still `cas` (0 writes unconditionally).
    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError>;
}

/// A challenge already spent: the one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replay;

/// How a challenge was marked spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// Recorded.
    Recorded,
    /// Recorded, after evicting this many unexpired records of a full shard.
    Evicted(usize),
    /// Not recorded: the store failed or stayed busy. Let through all the same.
    Unrecorded,
}

/// The shared-data key of a client network's shard.
pub fn shard_key(net: &Net) -> String {
    // FNV-1a: spreads networks over the shards; nothing here needs to be secret.
    let hash = net.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("pow.seen.{}", hash % SHARDS)
}

/// Records that the seen-set starts at `now`, unless it already started (another VM of the same
/// proxy, or an earlier configuration of this one). Called at configure time; a failure only
/// means the first verification records it instead.
pub fn start(store: &mut dyn SharedStore, now: u64) {
    if let Ok(None) = store.get(EPOCH_KEY) {
        let _ = store.set(EPOCH_KEY, &now.to_le_bytes(), 0);
    }
}

/// When the seen-set started; recorded as `now` if it had not been. `None` when the store fails.
fn epoch(store: &mut dyn SharedStore, now: u64) -> Option<u64> {
    match store.get(EPOCH_KEY) {
        Ok(Some((value, _))) => {
            Some(<[u8; 8]>::try_from(value.as_slice()).map_or(now, u64::from_le_bytes))
        }
        Ok(None) => {
            start(store, now);
            Some(now)
        }
        Err(_) => None,
    }
}

/// Marks `challenge` (issued at `issued`, expiring at `expiry`, solved by a client of network
/// `net`) as spent at `now`; `Err(Replay)` if it already was, or if it was issued before the
/// seen-set started (it cannot know).
pub fn spend(
    store: &mut dyn SharedStore,
    net: &Net,
    challenge: &[u8; 32],
    issued: u64,
    expiry: u64,
    now: u64,
) -> Result<Spent, Replay> {
    match epoch(store, now) {
        Some(started) if issued < started => return Err(Replay),
        Some(_) => {}
        None => return Ok(Spent::Unrecorded),
    }
    let key = shard_key(net);
    let id = &challenge[..ID_LEN];
    for _ in 0..CAS_RETRIES {
        let (current, cas) = match store.get(&key) {
            Ok(Some((v, cas))) => (v, cas),
            Ok(None) => (Vec::new(), 0),
            Err(_) => return Ok(Spent::Unrecorded),
        };
        // A value of another shape (another version of the filter) is started afresh.
        let records: &[u8] = if current.len() % RECORD_LEN == 0 {
            &current
        } else {
            &[]
        };
        let live: Vec<&[u8]> = records
            .chunks_exact(RECORD_LEN)
            .filter(|r| record_expiry(r) >= now)
            .collect();
        if live.iter().any(|r| &r[8..] == id) {
            return Err(Replay);
        }
        let evicted = (live.len() + 1).saturating_sub(SHARD_CAPACITY);
        let mut next = Vec::with_capacity((live.len() + 1 - evicted) * RECORD_LEN);
        for r in &live[evicted..] {
            next.extend_from_slice(r);
        }
        next.extend_from_slice(&expiry.to_le_bytes());
        next.extend_from_slice(id);
        match store.set(&key, &next, cas) {
            Ok(()) if evicted > 0 => return Ok(Spent::Evicted(evicted)),
            Ok(()) => return Ok(Spent::Recorded),
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Failed) => return Ok(Spent::Unrecorded),
        }
    }
    Ok(Spent::Unrecorded)
}

fn record_expiry(record: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&record[..8]);
    u64::from_le_bytes(bytes)
}

/// An in-memory [`SharedStore`] with proxy-wasm's CAS semantics, for tests and benches.
#[derive(Debug, Default)]
pub struct MemoryStore {
    entries: std::collections::HashMap<String, (Vec<u8>, u32)>,
    /// When set, the next `set` calls fail with CAS_MISMATCH this many times.
    pub conflicts: usize,
    /// When true, every call fails.
    pub broken: bool,
}

impl MemoryStore {
    /// Bytes held (keys and values).
    pub fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, (v, _))| k.len() + v.len())
            .sum()
    }
}

impl SharedStore for MemoryStore {
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        if self.broken {
            return Err(StoreError::Failed);
        }
        Ok(self.entries.get(key).cloned())
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        if self.broken {
            return Err(StoreError::Failed);
        }
        if self.conflicts > 0 {
            self.conflicts -= 1;
            return Err(StoreError::CasMismatch);
        }
        let current = self.entries.get(key).map_or(0, |(_, c)| *c);
        if cas != 0 && cas != current {
            return Err(StoreError::CasMismatch);
        }
        self.entries
            .insert(key.to_owned(), (value.to_vec(), current.wrapping_add(1)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: Net = [4, 192, 0, 2, 0, 0, 0, 0, 0];

    fn id(n: u32) -> [u8; 32] {
        let mut c = [0u8; 32];
        c[..4].copy_from_slice(&n.to_be_bytes());
        c
    }

    fn net(n: u32) -> Net {
        let mut out = [0u8; 9];
        out[0] = 6;
        out[1..5].copy_from_slice(&n.to_be_bytes());
        out
    }

    #[test]
    fn a_challenge_is_spent_once_until_it_expires() {
        let mut s = MemoryStore::default();
        assert_eq!(
            spend(&mut s, &NET, &id(1), 1000, 1300, 1000),
            Ok(Spent::Recorded)
        );
        assert_eq!(
            spend(&mut s, &NET, &id(2), 1000, 1300, 1000),
            Ok(Spent::Recorded)
        );
        assert_eq!(spend(&mut s, &NET, &id(1), 1000, 1300, 1000), Err(Replay));
        assert_eq!(spend(&mut s, &NET, &id(2), 1000, 1300, 1299), Err(Replay));
        assert_eq!(spend(&mut s, &NET, &id(2), 1000, 1300, 1300), Err(Replay));
        // Past its expiry the record is dropped (the verify refuses such a challenge anyway).
        assert_eq!(
            spend(&mut s, &NET, &id(3), 1000, 2000, 1301),
            Ok(Spent::Recorded)
        );
        assert_eq!(
            s.bytes(),
            shard_key(&NET).len() + RECORD_LEN + EPOCH_KEY.len() + 8
        );
    }

    #[test]
    fn the_key_depends_on_the_network_only() {
        assert_eq!(shard_key(&NET), shard_key(&NET));
        let keys: std::collections::HashSet<String> =
            (0..10_000).map(|n| shard_key(&net(n))).collect();
        assert_eq!(
            keys.len() as u64,
            SHARDS,
            "networks spread over every shard"
        );
    }

    #[test]
    fn a_full_shard_evicts_the_oldest_and_never_refuses() {
        let mut s = MemoryStore::default();
        for n in 0..SHARD_CAPACITY as u32 {
            assert_eq!(
                spend(&mut s, &NET, &id(n), 1000, 1300, 1000),
                Ok(Spent::Recorded)
            );
        }
        let full = s.bytes();
        assert_eq!(
            spend(&mut s, &NET, &id(u32::MAX), 1000, 1300, 1000),
            Ok(Spent::Evicted(1))
        );
        assert_eq!(s.bytes(), full);
        // The oldest went; the newest are still remembered.
        assert_eq!(spend(&mut s, &NET, &id(1), 1000, 1300, 1000), Err(Replay));
        assert_eq!(
            spend(&mut s, &NET, &id(u32::MAX), 1000, 1300, 1000),
            Err(Replay)
        );
        assert_eq!(
            spend(&mut s, &NET, &id(0), 1000, 1300, 1000),
            Ok(Spent::Evicted(1))
        );
    }

    #[test]
    fn conflicts_are_retried_and_a_failing_store_lets_through() {
        // (CAS conflicts before a write succeeds, every call failing, what the spend says)
        for (conflicts, broken, spent) in [
            (3, false, Spent::Recorded),
            (100, false, Spent::Unrecorded),
            (0, true, Spent::Unrecorded),
        ] {
            let mut s = MemoryStore {
                conflicts,
                broken,
                ..MemoryStore::default()
            };
            assert_eq!(
                spend(&mut s, &NET, &id(1), 1000, 1300, 1000),
                Ok(spent),
                "{conflicts} conflicts, broken: {broken}"
            );
        }
    }

    #[test]
    fn a_challenge_issued_before_the_set_started_is_refused() {
        let mut s = MemoryStore::default();
        start(&mut s, 1000);
        // Another VM of the same proxy starting later does not move the start.
        start(&mut s, 1200);
        assert_eq!(spend(&mut s, &NET, &id(1), 999, 1300, 1250), Err(Replay));
        assert_eq!(
            spend(&mut s, &NET, &id(2), 1000, 1300, 1250),
            Ok(Spent::Recorded)
        );
        // Never started (the configure-time write failed): it starts at the first verification.
        let mut s = MemoryStore::default();
        assert_eq!(spend(&mut s, &NET, &id(1), 999, 1300, 1000), Err(Replay));
        assert_eq!(
            spend(&mut s, &NET, &id(2), 1000, 1300, 1000),
            Ok(Spent::Recorded)
        );
    }

    #[test]
    fn a_value_of_another_shape_starts_afresh() {
        let mut s = MemoryStore::default();
        s.set(&shard_key(&NET), &[1, 2, 3], 0).unwrap();
        assert_eq!(
            spend(&mut s, &NET, &id(1), 1000, 1300, 1000),
            Ok(Spent::Recorded)
        );
        assert_eq!(spend(&mut s, &NET, &id(1), 1000, 1300, 1000), Err(Replay));
    }
}
