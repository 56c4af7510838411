//! `pg_attribute`: the column layout of every relation (length, alignment, dropped), which the
//! attribute walk of heap tuples needs. Column offsets per major version are data.

/// The `pg_attribute` columns pgcheckdb reads, per version.
#[derive(Debug, Clone, Copy)]
pub struct PgAttributeLayout {
    pub attrelid: usize,
    pub attname: usize,
    pub atttypid: usize,
    pub attlen: usize,
    pub attnum: usize,
    pub attalign: usize,
    pub attisdropped: usize,
}

/// 14–15.
pub const PG_ATTRIBUTE_14: PgAttributeLayout = PgAttributeLayout {
    attrelid: 0,
    attname: 4,
    atttypid: 68,
    attlen: 76,
    attnum: 78,
    attalign: 93,
    attisdropped: 101,
};
/// 16–17: `attstattarget`, `attndims` and `attinhcount` shrank and moved.
pub const PG_ATTRIBUTE_16: PgAttributeLayout = PgAttributeLayout {
    attrelid: 0,
    attname: 4,
    atttypid: 68,
    attlen: 72,
    attnum: 74,
    attalign: 87,
    attisdropped: 95,
};
/// 18: `attcacheoff` removed.
pub const PG_ATTRIBUTE_18: PgAttributeLayout = PgAttributeLayout {
    attrelid: 0,
    attname: 4,
    atttypid: 68,
    attlen: 72,
    attnum: 74,
    attalign: 83,
    attisdropped: 91,
};

/// Layout for a major version.
pub fn attribute_layout(major: u32) -> Option<PgAttributeLayout> {
    match major {
        14 | 15 => Some(PG_ATTRIBUTE_14),
        16 | 17 => Some(PG_ATTRIBUTE_16),
        // 19's pg_attribute is 18's.
        18 | 19 => Some(PG_ATTRIBUTE_18),
        _ => None,
    }
}

/// One user column as the tuple walk needs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attribute {
    pub name: String,
    /// Type name from `pg_type` (`int4`, `text`, ...), when known.
    pub type_name: Option<String>,
    /// `attlen`: > 0 fixed, -1 varlena, -2 cstring.
    pub attlen: i16,
    /// Alignment in bytes from `attalign` (`c` 1, `s` 2, `i` 4, `d` 8).
    pub align: usize,
    pub dropped: bool,
}

impl Attribute {
    /// `name type` for messages (`name` alone when the type is not known or the column dropped).
    pub fn label(&self) -> String {
        match &self.type_name {
            Some(t) if !self.dropped => format!("{} {t}", self.name),
            _ => self.name.clone(),
        }
    }
}

/// Alignment in bytes for an `attalign` code.
pub fn align_of(code: u8) -> Option<usize> {
    match code {
        b'c' => Some(1),
        b's' => Some(2),
        b'i' => Some(4),
        b'd' => Some(8),
        _ => None,
    }
}
