//! Enums stored as one byte: [`byte_enum!`] defines the enum with the byte of each variant
//! and its decoder `from_byte`, so that the two never drift apart.
//!
//! Two forms:
//!
//! * closed — a `#[repr(u8)]` enum whose discriminants are the bytes, and
//!   `from_byte(u8) -> Option<Self>` (`None` for a byte no variant has): the tags of
//!   pgcheckdb's own fact records;
//! * open — the last entry `_ => Other(u8)` keeps any other byte, and `from_byte(u8) -> Self`
//!   never fails: catalog codes such as `pg_class.relkind`, where a later PostgreSQL may add
//!   a value.

/// Defines a byte-backed enum and its `from_byte` (the module documentation gives the two
/// forms).
///
/// ```ignore
/// byte_enum! {
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Tag {
///         MapRun = 0,
///         HeapPage = 1,
///     }
/// }
/// assert_eq!(Tag::from_byte(1), Some(Tag::HeapPage));
/// ```
macro_rules! byte_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $byte:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $byte, )+
        }

        impl $name {
            /// The variant stored as `b`; `None` for a byte no variant has.
            #[inline]
            $vis fn from_byte(b: u8) -> Option<$name> {
                // Paths in patterns: one `match` on constants, never a binding.
                #[allow(non_upper_case_globals)]
                mod byte_of {
                    $( pub const $variant: u8 = super::$name::$variant as u8; )+
                }
                match b {
                    $( byte_of::$variant => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $byte:expr, )+
            _ => $other:ident(u8) $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// Any other byte.
            $other(u8),
        }

        impl $name {
            /// The variant stored as `b`; any other byte is kept in the catch-all variant.
            #[inline]
            $vis fn from_byte(b: u8) -> $name {
                // Paths in patterns: one `match` on constants, never a binding.
                #[allow(non_upper_case_globals)]
                mod byte_of {
                    $( pub const $variant: u8 = $byte; )+
                }
                match b {
                    $( byte_of::$variant => $name::$variant, )+
                    other => $name::$other(other),
                }
            }
        }
    };
}

pub(crate) use byte_enum;

#[cfg(test)]
mod tests {
    byte_enum! {
        /// Closed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Closed {
            /// A variant named like a prelude item.
            None = 0,
            Some = 3,
            Ten = 10,
        }
    }

    byte_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Open {
            Table = b'r',
            Index = b'i',
            _ => Other(u8),
        }
    }

    #[test]
    fn closed_enums_decode_their_bytes_and_nothing_else() {
        assert_eq!(Closed::from_byte(0), Some(Closed::None));
        assert_eq!(Closed::from_byte(3), Some(Closed::Some));
        assert_eq!(Closed::from_byte(10), Some(Closed::Ten));
        assert_eq!(Closed::Ten as u8, 10);
        for b in [1, 2, 4, 9, 11, 255] {
            assert_eq!(Closed::from_byte(b), None, "{b}");
        }
    }

    #[test]
    fn open_enums_keep_unknown_bytes() {
        assert_eq!(Open::from_byte(b'r'), Open::Table);
        assert_eq!(Open::from_byte(b'i'), Open::Index);
        assert_eq!(Open::from_byte(b'x'), Open::Other(b'x'));
    }
}
