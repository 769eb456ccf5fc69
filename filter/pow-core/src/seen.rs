//! The per-VM seen-set: a solved challenge is spent and cannot be verified again before it
//! expires.
//!
//! It lives in proxy-wasm shared data (behind [`SharedStore`], so that it is tested natively).
//! Time is cut into epochs of `width` seconds, with `(ttl / (SLOTS - 1))` rounded up as the
//! width; a challenge is recorded in slot `(expiry / width) % SLOTS`, whose value is the
//! epoch (8 bytes, little-endian) followed by the 16-byte prefixes of the spent challenges. A
//! slot holding an older epoch is reset on the next write: its challenges had all expired,
//! because a challenge is never accepted with an expiry more than `ttl` ahead. Writes use the
//! store's compare-and-swap and retry a few times. A full slot refuses (denies) rather than
//! forgets. Only solved challenges are written, so unauthenticated traffic never writes here.

/// Slots in the ring.
pub const SLOTS: u64 = 16;
/// Spent challenges remembered per slot (16 bytes each: 64 KiB a slot at most).
pub const SLOT_CAPACITY: usize = 4096;
/// Bytes of a challenge remembered (128 bits: collisions are out of reach).
pub const ID_LEN: usize = 16;
const CAS_RETRIES: usize = 8;

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

/// Why a challenge could not be marked spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendError {
    /// Already spent: a replay.
    Replay,
    /// The slot is full, busy after retries, or the store failed: denied all the same.
    Store,
}

/// The epoch width for a challenge TTL.
pub fn epoch_width(challenge_ttl: u64) -> u64 {
    challenge_ttl.div_ceil(SLOTS - 1).max(1)
}

/// Marks `challenge` (expiring at `expiry`) as spent; `Err(Replay)` if it already was.
pub fn spend(
    store: &mut dyn SharedStore,
    challenge: &[u8; 32],
    expiry: u64,
    challenge_ttl: u64,
) -> Result<(), SpendError> {
    let width = epoch_width(challenge_ttl);
    let epoch = expiry / width;
    let key = format!("pow.seen.{width}.{}", epoch % SLOTS);
    let id = &challenge[..ID_LEN];
    for _ in 0..CAS_RETRIES {
        let (current, cas) = match store.get(&key) {
            Ok(Some((v, cas))) => (v, cas),
            Ok(None) => (Vec::new(), 0),
            Err(_) => return Err(SpendError::Store),
        };
        let mut next = match current.get(..8) {
            Some(head) if u64::from_le_bytes(head.try_into().unwrap_or([0; 8])) == epoch => {
                let entries = &current[8..];
                if entries.len() % ID_LEN != 0 {
                    return Err(SpendError::Store);
                }
                if entries.chunks_exact(ID_LEN).any(|e| e == id) {
                    return Err(SpendError::Replay);
                }
                if entries.len() / ID_LEN >= SLOT_CAPACITY {
                    return Err(SpendError::Store);
                }
                current
            }
            Some(head) if u64::from_le_bytes(head.try_into().unwrap_or([0; 8])) > epoch => {
                // A newer epoch took the slot: this challenge has expired by now.
                return Err(SpendError::Store);
            }
            _ => epoch.to_le_bytes().to_vec(),
        };
        next.extend_from_slice(id);
        match store.set(&key, &next, cas) {
            Ok(()) => return Ok(()),
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Failed) => return Err(SpendError::Store),
        }
    }
    Err(SpendError::Store)
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

    fn id(n: u32) -> [u8; 32] {
        let mut c = [0u8; 32];
        c[..4].copy_from_slice(&n.to_be_bytes());
        c
    }

    #[test]
    fn a_challenge_is_spent_once() {
        let mut s = MemoryStore::default();
        assert_eq!(spend(&mut s, &id(1), 1000, 300), Ok(()));
        assert_eq!(spend(&mut s, &id(2), 1000, 300), Ok(()));
        assert_eq!(spend(&mut s, &id(1), 1000, 300), Err(SpendError::Replay));
        assert_eq!(spend(&mut s, &id(2), 1000, 300), Err(SpendError::Replay));
    }

    #[test]
    fn old_epochs_are_recycled_but_never_inside_the_window() {
        let ttl = 300;
        let w = epoch_width(ttl);
        assert_eq!(w, 20);
        // The window argument: a slot is reused only after SLOTS-1 epochs >= ttl.
        assert!((SLOTS - 1) * w >= ttl);
        let mut s = MemoryStore::default();
        assert_eq!(spend(&mut s, &id(1), 1000, ttl), Ok(()));
        // Same slot, SLOTS epochs later: the old entries are dropped.
        let later = 1000 + SLOTS * w;
        assert_eq!(spend(&mut s, &id(1), later, ttl), Ok(()));
        assert_eq!(spend(&mut s, &id(1), later, ttl), Err(SpendError::Replay));
        // The old epoch cannot come back into a newer slot.
        assert_eq!(spend(&mut s, &id(9), 1000, ttl), Err(SpendError::Store));
    }

    #[test]
    fn conflicts_are_retried_then_refused() {
        let mut s = MemoryStore {
            conflicts: 3,
            ..MemoryStore::default()
        };
        assert_eq!(spend(&mut s, &id(1), 1000, 300), Ok(()));
        let mut s = MemoryStore {
            conflicts: 100,
            ..MemoryStore::default()
        };
        assert_eq!(spend(&mut s, &id(1), 1000, 300), Err(SpendError::Store));
        let mut s = MemoryStore {
            broken: true,
            ..MemoryStore::default()
        };
        assert_eq!(spend(&mut s, &id(1), 1000, 300), Err(SpendError::Store));
    }

    #[test]
    fn a_full_slot_refuses() {
        let mut s = MemoryStore::default();
        for n in 0..SLOT_CAPACITY as u32 {
            assert_eq!(spend(&mut s, &id(n), 1000, 300), Ok(()));
        }
        assert_eq!(
            spend(&mut s, &id(u32::MAX), 1000, 300),
            Err(SpendError::Store)
        );
        assert_eq!(spend(&mut s, &id(5), 1000, 300), Err(SpendError::Replay));
    }
}
