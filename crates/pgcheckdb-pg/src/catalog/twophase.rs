//! `pg_twophase/`: the state files of prepared transactions. A prepared transaction stays "in
//! progress" in `pg_xact` until `COMMIT PREPARED` or `ROLLBACK PREPARED`; the catalog rows and
//! relation files it created exist on disk meanwhile. Only the header, the GID and the list of
//! subtransaction ids are read.

use pgcheckdb_scan::open::read_regular;
use std::fs;
use std::path::Path;

use crate::format::bytes::{align_up, le_u16, le_u32, range, until_nul, MAXIMUM_ALIGNOF};

/// Offsets in `TwoPhaseFileHeader` (`xl_xact_prepare`) that are the same in 14–18.
const XID_OFFSET: usize = 8;
const NSUBXACTS_OFFSET: usize = 28;

/// Where `gidlen` sits and how long the header is: 14 has no `ncommitstats`/`nabortstats`.
fn header_layout(major: u32) -> (usize, usize) {
    if major <= 14 {
        (46, 64)
    } else {
        (54, 72)
    }
}

/// One prepared transaction.
#[derive(Debug, Clone)]
pub struct PreparedXact {
    pub xid: u32,
    /// The transaction's GID (`PREPARE TRANSACTION 'gid'`), when the file could be read.
    pub gid: Option<String>,
    /// Its subtransactions: rows they inserted carry these ids as `t_xmin`.
    pub subxids: Vec<u32>,
}

impl PreparedXact {
    /// Whether `xid` is this transaction or one of its subtransactions.
    pub fn owns(&self, xid: u32) -> bool {
        self.xid == xid || self.subxids.contains(&xid)
    }
}

/// The largest two-phase state file: `MaxAllocSize`. Only regular files are read, without
/// blocking.
const MAX_STATE_FILE_LEN: u64 = (1 << 30) - 1;

/// The prepared transactions of a cluster; an unreadable file still yields its xid (from the
/// name), an absent directory none.
pub fn read_prepared(datadir: &Path, major: u32) -> Vec<PreparedXact> {
    let Ok(entries) = fs::read_dir(datadir.join("pg_twophase")) else {
        return Vec::new();
    };
    let mut out: Vec<PreparedXact> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let xid = xid_of_file_name(&name)?;
            let bytes = read_regular(&e.path(), MAX_STATE_FILE_LEN).unwrap_or_default();
            Some(parse_state_file(xid, &bytes, major))
        })
        .collect();
    out.sort_by_key(|p| p.xid);
    out
}

/// State files are named by the xid in 8 hex digits, or by epoch and xid in 16 (newer
/// releases).
fn xid_of_file_name(name: &str) -> Option<u32> {
    if !matches!(name.len(), 8 | 16) || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(&name[name.len() - 8..], 16).ok()
}

/// `MAXALIGN` on the platforms state files are read from.
fn maxalign(n: usize) -> usize {
    align_up(n, MAXIMUM_ALIGNOF)
}

/// Header, then the GID (`gidlen` bytes with its NUL), then the subtransaction ids, each part
/// padded to `MAXALIGN`. A file whose header names another xid gives only the xid.
fn parse_state_file(xid: u32, bytes: &[u8], major: u32) -> PreparedXact {
    let mut p = PreparedXact {
        xid,
        gid: None,
        subxids: Vec::new(),
    };
    if le_u32(bytes, XID_OFFSET) != Some(xid) {
        return p;
    }
    let (gidlen_offset, header_len) = header_layout(major);
    let Some(gidlen) = le_u16(bytes, gidlen_offset).map(usize::from) else {
        return p;
    };
    if let Some(gid) = range(bytes, header_len, gidlen) {
        p.gid = Some(String::from_utf8_lossy(until_nul(gid)).into_owned());
    }
    let nsub = le_u32(bytes, NSUBXACTS_OFFSET).unwrap_or(0) as usize;
    let start = header_len + maxalign(gidlen);
    p.subxids = (0..nsub)
        .map_while(|i| le_u32(bytes, start + 4 * i))
        .collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_file(major: u32, xid: u32, gid: &str, subxids: &[u32]) -> Vec<u8> {
        let (gidlen_off, header_len) = header_layout(major);
        let gidlen = gid.len() + 1;
        let mut b = vec![0u8; header_len + maxalign(gidlen) + 4 * subxids.len()];
        b[XID_OFFSET..XID_OFFSET + 4].copy_from_slice(&xid.to_le_bytes());
        b[NSUBXACTS_OFFSET..NSUBXACTS_OFFSET + 4]
            .copy_from_slice(&(subxids.len() as u32).to_le_bytes());
        b[gidlen_off..gidlen_off + 2].copy_from_slice(&(gidlen as u16).to_le_bytes());
        b[header_len..header_len + gid.len()].copy_from_slice(gid.as_bytes());
        let start = header_len + maxalign(gidlen);
        for (i, s) in subxids.iter().enumerate() {
            b[start + 4 * i..start + 4 * i + 4].copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn header_gid_and_subxids() {
        for major in [14, 15, 18] {
            let p = parse_state_file(740, &state_file(major, 740, "px-1", &[741, 742]), major);
            assert_eq!(p.gid.as_deref(), Some("px-1"));
            assert_eq!(p.subxids, vec![741, 742]);
            assert!(p.owns(742) && p.owns(740) && !p.owns(743));
        }
    }

    #[test]
    fn file_names_and_wrong_header() {
        assert_eq!(xid_of_file_name("000002E4"), Some(740));
        assert_eq!(xid_of_file_name("00000000000002E4"), Some(740));
        assert_eq!(xid_of_file_name("2E4"), None);
        assert_eq!(xid_of_file_name("0000ZZZZ"), None);
        let p = parse_state_file(741, &state_file(15, 740, "g", &[]), 15);
        assert!(p.gid.is_none() && p.subxids.is_empty());
    }
}
