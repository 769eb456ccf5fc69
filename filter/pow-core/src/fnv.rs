//! FNV-1a, the hasher of the maps a request looks up by a key the configuration (or the filter
//! itself) chose: SipHash, the std default, is there to resist chosen keys and costs more than
//! the rest of such a lookup. A request only chooses what it looks up, which costs at most the
//! longest probe the configuration's own keys make.

use std::hash::BuildHasherDefault;

/// The hasher; use it through [`FnvBuild`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let start = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        self.0 = bytes.iter().fold(start, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    }
}

/// The `BuildHasher` of a `HashMap` hashed with FNV-1a.
pub type FnvBuild = BuildHasherDefault<Fnv>;
