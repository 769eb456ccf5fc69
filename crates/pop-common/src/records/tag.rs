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

/// Declares a record type: a struct whose first fields are its `kind` and `version` tags, with the
/// derives every record has, unknown fields refused, and its [`RecordKind`]: the struct's own
/// name, so the name a reader meets in the JSON is the type's, declared once. Attributes before
/// `version` go to the `version` field (a reader that explains an old version its own way).
///
/// ```
/// use pop_common::records::{Kind, Version};
///
/// pub const THING_VERSION: u32 = 1;
///
/// pop_common::record! {
///     /// A thing, as it crosses a pipe.
///     pub struct Thing, version THING_VERSION {
///         pub name: String,
///     }
/// }
///
/// let thing = Thing { kind: Kind::new(), version: Version, name: "a".into() };
/// assert_eq!(
///     serde_json::to_string(&thing).unwrap(),
///     r#"{"kind":"Thing","version":1,"name":"a"}"#
/// );
/// for refused in [
///     r#"{"kind":"Other","version":1,"name":"a"}"#,
///     r#"{"kind":"Thing","version":2,"name":"a"}"#,
///     r#"{"kind":"Thing","version":1,"name":"a","more":1}"#,
/// ] {
///     assert!(serde_json::from_str::<Thing>(refused).is_err(), "{refused}");
/// }
/// ```
#[macro_export]
macro_rules! record {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident, $(#[$version_meta:meta])* version $version:ident {
            $( $(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {
            pub kind: $crate::records::Kind<$name>,
            $(#[$version_meta])*
            pub version: $crate::records::Version<$version>,
            $( $(#[$field_meta])* $field_vis $field : $ty, )*
        }

        impl $crate::records::RecordKind for $name {
            const KIND: &'static str = stringify!($name);
        }
    };
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
