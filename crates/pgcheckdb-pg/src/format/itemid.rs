//! `ItemIdData`: the 4-byte line pointers after the page header (`lp_off`, `lp_flags`, `lp_len`).

use serde::Serialize;

use super::bytes::{le_u32, range};
use crate::format::page::{PageHeader, SIZE_OF_PAGE_HEADER_DATA};

/// Size of one line pointer.
pub const SIZE_OF_ITEM_ID: usize = 4;

/// `lp_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LpFlags {
    /// `LP_UNUSED`: free, `lp_len` should be 0.
    Unused,
    /// `LP_NORMAL`: points at a tuple.
    Normal,
    /// `LP_REDIRECT`: HOT redirect, `lp_off` is the target offset number.
    Redirect,
    /// `LP_DEAD`: dead, may keep storage.
    Dead,
}

/// One decoded line pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ItemId {
    /// 1-based offset number.
    pub offnum: u16,
    pub lp_off: u16,
    pub lp_flags: LpFlags,
    pub lp_len: u16,
}

impl ItemId {
    /// Decodes the raw 32-bit word (`lp_off:15, lp_flags:2, lp_len:15`).
    pub fn from_word(offnum: u16, w: u32) -> ItemId {
        let lp_flags = match (w >> 15) & 3 {
            0 => LpFlags::Unused,
            1 => LpFlags::Normal,
            2 => LpFlags::Redirect,
            _ => LpFlags::Dead,
        };
        ItemId {
            offnum,
            lp_off: (w & 0x7FFF) as u16,
            lp_flags,
            lp_len: (w >> 17) as u16,
        }
    }

    /// True if the pointer claims storage on the page.
    pub fn has_storage(&self) -> bool {
        matches!(self.lp_flags, LpFlags::Normal | LpFlags::Dead) && self.lp_len > 0
    }

    /// The bytes `lp_off..lp_off + lp_len` of `page` (the item), if inside it.
    #[inline]
    pub fn storage<'p>(&self, page: &'p [u8]) -> Option<&'p [u8]> {
        range(page, self.lp_off as usize, self.lp_len as usize)
    }
}

/// `PageGetMaxOffsetNumber`: how many line pointers `pd_lower` says there are (0 if it is below
/// the header).
pub fn max_offset_number(header: &PageHeader) -> usize {
    (header.pd_lower as usize).saturating_sub(SIZE_OF_PAGE_HEADER_DATA) / SIZE_OF_ITEM_ID
}

/// Decodes every line pointer the header announces that fits in the page.
pub fn line_pointers(page: &[u8], header: &PageHeader) -> Vec<ItemId> {
    let mut items = Vec::new();
    line_pointers_into(page, header, &mut items);
    items
}

/// The same into a reused vector (cleared first), for the per-page hot path.
pub fn line_pointers_into(page: &[u8], header: &PageHeader, items: &mut Vec<ItemId>) {
    items.clear();
    for i in 0..max_offset_number(header) {
        match le_u32(page, SIZE_OF_PAGE_HEADER_DATA + i * SIZE_OF_ITEM_ID) {
            Some(w) => items.push(ItemId::from_word(i as u16 + 1, w)),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_fields() {
        // lp_off 8152, normal, lp_len 40
        let w = 8152 | (1 << 15) | (40 << 17);
        let id = ItemId::from_word(1, w);
        assert_eq!(
            (id.lp_off, id.lp_flags, id.lp_len),
            (8152, LpFlags::Normal, 40)
        );
        assert!(id.has_storage());
        let r = ItemId::from_word(2, 5 | (2 << 15));
        assert_eq!((r.lp_off, r.lp_flags), (5, LpFlags::Redirect));
    }
}
