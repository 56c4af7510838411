//! The normalised key of a B-tree entry, computed alike from a leaf tuple of the index and from
//! the heap tuple it points at, so that both sides give the same fingerprint: per column a NULL
//! flag, then the value's bytes — fixed-length values as stored, varlena values without their
//! header and decompressed (pglz, lz4: the heap and the index may hold one compressed and the
//! other not, or with 1-byte and 4-byte headers), `name` columns (64 bytes in the heap, a
//! C string in the index under `name_ops`) up to their first NUL.
//!
//! A heap value stored out of line in TOAST is not read here: such a tuple is counted as not
//! checked, never guessed.

use std::borrow::Cow;

use xxhash_rust::xxh3::xxh3_64;

use crate::catalog::attributes::Attribute;
use crate::check::standard::attribute_span;
use crate::format::bytes::{le_u64, le_u64_padded, until_nul};
use crate::format::control::NAMEDATALEN;
use crate::format::datum::varlena;
use crate::format::heap::{infomask2 as im2, HeapTupleHeader, HEAP_NATTS_MASK};
use crate::format::toast::VARTAG_1B_E;

/// How one index column's value is normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueForm {
    /// Fixed length (`attlen` > 0): the bytes as stored.
    Fixed,
    /// `attlen` -1: the payload, decompressed.
    Varlena,
    /// `attlen` -2 in both: the bytes before the NUL.
    CString,
    /// A `name` (64 bytes, NUL-padded) in the heap, a C string in the index.
    NameAsCString,
}

/// One column of an index entry: where its value comes from in the heap tuple.
#[derive(Debug, Clone, Copy)]
pub struct KeyColumn {
    /// 1-based attribute number in the table.
    pub heap_attnum: usize,
    pub form: ValueForm,
}

/// Why the key of a heap tuple could not be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unkeyable {
    /// A key value lives in TOAST.
    External,
    /// The tuple has fewer attributes than the key needs (a column added later with a
    /// default: its value is in `pg_attribute`, not in the tuple).
    MissingAttribute,
    /// The tuple or a value is malformed (the standard level reports it).
    Malformed,
}

/// The form of a column stored with `heap_attlen` in the table and `index_attlen` in the
/// index, `None` when the index stores another type than the table (not checked).
pub fn form_of(heap_attlen: i16, index_attlen: i16) -> Option<ValueForm> {
    match (heap_attlen, index_attlen) {
        (h, i) if h == i && h > 0 => Some(ValueForm::Fixed),
        (-1, -1) => Some(ValueForm::Varlena),
        (-2, -2) => Some(ValueForm::CString),
        (h, -2) if h == NAMEDATALEN as i16 => Some(ValueForm::NameAsCString),
        _ => None,
    }
}

/// The normalised bytes of a present value (see the module comment).
fn normalised(v: &[u8], form: ValueForm) -> Result<Cow<'_, [u8]>, Unkeyable> {
    Ok(match form {
        ValueForm::Fixed => Cow::Borrowed(v),
        ValueForm::Varlena => {
            if v.first() == Some(&VARTAG_1B_E) {
                return Err(Unkeyable::External);
            }
            varlena(v).ok_or(Unkeyable::Malformed)?
        }
        ValueForm::CString | ValueForm::NameAsCString => Cow::Borrowed(until_nul(v)),
    })
}

/// Multipliers of the hash (odd, with their bits spread): a NULL, a value (its length folded
/// in), the heap TID and the fingerprint's last step.
const MUL_NULL: u64 = 0xa076_1d64_78bd_642f;
const MUL_VALUE: u64 = 0xe703_7ed1_a0b4_28db;
const MUL_TID: u64 = 0x8ebc_6af0_9c88_c6e3;
const MUL_OUT: u64 = 0x5899_65cc_7537_4cc3;
/// Start of every key's hash.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Multiplies two words into 128 bits and folds the halves together: one multiplication that
/// spreads every input bit over the output (the step of the hash below).
#[inline]
pub fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    r as u64 ^ (r >> 64) as u64
}

/// The hash of a normalised key, column by column, without copying the values: a value of up
/// to 8 bytes is folded in as a word, one of up to 16 (a uuid, a short text) as its two
/// words folded together, a longer one as its xxh3 hash; its length picks the multiplier, so
/// that a value and its zero-padded longer form differ. One multiplication per column.
#[derive(Debug, Clone, Copy)]
pub struct KeyHasher {
    h: u64,
}

impl Default for KeyHasher {
    fn default() -> Self {
        KeyHasher { h: SEED }
    }
}

impl KeyHasher {
    /// Adds one column's value (`None` is NULL).
    #[inline]
    pub fn push(&mut self, value: Option<&[u8]>, form: ValueForm) -> Result<(), Unkeyable> {
        let Some(v) = value else {
            self.h = fold_mul(self.h, MUL_NULL);
            return Ok(());
        };
        let payload = normalised(v, form)?;
        let word = small_word(&payload)
            .or_else(|| two_words(&payload))
            .unwrap_or_else(|| xxh3_64(&payload));
        self.push_word(word, payload.len());
        Ok(())
    }

    /// Adds a value already read as its word (see [`KeyHasher::push`]) of `len` bytes.
    #[inline]
    pub fn push_word(&mut self, word: u64, len: usize) {
        self.h = fold_mul(self.h ^ word, MUL_VALUE ^ ((len as u64) << 1));
    }

    pub fn finish(self) -> u64 {
        self.h
    }
}

/// A value of up to 8 bytes as a little-endian word, zero-padded; `None` when longer
/// ([`le_u64_padded`]).
#[inline]
pub fn small_word(p: &[u8]) -> Option<u64> {
    le_u64_padded(p)
}

/// A value of 9 to 16 bytes as one word: its first and its last 8 bytes (overlapping when
/// shorter than 16; its length, folded in after, tells the layouts apart) folded together.
/// `None` for other lengths.
#[inline]
fn two_words(p: &[u8]) -> Option<u64> {
    if !(9..=16).contains(&p.len()) {
        return None;
    }
    let word = |at: usize| le_u64(p, at);
    Some(fold_mul(word(0)? ^ MUL_TID, word(p.len() - 8)? ^ MUL_OUT))
}

/// The fingerprint of one entry: its key's hash and its heap TID, two multiplications.
#[inline]
pub fn fingerprint(key_hash: u64, block: u32, offset: u16) -> u64 {
    let tid = (u64::from(block) << 16) | u64::from(offset);
    fold_mul(fold_mul(key_hash, tid ^ MUL_TID), MUL_OUT)
}

/// Where an attribute's stored bytes lie in its tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

impl Span {
    pub fn of<'t>(&self, tuple: &'t [u8]) -> Option<&'t [u8]> {
        tuple.get(self.start..self.start + self.len)
    }
}

/// Where the stored bytes of attributes `1..=upto` of a heap tuple lie (`None` for NULL), into
/// `out`, walking the tuple as the server deforms it with the heap checks' [`attribute_span`].
/// On an error `out` holds the attributes read before it (all the tuple has when the error is
/// [`Unkeyable::MissingAttribute`]).
pub fn deform_into(
    tuple: &[u8],
    h: &HeapTupleHeader,
    attrs: &[Attribute],
    upto: usize,
    out: &mut Vec<Option<Span>>,
) -> Result<(), Unkeyable> {
    out.clear();
    let natts = (h.t_infomask2 & HEAP_NATTS_MASK) as usize;
    let data = tuple.get(h.t_hoff as usize..).ok_or(Unkeyable::Malformed)?;
    let mut off = 0usize;
    for (i, a) in attrs.iter().take(upto.min(natts)).enumerate() {
        if h.att_is_null(tuple, i + 1) {
            out.push(None);
            continue;
        }
        let span = attribute_span(data, off, a).map_err(|_| Unkeyable::Malformed)?;
        out.push(Some(Span {
            start: h.t_hoff as usize + span.start,
            len: span.end - span.start,
        }));
        off = span.end;
    }
    if upto > natts {
        return Err(Unkeyable::MissingAttribute);
    }
    Ok(())
}

/// Whether the tuple is heap-only (reached through a HOT chain, never from an index).
pub fn heap_only(h: &HeapTupleHeader) -> bool {
    h.t_infomask2 & im2::HEAP_ONLY_TUPLE != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_fold_as_zero_padded_little_endian_words() {
        let padded = |p: &[u8]| {
            let mut w = [0u8; 8];
            w[..p.len()].copy_from_slice(p);
            u64::from_le_bytes(w)
        };
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        for n in 0..=8 {
            assert_eq!(
                small_word(&bytes[..n]),
                Some(padded(&bytes[..n])),
                "{n} bytes"
            );
        }
        assert_eq!(small_word(&bytes), None);
    }

    fn key(values: &[(Option<&[u8]>, ValueForm)]) -> u64 {
        let mut h = KeyHasher::default();
        for (v, f) in values {
            h.push(*v, *f).unwrap();
        }
        h.finish()
    }

    #[test]
    fn short_and_long_varlena_headers_normalise_alike() {
        let short = [(5u8 << 1) | 1, b'a', b'b', b'c', b'd'];
        let mut long = ((8u32) << 2).to_le_bytes().to_vec();
        long.extend_from_slice(b"abcd");
        assert_eq!(
            key(&[(Some(&short), ValueForm::Varlena)]),
            key(&[(Some(&long), ValueForm::Varlena)])
        );
        assert_ne!(
            key(&[(Some(&short), ValueForm::Varlena)]),
            key(&[(None, ValueForm::Varlena)])
        );
    }

    #[test]
    fn a_name_and_its_c_string_normalise_alike() {
        let mut name = b"pg_class".to_vec();
        name.resize(64, 0);
        assert_eq!(
            key(&[(Some(&name), ValueForm::NameAsCString)]),
            key(&[(Some(b"pg_class\0"), ValueForm::CString)])
        );
    }

    #[test]
    fn toast_pointers_are_not_keyed() {
        let pointer = [VARTAG_1B_E, 18, 0, 0];
        assert_eq!(
            KeyHasher::default().push(Some(&pointer), ValueForm::Varlena),
            Err(Unkeyable::External)
        );
    }

    #[test]
    fn forms_follow_the_stored_lengths() {
        assert_eq!(form_of(4, 4), Some(ValueForm::Fixed));
        assert_eq!(form_of(-1, -1), Some(ValueForm::Varlena));
        assert_eq!(form_of(64, -2), Some(ValueForm::NameAsCString));
        assert_eq!(form_of(8, 4), None);
        assert_ne!(fingerprint(1, 2, 3), fingerprint(1, 2, 4));
        // A short value, its zero-padded longer form and NULL all differ.
        assert_ne!(
            key(&[(Some(b"ab"), ValueForm::Fixed)]),
            key(&[(Some(b"ab\0"), ValueForm::Fixed)])
        );
        assert_ne!(
            key(&[(Some(&[0u8; 4]), ValueForm::Fixed)]),
            key(&[(None, ValueForm::Fixed)])
        );
    }

    #[test]
    fn values_of_up_to_16_bytes_differ_in_any_byte_and_length() {
        let base: Vec<u8> = (1..=16).collect();
        let mut seen = std::collections::HashSet::new();
        for len in 9..=16 {
            let v = &base[..len];
            assert!(
                seen.insert(key(&[(Some(v), ValueForm::Fixed)])),
                "{len} bytes"
            );
            for at in 0..len {
                let mut changed = v.to_vec();
                changed[at] ^= 0x40;
                assert!(
                    seen.insert(key(&[(Some(&changed), ValueForm::Fixed)])),
                    "{len} bytes, byte {at}"
                );
            }
            let mut padded = v.to_vec();
            padded.push(0);
            assert_ne!(
                key(&[(Some(v), ValueForm::Fixed)]),
                key(&[(Some(&padded), ValueForm::Fixed)])
            );
        }
    }
}
