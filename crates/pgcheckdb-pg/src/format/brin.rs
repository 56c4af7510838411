//! BRIN pages: the page types kept in the last two bytes of the special space, and the limit
//! on `pagesPerRange`.

/// BRIN page types (`BRIN_PAGETYPE_META`, `BRIN_PAGETYPE_REVMAP`, `BRIN_PAGETYPE_REGULAR`).
pub mod page_type {
    pub const META: u16 = 0xF091;
    pub const REVMAP: u16 = 0xF092;
    pub const REGULAR: u16 = 0xF093;
}

/// `BRIN_MAX_PAGES_PER_RANGE`: the largest `pagesPerRange` of a BRIN index.
pub const BRIN_MAX_PAGES_PER_RANGE: u32 = 131_072;
