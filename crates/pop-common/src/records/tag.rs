//! The `kind` and `version` tags carried by every record.
//!
//! Both are zero-sized types: they serialise to the fixed value and refuse any other on reading,
//! so a record type cannot be built or read with the wrong tag.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// A record type's fixed `kind` string.
pub trait RecordKind {
    const KIND: &'static str;
}

/// The `kind` field of record `R`: always `R::KIND`.
pub struct Kind<R>(PhantomData<R>);

impl<R> Kind<R> {
    pub const fn new() -> Self {
        Kind(PhantomData)
    }
}

impl<R> Default for Kind<R> {
    fn default() -> Self {
        Kind::new()
    }
}

impl<R> Clone for Kind<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Kind<R> {}

impl<R> PartialEq for Kind<R> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<R> Eq for Kind<R> {}

impl<R: RecordKind> fmt::Debug for Kind<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(R::KIND)
    }
}

impl<R: RecordKind> Serialize for Kind<R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(R::KIND)
    }
}

impl<'de, R: RecordKind> Deserialize<'de> for Kind<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let found = String::deserialize(d)?;
        if found == R::KIND {
            Ok(Kind::new())
        } else {
            Err(de::Error::custom(format!(
                "expected kind `{}`, found `{found}`",
                R::KIND
            )))
        }
    }
}

/// The `version` field: always `N`.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Version<const N: u32>;

impl<const N: u32> fmt::Debug for Version<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{N}")
    }
}

impl<const N: u32> Serialize for Version<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(N)
    }
}

impl<'de, const N: u32> Deserialize<'de> for Version<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let found = u32::deserialize(d)?;
        if found == N {
            Ok(Version)
        } else {
            Err(de::Error::custom(format!(
                "unsupported version {found}: this tool reads version {N}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Thing;
    impl RecordKind for Thing {
        const KIND: &'static str = "Thing";
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Tagged {
        kind: Kind<Thing>,
        version: Version<3>,
    }

    #[test]
    fn tags_round_trip_and_refuse_other_values() {
        let text = serde_json::to_string(&Tagged {
            kind: Kind::new(),
            version: Version,
        })
        .unwrap();
        assert_eq!(text, r#"{"kind":"Thing","version":3}"#);
        assert!(serde_json::from_str::<Tagged>(&text).is_ok());
        for (wrong, error) in [
            (r#"{"kind":"Other","version":3}"#, "expected kind `Thing`"),
            (r#"{"kind":"Thing","version":4}"#, "unsupported version 4"),
        ] {
            let err = serde_json::from_str::<Tagged>(wrong).unwrap_err();
            assert!(err.to_string().contains(error), "{err}");
        }
    }
}
