//! The header every index tuple starts with (`IndexTupleData`): its `t_tid`, then `t_info`,
//! whose bits give the tuple's size and say whether a null bitmap follows.

use super::heap::SIZE_OF_ITEM_POINTER;

/// Byte offset of `t_info`, right after `t_tid`.
pub const T_INFO_OFFSET: usize = SIZE_OF_ITEM_POINTER;
/// `INDEX_SIZE_MASK`: the low 13 bits of `t_info`, the tuple's size in bytes.
pub const INDEX_SIZE_MASK: u16 = 0x1FFF;
/// `INDEX_ALT_TID_MASK`: in a B-tree, the tuple is a pivot or a posting list.
pub const INDEX_ALT_TID_MASK: u16 = 0x2000;
/// `INDEX_NULL_MASK`: an attribute null bitmap follows the header.
pub const INDEX_NULL_MASK: u16 = 0x8000;
/// `sizeof(IndexTupleData)`: `t_tid` and `t_info`, where the attributes (or the null bitmap)
/// begin; already `MAXALIGN`ed.
pub const SIZE_OF_INDEX_TUPLE: usize = 8;
/// `sizeof(IndexAttributeBitMapData)`: one bit for each of `INDEX_MAX_KEYS` (32) attributes.
pub const SIZE_OF_INDEX_ATTR_BITMAP: usize = 4;
