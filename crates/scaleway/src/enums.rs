//! The API's string enums (a server's state, a boot type, ...) as Rust enums. The specs list the
//! values an API version knows; a newer API may answer one this client has never seen, which is
//! kept as `Other(text)` rather than refused, so a listing never fails on a state the tools do
//! not act on.

/// An enum of the values the spec lists, each with its text, plus `Other(String)`.
macro_rules! api_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A value this client does not know (a newer API): kept as the API wrote it.
            Other(String),
        }

        impl $name {
            /// The text the API uses.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )*
                    $name::Other(text) => text,
                }
            }

            /// The value of a text; an unknown one is `Other`.
            pub fn from_api(text: &str) -> $name {
                match text {
                    $( $text => $name::$variant, )*
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Ok($name::from_api(&text))
            }
        }
    };
}

pub(crate) use api_enum;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    api_enum! {
        /// A test enum.
        pub enum Light {
            Red = "red",
            Green = "green",
        }
    }

    #[test]
    fn known_values_are_variants_and_unknown_ones_are_kept() {
        let lights: Vec<Light> = serde_json::from_str(r#"["red", "green", "blue"]"#).unwrap();
        assert_eq!(
            lights,
            [Light::Red, Light::Green, Light::Other("blue".into())]
        );
        assert_eq!(
            serde_json::to_string(&lights).unwrap(),
            r#"["red","green","blue"]"#
        );
        assert_eq!(Light::from_api("green").to_string(), "green");
    }
}
