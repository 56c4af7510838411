//! The order of a B-tree index's keys, offline: what "key A sorts before key B" means for one
//! index, from the operator class and collation of each key column and `pg_index.indoption`
//! (DESC, NULLS FIRST). The standard level uses it for the keys inside one page, the extended
//! level across siblings and between a parent's separators and its child's keys.
//!
//! Keys whose type, operator class or collation has no comparator here are never guessed: the
//! index is reported as not order-checked, with the reason.
//!
//! Parts: [`opclass`] maps an index's catalog rows to comparators, [`datum`] holds the
//! comparators ([`numeric`] the numeric format) over the values [`crate::format::datum`]
//! decodes and unpacks, [`collate`] the string collations, [`tuple`] decodes index tuples,
//! [`quick`] orders single integer-like keys without decoding.

pub mod collate;
pub mod datum;
pub mod numeric;
pub mod opclass;
pub mod plan;
pub mod quick;
pub mod tuple;

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use crate::catalog::{Catalog, RelationInfo};
use crate::format::bytes::MAXIMUM_ALIGNOF;
use datum::KeyType;
use quick::QuickKey;
use tuple::{HeapKey, KeyTuple, StoredAs};

/// `INDOPTION_DESC` and `INDOPTION_NULLS_FIRST` of `pg_index.indoption`.
pub const INDOPTION_DESC: i16 = 0x0001;
pub const INDOPTION_NULLS_FIRST: i16 = 0x0002;

/// One key column: its comparator, how it is stored, and its `indoption`.
#[derive(Debug, Clone)]
pub struct KeyColumn {
    pub name: String,
    pub key_type: KeyType,
    pub stored: StoredAs,
    pub desc: bool,
    pub nulls_first: bool,
}

/// How the keys of one B-tree index are ordered.
#[derive(Debug, Clone)]
pub struct IndexOrdering {
    key_columns: usize,
    unique: Option<Uniqueness>,
    columns: Vec<KeyColumn>,
    stored: Vec<StoredAs>,
    max_align: usize,
}

/// `indisunique` with `indnullsnotdistinct` (PostgreSQL 15+; false before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uniqueness {
    pub nulls_not_distinct: bool,
}

impl IndexOrdering {
    /// Number of key columns (`indnkeyatts`); INCLUDE columns are not keys and never compared.
    pub fn key_columns(&self) -> usize {
        self.key_columns
    }

    /// `Some` for a unique index.
    pub fn uniqueness(&self) -> Option<Uniqueness> {
        self.unique
    }

    /// The key columns with their comparators.
    pub fn columns(&self) -> &[KeyColumn] {
        &self.columns
    }

    /// Compares the keys of two index tuples given as whole items (the `IndexTupleData` header,
    /// null bitmap and data: the `lp_len` bytes at `lp_off` on the page). A pivot tuple whose
    /// key columns were truncated away sorts before every tuple that shares its remaining
    /// columns (the missing columns are "minus infinity", as nbtree compares them). `None` when
    /// a key cannot be decoded; a malformed tuple is reported by the page checks, not here.
    ///
    /// Equal keys are then ordered by heap TID, as in a version 4 ("heapkeyspace") index:
    /// `a`'s highest TID against `b`'s TID range (`Equal` when it falls inside a posting list
    /// of `b`). For an index of version 2 or 3 use [`IndexOrdering::compare_keys`].
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        self.compare_in(a, b, true)
    }

    /// [`IndexOrdering::compare`] without the heap TID: the order of a version 2 or 3 index,
    /// where equal keys may hold their heap TIDs in any order.
    pub fn compare_keys(&self, a: &[u8], b: &[u8]) -> Option<Ordering> {
        self.compare_in(a, b, false)
    }

    /// [`IndexOrdering::compare`] when `heapkeyspace`, else [`IndexOrdering::compare_keys`].
    pub fn compare_in(&self, a: &[u8], b: &[u8], heapkeyspace: bool) -> Option<Ordering> {
        let ta = tuple::decode(a, &self.stored, self.max_align)?;
        let tb = tuple::decode(b, &self.stored, self.max_align)?;
        self.compare_decoded(&ta, &tb, heapkeyspace)
    }

    /// Compares two decoded tuples (see [`IndexOrdering::compare`]).
    pub fn compare_decoded(
        &self,
        a: &KeyTuple<'_>,
        b: &KeyTuple<'_>,
        heapkeyspace: bool,
    ) -> Option<Ordering> {
        self.compare_decoded_lazy(a, b, || heapkeyspace)
    }

    /// [`IndexOrdering::compare_decoded`] that asks `heapkeyspace` only when the answer
    /// depends on it (the keys are equal in every key column).
    pub fn compare_decoded_lazy(
        &self,
        a: &KeyTuple<'_>,
        b: &KeyTuple<'_>,
        heapkeyspace: impl FnOnce() -> bool,
    ) -> Option<Ordering> {
        let (na, nb) = (a.natts(), b.natts());
        let shared = na.min(nb).min(self.columns.len());
        for (i, col) in self.columns.iter().enumerate().take(shared) {
            let ord = compare_column(col, a.key(i), b.key(i))?;
            if ord != Ordering::Equal {
                return Some(ord);
            }
        }
        // A truncated key sorts before the keys that continue it.
        match na.cmp(&nb) {
            Ordering::Equal => {}
            shorter_first => return Some(shorter_first),
        }
        if na < self.key_columns || !heapkeyspace() {
            return Some(Ordering::Equal);
        }
        Some(compare_heap(a.heap, b.heap))
    }

    /// An `(int4, text COLLATE "C")` index, for the fuzzing harness.
    #[doc(hidden)]
    pub fn for_fuzzing() -> IndexOrdering {
        let column = |name: &str, key_type, attlen, align| KeyColumn {
            name: name.into(),
            key_type,
            stored: StoredAs { attlen, align },
            desc: false,
            nulls_first: false,
        };
        let columns = vec![
            column("id", KeyType::Int4, 4, 4),
            column("name", KeyType::Text(collate::Collate::Bytes), -1, 4),
        ];
        IndexOrdering {
            key_columns: 2,
            unique: None,
            stored: columns.iter().map(|c| c.stored).collect(),
            columns,
            max_align: crate::format::bytes::MAXIMUM_ALIGNOF,
        }
    }

    /// Decodes the keys of one item (see [`IndexOrdering::compare`]).
    pub fn decode<'a>(&self, item: &'a [u8]) -> Option<KeyTuple<'a>> {
        tuple::decode(item, &self.stored, self.max_align)
    }

    /// The shortcut of [`quick`] when the index has a single key column it covers.
    pub fn quick_key(&self) -> Option<QuickKey> {
        match self.columns.as_slice() {
            [col] if self.key_columns == 1 => {
                QuickKey::for_column(&col.key_type, col.stored, col.desc, self.max_align)
            }
            _ => None,
        }
    }

    /// [`IndexOrdering::decode`] into a reused tuple; `None` if the item is malformed.
    pub fn decode_into<'a>(&self, item: &'a [u8], out: &mut KeyTuple<'a>) -> Option<()> {
        tuple::decode_into(item, &self.stored, self.max_align, out)
    }
}

/// One column of two tuples: NULLs where `indoption` puts them, DESC inverts the comparator.
fn compare_column(col: &KeyColumn, a: Option<&[u8]>, b: Option<&[u8]>) -> Option<Ordering> {
    let null_side = if col.nulls_first {
        Ordering::Less
    } else {
        Ordering::Greater
    };
    match (a, b) {
        (None, None) => Some(Ordering::Equal),
        (None, Some(_)) => Some(null_side),
        (Some(_), None) => Some(null_side.reverse()),
        (Some(a), Some(b)) => {
            let ord = col.key_type.compare(a, b)?;
            Some(if col.desc { ord.reverse() } else { ord })
        }
    }
}

/// Heap TIDs of tuples with equal keys: a truncated TID is minus infinity; otherwise `a`'s
/// highest TID against `b`'s range.
fn compare_heap(a: HeapKey, b: HeapKey) -> Ordering {
    match (a, b) {
        (HeapKey::Truncated, HeapKey::Truncated) => Ordering::Equal,
        (HeapKey::Truncated, _) => Ordering::Less,
        (_, HeapKey::Truncated) => Ordering::Greater,
        (HeapKey::Range(_, a_max), HeapKey::Range(b_min, b_max)) => {
            if a_max < b_min {
                Ordering::Less
            } else if a_max > b_max {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
    }
}

/// Why an index's keys are not order-checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOrderChecked {
    /// The comparators are not built yet.
    NotImplemented,
    /// No `pg_index` row (or an undecodable one) for the index.
    NoIndexRow,
    /// The index's own column descriptions (`pg_attribute`) are incomplete.
    NoColumns,
    /// The operator class of key column `column` is missing from `pg_opclass`.
    UnknownOpclass { column: String, opclass: u32 },
    /// No built-in comparator for this operator class (custom classes, other types).
    UnsupportedOpclass { column: String, opclass: String },
    /// The column's stored length differs from what the operator class's type has.
    StorageMismatch {
        column: String,
        opclass: String,
        attlen: i16,
    },
    /// The collation of key column `column` is missing from `pg_collation`, or the database's
    /// default collation could not be read.
    UnknownCollation { column: String, collation: u32 },
    /// An ICU collation (explicit or the database default).
    IcuCollation { column: String, collation: String },
    /// A nondeterministic collation.
    NondeterministicCollation { column: String, collation: String },
    /// A libc collation whose locale is not installed on this machine.
    LocaleMissing {
        column: String,
        collation: String,
        locale: String,
    },
    /// A collation provider pgcheckdb does not know.
    UnknownProvider { column: String, collation: String },
}

impl fmt::Display for NotOrderChecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use NotOrderChecked as N;
        match self {
            N::NotImplemented => write!(f, "key order checks are not available"),
            N::NoIndexRow => write!(f, "no readable pg_index row"),
            N::NoColumns => write!(f, "the index's pg_attribute rows are incomplete"),
            N::UnknownOpclass { column, opclass } => {
                write!(f, "column {column}: operator class {opclass} not in pg_opclass")
            }
            N::UnsupportedOpclass { column, opclass } => {
                write!(f, "column {column}: no comparator for operator class {opclass}")
            }
            N::StorageMismatch {
                column,
                opclass,
                attlen,
            } => write!(
                f,
                "column {column}: stored length {attlen} does not fit operator class {opclass}"
            ),
            N::UnknownCollation { column, collation } => {
                write!(f, "column {column}: collation {collation} not in pg_collation")
            }
            N::IcuCollation { column, collation } => {
                write!(f, "column {column}: ICU collation \"{collation}\"")
            }
            N::NondeterministicCollation { column, collation } => {
                write!(f, "column {column}: nondeterministic collation \"{collation}\"")
            }
            N::LocaleMissing {
                column,
                collation,
                locale,
            } => write!(
                f,
                "column {column}: collation \"{collation}\" needs locale \"{locale}\", not installed on this machine"
            ),
            N::UnknownProvider { column, collation } => {
                write!(f, "column {column}: collation \"{collation}\" has an unknown provider")
            }
        }
    }
}

impl NotOrderChecked {
    /// The locale this machine lacks, for the one warning per locale.
    pub fn missing_locale(&self) -> Option<&str> {
        match self {
            NotOrderChecked::LocaleMissing { locale, .. } => Some(locale),
            _ => None,
        }
    }
}

/// The key order of B-tree index `index` of database `db_oid`, when every key column has a
/// comparator here. Assumes a `MAXALIGN` of 8; see [`ordering_for_align`].
pub fn ordering_for(
    catalog: &Catalog,
    db_oid: u32,
    index: &RelationInfo,
) -> Result<Arc<IndexOrdering>, NotOrderChecked> {
    ordering_for_align(catalog, db_oid, index, MAXIMUM_ALIGNOF)
}

/// [`ordering_for`] for a cluster with `MAXALIGN` `max_align` (pg_control's `maxAlign`).
pub fn ordering_for_align(
    catalog: &Catalog,
    db_oid: u32,
    index: &RelationInfo,
    max_align: usize,
) -> Result<Arc<IndexOrdering>, NotOrderChecked> {
    let order = &catalog.order;
    let (db, meta) = order
        .index(db_oid, index.oid)
        .ok_or(NotOrderChecked::NoIndexRow)?;
    let attrs = index
        .attributes
        .as_ref()
        .ok_or(NotOrderChecked::NoColumns)?;
    let nkeys = usize::try_from(meta.indnkeyatts).map_err(|_| NotOrderChecked::NoIndexRow)?;
    if nkeys == 0
        || nkeys > attrs.len()
        || nkeys > tuple::INDEX_MAX_KEYS
        || meta.indclass.len() < nkeys
    {
        return Err(NotOrderChecked::NoIndexRow);
    }
    let mut columns = Vec::with_capacity(nkeys);
    for (i, attr) in attrs.iter().take(nkeys).enumerate() {
        let key_type = opclass::key_type(order, db, meta, i, attr)?;
        let option = meta.indoption.get(i).copied().unwrap_or(0);
        columns.push(KeyColumn {
            name: attr.name.clone(),
            key_type,
            stored: StoredAs {
                attlen: attr.attlen,
                align: attr.align,
            },
            desc: option & INDOPTION_DESC != 0,
            nulls_first: option & INDOPTION_NULLS_FIRST != 0,
        });
    }
    let stored = columns.iter().map(|c| c.stored).collect();
    Ok(Arc::new(IndexOrdering {
        key_columns: nkeys,
        unique: meta.indisunique.then_some(Uniqueness {
            nulls_not_distinct: meta.indnullsnotdistinct,
        }),
        columns,
        stored,
        max_align,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::{Equal, Greater, Less};

    const INT4: StoredAs = StoredAs {
        attlen: 4,
        align: 4,
    };

    fn ordering(desc: [bool; 2], nulls_first: [bool; 2]) -> IndexOrdering {
        let columns: Vec<KeyColumn> = (0..2)
            .map(|i| KeyColumn {
                name: format!("c{i}"),
                key_type: KeyType::Int4,
                stored: INT4,
                desc: desc[i],
                nulls_first: nulls_first[i],
            })
            .collect();
        IndexOrdering {
            key_columns: 2,
            unique: None,
            stored: vec![INT4; 2],
            columns,
            max_align: 8,
        }
    }

    /// A leaf tuple with heap TID (0, `offset`) and int4 keys (`None` = NULL).
    fn leaf(offset: u16, keys: &[Option<i32>]) -> Vec<u8> {
        tuple([0, 0, 0, 0], offset, 0, keys, None)
    }

    /// A pivot tuple keeping `keys.len()` attributes, with an optional heap TID.
    fn pivot(keys: &[Option<i32>], heap_tid: Option<(u32, u16)>) -> Vec<u8> {
        use crate::format::index_tuple::INDEX_ALT_TID_MASK;
        let flags = keys.len() as u16 | if heap_tid.is_some() { 0x1000 } else { 0 };
        tuple([0, 0, 0, 7], flags, INDEX_ALT_TID_MASK, keys, heap_tid)
    }

    fn tuple(
        block: [u8; 4],
        offset: u16,
        info_bits: u16,
        keys: &[Option<i32>],
        heap_tid: Option<(u32, u16)>,
    ) -> Vec<u8> {
        let has_nulls = keys.iter().any(Option::is_none);
        let mut t = block.to_vec();
        t.extend(offset.to_le_bytes());
        t.extend([0, 0]); // t_info, set below
        if has_nulls {
            let bits: u8 = keys
                .iter()
                .enumerate()
                .filter(|(_, k)| k.is_some())
                .map(|(i, _)| 1u8 << i)
                .sum();
            t.extend([bits, 0, 0, 0]);
        }
        t.resize(t.len().div_ceil(8) * 8, 0);
        for k in keys.iter().flatten() {
            t.extend(k.to_le_bytes());
        }
        if let Some((blk, off)) = heap_tid {
            t.extend(((blk >> 16) as u16).to_le_bytes());
            t.extend((blk as u16).to_le_bytes());
            t.extend(off.to_le_bytes());
        }
        let info = t.len() as u16 | info_bits | if has_nulls { 0x8000 } else { 0 };
        t[6..8].copy_from_slice(&info.to_le_bytes());
        t
    }

    #[test]
    fn columns_nulls_and_desc() {
        let asc = ordering([false, false], [false, false]);
        let (a, b) = (leaf(1, &[Some(1), Some(2)]), leaf(2, &[Some(1), Some(3)]));
        assert_eq!(asc.compare_keys(&a, &b), Some(Less));
        let null = leaf(3, &[Some(1), None]);
        assert_eq!(asc.compare_keys(&b, &null), Some(Less), "NULLS LAST");
        let nf = ordering([false, false], [false, true]);
        assert_eq!(nf.compare_keys(&b, &null), Some(Greater), "NULLS FIRST");
        let desc = ordering([true, false], [false, false]);
        let c = leaf(4, &[Some(0), Some(9)]);
        assert_eq!(desc.compare_keys(&a, &c), Some(Less), "DESC first column");
        assert_eq!(asc.compare_keys(&a, &c), Some(Greater));
    }

    #[test]
    fn heap_tid_only_in_heapkeyspace() {
        let asc = ordering([false, false], [false, false]);
        let (a, b) = (leaf(6, &[Some(1), Some(2)]), leaf(5, &[Some(1), Some(2)]));
        assert_eq!(asc.compare_keys(&a, &b), Some(Equal));
        assert_eq!(asc.compare(&a, &b), Some(Greater));
        assert_eq!(asc.compare(&b, &a), Some(Less));
    }

    #[test]
    fn index_version_asked_only_for_equal_keys() {
        let asc = ordering([false, false], [false, false]);
        let asked = std::cell::Cell::new(0);
        let ask = || {
            asked.set(asked.get() + 1);
            true
        };
        let (a, b) = (leaf(6, &[Some(1), Some(2)]), leaf(5, &[Some(1), Some(3)]));
        let (ta, tb) = (asc.decode(&a).unwrap(), asc.decode(&b).unwrap());
        assert_eq!(asc.compare_decoded_lazy(&ta, &tb, ask), Some(Less));
        let hk = pivot(&[Some(1)], None);
        let thk = asc.decode(&hk).unwrap();
        assert_eq!(asc.compare_decoded_lazy(&ta, &thk, ask), Some(Greater));
        assert_eq!(asked.get(), 0, "keys that differ never need the version");
        let same = leaf(5, &[Some(1), Some(2)]);
        let ts = asc.decode(&same).unwrap();
        assert_eq!(asc.compare_decoded_lazy(&ta, &ts, ask), Some(Greater));
        assert_eq!(asked.get(), 1);
        assert_eq!(asc.compare_decoded_lazy(&ta, &ts, || false), Some(Equal));
    }

    #[test]
    fn truncated_pivots_are_minus_infinity() {
        let asc = ordering([false, false], [false, false]);
        let hk = pivot(&[Some(5)], None);
        let item = leaf(1, &[Some(5), Some(i32::MIN)]);
        assert_eq!(asc.compare(&item, &hk), Some(Greater), "(5, x) > (5, -inf)");
        assert_eq!(asc.compare(&leaf(1, &[Some(4), Some(9)]), &hk), Some(Less));
        let with_tid = pivot(&[Some(5), Some(1)], Some((3, 4)));
        let same_keys = leaf(4, &[Some(5), Some(1)]);
        assert_eq!(
            asc.compare(&same_keys, &with_tid),
            Some(Less),
            "(0,4) < (3,4)"
        );
        let no_tid = pivot(&[Some(5), Some(1)], None);
        assert_eq!(
            asc.compare(&same_keys, &no_tid),
            Some(Greater),
            "TID minus infinity"
        );
        assert_eq!(asc.compare_keys(&same_keys, &no_tid), Some(Equal));
    }

    #[test]
    fn random_bytes_never_panic() {
        let text = KeyColumn {
            name: "t".into(),
            key_type: KeyType::Text(collate::Collate::Bytes),
            stored: StoredAs {
                attlen: -1,
                align: 4,
            },
            desc: false,
            nulls_first: false,
        };
        let mut ord = ordering([false, false], [false, false]);
        ord.columns.push(text.clone());
        ord.stored.push(text.stored);
        ord.key_columns = 3;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut a: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if a.len() >= 8 {
                // Mostly consistent sizes, so decoding gets past the header.
                let info = (a.len() as u16) | (next() as u16 & 0xE000);
                a[6..8].copy_from_slice(&info.to_le_bytes());
            }
            let b = leaf(1, &[Some(1), None]);
            let _ = ord.compare(&a, &b);
            let _ = ord.compare_keys(&b, &a);
            let _ = crate::format::datum::varlena(&a);
            let _ = KeyType::Numeric.compare(&a, &b);
        }
    }
}
