//! Visibility-map pages: after the page header, two bits for each heap block of the relation.

/// `VISIBILITYMAP_ALL_VISIBLE`: every tuple of the heap block is visible to everyone.
pub const VM_ALL_VISIBLE: u8 = 0x01;
/// `VISIBILITYMAP_ALL_FROZEN`: every tuple of the heap block is frozen.
pub const VM_ALL_FROZEN: u8 = 0x02;
/// `HEAPBLOCKS_PER_BYTE`: two visibility-map bits per heap block.
pub const HEAPBLOCKS_PER_BYTE: usize = 4;
