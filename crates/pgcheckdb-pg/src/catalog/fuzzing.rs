//! Fuzzing entry point of the catalog reader: the visible-row scan of a catalog file image and
//! every row decoder of every supported version, on bytes that never came from a cluster.
//! Not part of the API; used by `fuzz/` and the seed-corpus test.

use foldhash::HashMap;

use super::attributes::{attribute_layout, Attribute};
use super::heapscan::for_each_visible_row;
use super::layouts::layouts_for;
use super::rows::{
    attribute_row, class_row, complete_columns, database_row, index_row, oid_name_row,
};
use super::xact::CommitLog;

/// Scans `data` (whole blocks of `blcksz`) as a catalog file and decodes every visible row as
/// each catalog pgcheckdb reads, for every major version; returns the number of visible rows.
pub fn decode_catalog_file(
    data: &[u8],
    blcksz: usize,
    max_align: usize,
    clog: &CommitLog,
) -> usize {
    let types: HashMap<u32, String> = [(23, "int4".to_string())].into_iter().collect();
    let mut rows = 0;
    let mut columns: Vec<(i16, Attribute)> = Vec::new();
    for_each_visible_row(data, blcksz, max_align, clog, |row| {
        rows += 1;
        let d = row.data;
        for major in crate::format::control::SUPPORTED_MAJORS {
            if let Some(l) = layouts_for(major) {
                std::hint::black_box(class_row(
                    d,
                    &l.pg_class,
                    super::heapscan::RowState::Visible,
                    &mut super::rows::RelNames::default(),
                ));
                std::hint::black_box(database_row(d, &l.pg_database));
            }
            if let Some((_, attnum, attr)) =
                attribute_layout(major).and_then(|l| attribute_row(d, &l, &types))
            {
                columns.push((attnum, attr));
            }
        }
        std::hint::black_box((oid_name_row(d), index_row(d)));
    });
    let relnatts = columns.len().min(i16::MAX as usize) as i16;
    std::hint::black_box(complete_columns(Some(columns), relnatts));
    rows
}
