//! Rule sets by a byte-string key, looked up by a hash the caller computes as it walks the
//! request's bytes once: a path's prefixes are hashed as the path is scanned from its start, a
//! host's suffixes as it is read from its end. No prefix or suffix is sliced and hashed again,
//! which is most of what a lookup costs in the module.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::Bits;

/// FNV-1a, one byte at a time, over the bytes in the order the caller walks them. A request
/// chooses only what it looks up: it costs at most the longest probe the configuration's own
/// keys make, as for [`crate::fnv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    pub const START: KeyHash = KeyHash(0xcbf2_9ce4_8422_2325);

    #[inline]
    #[must_use]
    pub fn add(self, byte: u8) -> KeyHash {
        KeyHash((self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3))
    }

    /// The hash of `key` walked from its start.
    pub fn of(key: &[u8]) -> KeyHash {
        key.iter().fold(KeyHash::START, |h, b| h.add(*b))
    }

    /// The hash of `key` walked from its end.
    pub fn of_reversed(key: &[u8]) -> KeyHash {
        key.iter().rev().fold(KeyHash::START, |h, b| h.add(*b))
    }

    /// The hash of `key`, ASCII capitals folded, eight bytes a step: for a table looked up by
    /// whole values only, where a byte-at-a-time walk would buy nothing.
    pub fn of_folded_words(key: &[u8]) -> KeyHash {
        KeyHash(hash_words(key, fold_ascii))
    }
}

/// A hash of `bytes` eight at a time, each word passed through `map` first. The last eight
/// bytes overlap the words when the length is no multiple of eight (the length is hashed too);
/// a shorter value is padded.
pub fn hash_words(bytes: &[u8], map: impl Fn(u64) -> u64) -> u64 {
    let last = match bytes.len().checked_sub(8).and_then(|at| bytes.get(at..)) {
        Some(last) => word(last),
        None => {
            let mut padded = [0; 8];
            for (p, b) in padded.iter_mut().zip(bytes) {
                *p = *b;
            }
            u64::from_le_bytes(padded)
        }
    };
    bytes
        .chunks_exact(8)
        .map(word)
        .chain(std::iter::once(last))
        .fold(bytes.len() as u64, |h, w| {
            (h ^ map(w))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29)
        })
}

/// Eight bytes as a word (`chunks_exact(8)` gives eight).
pub fn word(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}

/// The word with each of its bytes that is an ASCII capital lowercased, all eight at once.
fn fold_ascii(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte, its low seven bits plus an offset set the byte's high bit when the byte is
    // at least `A` (0x41), or above `Z` (0x5a); no carry crosses bytes.
    let low = w & LOW7;
    let from_a = low + 0x3f3f_3f3f_3f3f_3f3f;
    let past_z = low + 0x2525_2525_2525_2525;
    let capitals = from_a & !past_z & !w & HIGH;
    w | (capitals >> 2)
}

/// The tables' hasher: their keys are hashes already.
#[derive(Debug, Default, Clone, Copy)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; anything else still hashes to something.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The keys of one hash, each with its rules: nearly always one.
type Slot = Vec<(Box<[u8]>, Bits)>;

/// Keys to the rules they meet. Two keys of one hash share its slot, told apart by their bytes.
#[derive(Debug, Default)]
pub struct Keyed {
    by: HashMap<u64, Slot, BuildHasherDefault<Prehashed>>,
}

impl Keyed {
    /// Rule `rule` is met by `key`, which [`Keyed::get`] will be asked for by `hash`.
    pub fn add(&mut self, hash: KeyHash, key: &[u8], rule: usize) {
        let slot = self.by.entry(hash.0).or_default();
        match slot.iter_mut().find(|(k, _)| **k == *key) {
            Some((_, bits)) => bits.set(rule),
            None => slot.push((key.into(), Bits::EMPTY.with(rule))),
        }
    }

    /// The rules of the key hashed `hash` for which `same` holds (it compares the key's bytes).
    #[inline]
    pub fn get(&self, hash: KeyHash, same: impl Fn(&[u8]) -> bool) -> Option<&Bits> {
        if self.by.is_empty() {
            return None;
        }
        self.by
            .get(&hash.0)?
            .iter()
            .find(|(k, _)| same(k))
            .map(|(_, bits)| bits)
    }

    pub fn is_empty(&self) -> bool {
        self.by.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_hash_are_told_apart_by_their_bytes() {
        let mut t = Keyed::default();
        let h = KeyHash::of(b"/a/");
        t.add(h, b"/a/", 1);
        // Another key filed under the same hash, as a collision would.
        t.add(h, b"/b/", 2);
        t.add(h, b"/a/", 3);
        assert_eq!(
            t.get(h, |k| k == b"/a/"),
            Some(&Bits::EMPTY.with(1).with(3))
        );
        assert_eq!(t.get(h, |k| k == b"/b/"), Some(&Bits::EMPTY.with(2)));
        assert_eq!(t.get(h, |k| k == b"/c/"), None);
        assert_eq!(t.get(KeyHash::of(b"/b/"), |k| k == b"/b/"), None);
    }

    #[test]
    fn words_are_folded_as_their_bytes_are() {
        for b in 0..=255u8 {
            let w = u64::from_le_bytes([b, b'A', b'z', b'Z', 0x80 | b'A', b'@', b'[', b]);
            let folded = fold_ascii(w).to_le_bytes();
            let each = w.to_le_bytes().map(|b| b.to_ascii_lowercase());
            assert_eq!(folded, each, "{b:#x}");
        }
        for (a, b) in [
            ("Edge.Example.TEST", "edge.example.test"),
            ("a", "A"),
            ("abcdefgh", "ABCDEFGH"),
        ] {
            assert_eq!(
                KeyHash::of_folded_words(a.as_bytes()),
                KeyHash::of_folded_words(b.as_bytes())
            );
        }
        assert_ne!(
            KeyHash::of_folded_words(b"edge.example.test"),
            KeyHash::of_folded_words(b"edge.example.tesu")
        );
        assert_ne!(
            KeyHash::of_folded_words(b"a"),
            KeyHash::of_folded_words(b"a\0")
        );
    }

    #[test]
    fn a_walk_from_either_end_hashes_as_the_whole_key() {
        let walked = b"/x/y".iter().fold(KeyHash::START, |h, b| h.add(*b));
        assert_eq!(walked, KeyHash::of(b"/x/y"));
        let back = b"a.example"
            .iter()
            .rev()
            .fold(KeyHash::START, |h, b| h.add(*b));
        assert_eq!(back, KeyHash::of_reversed(b"a.example"));
        assert_ne!(KeyHash::of(b"ab"), KeyHash::of_reversed(b"ab"));
    }
}
