//! `registry_enum!`: an enum whose variants are a registry (diagnose's rule ids, the analyzer's
//! stall kinds). Below the model that declares them and the registry of result kinds that lists
//! the model.

/// An enum whose variants are a registry: each variant with its doc comment (the JSON schema's
/// description, kept as [`Self::about`]) and its stable JSON name, in declaration order in
/// `ALL`. The JSON names are checked against serde's by each enum's tests.
macro_rules! registry_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $(#[serde($($serde:tt)*)])?
                $variant:ident = $json:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])?
                $variant,
            )*
        }

        impl $name {
            /// Every variant, in the registry's order.
            pub const ALL: [$name; [$(stringify!($variant)),*].len()] = [$($name::$variant),*];

            /// The stable identifier (the JSON word).
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $json,)*
                }
            }

            /// What it means: its doc comment (also the schema's description), one line.
            pub fn about(self) -> String {
                let doc: &'static [&'static str] = match self {
                    $($name::$variant => &[$($doc),*],)*
                };
                doc.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ")
            }
        }
    };
}
pub(crate) use registry_enum;
