//! The size of a TOAST chunk tuple (`TOAST_MAX_CHUNK_SIZE`): derived from the block size and
//! `MAXALIGN`, recorded in `pg_control`, and used by the TOAST check to size each chunk; and
//! the varlena headers: the first byte that marks a value as a pointer to TOAST data, the
//! on-disk pointer (`varatt_external`), and the bits of an inline compressed value.

use super::heap::SIZEOF_HEAP_TUPLE_HEADER;
use super::itemid::SIZE_OF_ITEM_ID;
use crate::format::page::SIZE_OF_PAGE_HEADER_DATA;

/// `sizeof(Oid)` of `chunk_id`, `sizeof(int32)` of `chunk_seq`, and `VARHDRSZ` of `chunk_data`.
const CHUNK_ID_SIZE: usize = 4;
const CHUNK_SEQ_SIZE: usize = 4;
const VARHDRSZ: usize = 4;

/// Byte offsets in a TOAST chunk tuple's data: `chunk_id oid`, `chunk_seq int4`, then
/// `chunk_data bytea` (at 8, already aligned for its `int4` alignment).
pub mod chunk_offset {
    pub const CHUNK_ID: usize = 0;
    pub const CHUNK_SEQ: usize = CHUNK_ID + super::CHUNK_ID_SIZE;
    pub const CHUNK_DATA: usize = CHUNK_SEQ + super::CHUNK_SEQ_SIZE;
}
/// The 1-byte varlena header of an external (TOAST) pointer (`VARATT_IS_1B_E`): 0x01.
pub const VARTAG_1B_E: u8 = 0x01;
/// `VARTAG_ONDISK`: the only external varlena tag allowed on disk.
pub const VARTAG_ONDISK: u8 = 18;
/// Size of `varatt_external`, the payload of an on-disk TOAST pointer.
pub const VARATT_EXTERNAL_SIZE: usize = 16;
/// The low two bits of a 4-byte varlena header: `00` plain, `10` compressed inline
/// (`VARATT_IS_4B_C`).
pub const VARATT_4B_COMPRESSED: u32 = 0x02;
/// `VARLENA_EXTSIZE_MASK`: the low 30 bits of `va_tcinfo` (an inline compressed value's raw
/// size) and of `va_extinfo` (a TOAST pointer's stored size); the top two bits are the
/// compression method (14+).
pub const VARLENA_EXTSIZE_MASK: u32 = 0x3FFF_FFFF;
/// `TOAST_PGLZ_COMPRESSION_ID` and `TOAST_LZ4_COMPRESSION_ID`: the compression method in the
/// top two bits of `va_tcinfo`/`va_extinfo`.
pub const TOAST_PGLZ_COMPRESSION_ID: u32 = 0;
pub const TOAST_LZ4_COMPRESSION_ID: u32 = 1;
/// `EXTERN_TUPLES_PER_PAGE`: TOAST chunks are sized so that four fit on a page.
const EXTERN_TUPLES_PER_PAGE: usize = 4;

/// `TOAST_MAX_CHUNK_SIZE` for a block size and `MAXALIGN` (1996 for 8 kB pages, 8-byte
/// alignment): the largest chunk tuple that lets four fit on a page, less its header, its
/// `chunk_id` and `chunk_seq` and the data's 4-byte varlena header. `None` for a block size
/// too small to hold four tuples, or an alignment of 0.
pub fn toast_max_chunk_size(blcksz: usize, max_align: usize) -> Option<u32> {
    if max_align == 0 {
        return None;
    }
    let align = |n: usize| n.div_ceil(max_align) * max_align;
    let align_down = |n: usize| n / max_align * max_align;
    let usable = blcksz.checked_sub(align(
        SIZE_OF_PAGE_HEADER_DATA + EXTERN_TUPLES_PER_PAGE * SIZE_OF_ITEM_ID,
    ))?;
    let per_tuple = align_down(usable / EXTERN_TUPLES_PER_PAGE);
    let chunk = per_tuple
        .checked_sub(align(SIZEOF_HEAP_TUPLE_HEADER) + CHUNK_ID_SIZE + CHUNK_SEQ_SIZE + VARHDRSZ)?;
    u32::try_from(chunk).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_follows_block_size_and_alignment() {
        assert_eq!(toast_max_chunk_size(8192, 8), Some(1996));
        assert_eq!(toast_max_chunk_size(4096, 8), Some(972));
        assert_eq!(toast_max_chunk_size(32768, 8), Some(8140));
        assert_eq!(toast_max_chunk_size(8192, 0), None);
        assert_eq!(toast_max_chunk_size(16, 8), None);
        assert_eq!(
            (
                chunk_offset::CHUNK_ID,
                chunk_offset::CHUNK_SEQ,
                chunk_offset::CHUNK_DATA
            ),
            (0, 4, 8)
        );
    }
}
