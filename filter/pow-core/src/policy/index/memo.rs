//! A condition's answer for the last few values it read. A browser sends the same User-Agent
//! with every request, and a site has a few hosts: running the User-Agent automaton, or hashing
//! the host, costs more than comparing the value with the last ones seen. Only what one value
//! alone decides is kept (the rules its condition lets through), never a decision: the other
//! conditions are read from each request.

use super::Bits;
use super::keyed::{hash_words, word};

/// The last [`Memo::SIZE`] values (at most [`Memo::MAX_KEY`] bytes each) and the rules each
/// lets through; a new one takes the oldest slot.
#[derive(Debug, Default)]
pub struct Memo {
    entries: Vec<Entry>,
    /// The slot the next new value takes, once every slot is used.
    next: usize,
}

#[derive(Debug)]
struct Entry {
    hash: u64,
    key: Vec<u8>,
    rules: Bits,
}

/// A value as a memo looks it up: its bytes and their hash, computed once, so that a value
/// seen for the first time costs a comparison of hashes with each one remembered, whatever
/// bytes they share.
#[derive(Debug, Clone, Copy)]
pub struct Key<'k> {
    bytes: &'k [u8],
    hash: u64,
}

impl<'k> Key<'k> {
    pub fn new(bytes: &'k [u8]) -> Key<'k> {
        // The hash only spares comparisons: it decides nothing.
        let hash = hash_words(bytes, |w| w);
        Key { bytes, hash }
    }
}

impl Memo {
    /// How many values are remembered.
    pub const SIZE: usize = 16;
    /// The longest value remembered (a User-Agent is read up to 1 KiB): a memo holds at most
    /// 16 KiB of values and 2 KiB of rule sets.
    pub const MAX_KEY: usize = crate::crypto::MAX_USER_AGENT;

    /// The rules `key` lets through, when it is one of the last seen.
    pub fn get(&self, key: Key<'_>) -> Option<&Bits> {
        self.entries
            .iter()
            .find(|e| e.hash == key.hash && same(&e.key, key.bytes))
            .map(|e| &e.rules)
    }

    /// Remembers the rules `key` lets through, in place of the oldest when full (its buffer
    /// reused); a key longer than [`Memo::MAX_KEY`] is not remembered.
    pub fn put(&mut self, key: Key<'_>, rules: Bits) {
        if key.bytes.len() > Self::MAX_KEY {
            return;
        }
        if self.entries.len() < Self::SIZE {
            self.entries.push(Entry {
                hash: key.hash,
                key: key.bytes.to_vec(),
                rules,
            });
            return;
        }
        let at = self.next % Self::SIZE;
        self.next = at + 1;
        if let Some(e) = self.entries.get_mut(at) {
            e.hash = key.hash;
            e.key.clear();
            e.key.extend_from_slice(key.bytes);
            e.rules = rules;
        }
    }
}

/// `a == b`, eight bytes at a time, the last eight overlapping the others: a slice comparison
/// is a byte loop in the module.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let last = |s: &[u8]| s.len().checked_sub(8).and_then(|at| s.get(at..)).map(word);
    match (last(a), last(b)) {
        (Some(x), Some(y)) => {
            x == y
                && a.chunks_exact(8)
                    .zip(b.chunks_exact(8))
                    .all(|(x, y)| word(x) == word(y))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_values_are_remembered_and_the_oldest_goes() {
        let mut memo = Memo::default();
        let ua = |i: usize| format!("Mozilla/5.0 (X11; Linux x86_64) agent-{i:02}");
        for i in 0..Memo::SIZE {
            memo.put(Key::new(ua(i).as_bytes()), Bits::EMPTY.with(i));
        }
        for i in 0..Memo::SIZE {
            assert_eq!(
                memo.get(Key::new(ua(i).as_bytes())),
                Some(&Bits::EMPTY.with(i))
            );
        }
        // Same length, one byte apart, a prefix, a case variant: none is another's.
        assert_eq!(memo.get(Key::new(ua(99).as_bytes())), None);
        assert_eq!(memo.get(Key::new(&ua(1).as_bytes()[..20])), None);
        assert_eq!(memo.get(Key::new(ua(1).to_uppercase().as_bytes())), None);
        memo.put(Key::new(ua(99).as_bytes()), Bits::EMPTY.with(99));
        assert_eq!(memo.get(Key::new(ua(0).as_bytes())), None);
        assert_eq!(
            memo.get(Key::new(ua(99).as_bytes())),
            Some(&Bits::EMPTY.with(99))
        );
        assert_eq!(
            memo.get(Key::new(ua(1).as_bytes())),
            Some(&Bits::EMPTY.with(1))
        );
        memo.put(Key::new(&[b'x'; Memo::MAX_KEY + 1]), Bits::EMPTY.with(8));
        assert_eq!(memo.get(Key::new(&[b'x'; Memo::MAX_KEY + 1])), None);
        memo.put(Key::new(b""), Bits::EMPTY.with(7));
        assert_eq!(memo.get(Key::new(ua(1).as_bytes())), None);
        assert_eq!(memo.get(Key::new(b"")), Some(&Bits::EMPTY.with(7)));
    }

    #[test]
    fn values_of_one_hash_are_told_apart_by_their_bytes() {
        let mut memo = Memo::default();
        let (a, b) = (
            Key {
                bytes: b"a",
                hash: 1,
            },
            Key {
                bytes: b"b",
                hash: 1,
            },
        );
        memo.put(a, Bits::EMPTY.with(1));
        assert_eq!(memo.get(b), None);
        memo.put(b, Bits::EMPTY.with(2));
        assert_eq!(memo.get(a), Some(&Bits::EMPTY.with(1)));
        assert_eq!(memo.get(b), Some(&Bits::EMPTY.with(2)));
    }

    #[test]
    fn bytes_are_compared_whole() {
        for (a, b) in [
            (&b""[..], &b""[..]),
            (b"abcdefgh", b"abcdefgh"),
            (b"abcdefgh", b"abcdefgi"),
            (b"abcdefghij", b"abcdefghik"),
            (b"abcdefghij", b"abcdefghi"),
            (b"xbcdefghij", b"abcdefghij"),
            (b"abcdefghijklmnopq", b"abcdefghijklmnopq"),
            (b"abcdefghijklmnopq", b"abcdefghijklmnopr"),
            (b"abcdefghijklmnopq", b"abcdefgxijklmnopq"),
            (b"abc", b"abd"),
        ] {
            assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
        }
    }
}
