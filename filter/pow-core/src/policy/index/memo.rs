//! The User-Agent condition's answer for the last few User-Agents. A browser sends the same
//! User-Agent with every request, and running the automaton over it costs more than the rest of
//! a decision. Only what the User-Agent alone decides is kept (the rules its substrings let
//! through), never a decision: the other conditions are read from each request.

use super::Bits;

/// The last [`UserAgentMemo::SIZE`] User-Agents (their first 1 KiB, as the automaton reads
/// them) and the rules each lets through; a new one takes the oldest slot.
#[derive(Debug, Default)]
pub struct UserAgentMemo {
    entries: Vec<Entry>,
    /// The slot the next new User-Agent takes, once every slot is used.
    next: usize,
}

#[derive(Debug)]
struct Entry {
    user_agent: Vec<u8>,
    rules: Bits,
}

impl UserAgentMemo {
    /// How many User-Agents are remembered: at most 16 KiB and 2 KiB of rule sets.
    pub const SIZE: usize = 16;

    /// The rules `user_agent` lets through, when it is one of the last seen.
    pub fn get(&self, user_agent: &[u8]) -> Option<&Bits> {
        self.entries
            .iter()
            .find(|e| same(&e.user_agent, user_agent))
            .map(|e| &e.rules)
    }

    /// Remembers the rules `user_agent` lets through, in place of the oldest when full (its
    /// buffer reused).
    pub fn put(&mut self, user_agent: &[u8], rules: Bits) {
        if self.entries.len() < Self::SIZE {
            self.entries.push(Entry {
                user_agent: user_agent.to_vec(),
                rules,
            });
            return;
        }
        let at = self.next % Self::SIZE;
        self.next = at + 1;
        if let Some(e) = self.entries.get_mut(at) {
            e.user_agent.clear();
            e.user_agent.extend_from_slice(user_agent);
            e.rules = rules;
        }
    }
}

/// `a == b`, eight bytes at a time: a slice comparison is a byte loop in the module.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a, b) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |c: &[u8]| <[u8; 8]>::try_from(c).map_or(0, u64::from_ne_bytes);
    a.remainder() == b.remainder() && a.zip(b).all(|(x, y)| word(x) == word(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_agents_are_remembered_and_the_oldest_goes() {
        let mut memo = UserAgentMemo::default();
        let ua = |i: usize| format!("Mozilla/5.0 (X11; Linux x86_64) agent-{i:02}");
        for i in 0..UserAgentMemo::SIZE {
            memo.put(ua(i).as_bytes(), Bits::EMPTY.with(i));
        }
        for i in 0..UserAgentMemo::SIZE {
            assert_eq!(memo.get(ua(i).as_bytes()), Some(&Bits::EMPTY.with(i)));
        }
        // Same length, one byte apart, a prefix, a case variant: none is another's.
        assert_eq!(memo.get(ua(99).as_bytes()), None);
        assert_eq!(memo.get(&ua(1).as_bytes()[..20]), None);
        assert_eq!(memo.get(ua(1).to_uppercase().as_bytes()), None);
        memo.put(ua(99).as_bytes(), Bits::EMPTY.with(99));
        assert_eq!(memo.get(ua(0).as_bytes()), None);
        assert_eq!(memo.get(ua(99).as_bytes()), Some(&Bits::EMPTY.with(99)));
        assert_eq!(memo.get(ua(1).as_bytes()), Some(&Bits::EMPTY.with(1)));
        memo.put(b"", Bits::EMPTY.with(7));
        assert_eq!(memo.get(ua(1).as_bytes()), None);
        assert_eq!(memo.get(b""), Some(&Bits::EMPTY.with(7)));
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
        ] {
            assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
        }
    }
}
