//! One tar file of a tar-format backup (`base.tar`, `<oid>.tar`, `pg_wal.tar`), compressed or
//! not, read as a stream of members: 512-byte ustar headers (name, size, type, header
//! checksum), each regular member's data padded to 512 bytes, two zero blocks at the end.
//! Nothing is unpacked: a member's data is handed out in pieces as it is decompressed.
//!
//! A header whose checksum is wrong, a size that is not a number, data that ends inside a
//! member or before the end-of-archive blocks, and a compressed stream the decoder rejects are
//! errors ([`ArchiveError`]): the archive cannot be read on, and the caller stops.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::format::bytes::until_nul;

/// The tar block size.
pub const TAR_BLOCK: usize = 512;

/// How a tar file of the backup is compressed, from its name's ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Lz4,
    Zstd,
}

impl Compression {
    /// The endings `pg_basebackup` writes, longest first.
    pub const ENDINGS: [(&'static str, Compression); 4] = [
        (".tar.gz", Compression::Gzip),
        (".tar.lz4", Compression::Lz4),
        (".tar.zst", Compression::Zstd),
        (".tar", Compression::None),
    ];

    /// The stem (`base`, `16384`, `pg_wal`) and compression of a file name, if it is a tar.
    pub fn of_name(name: &str) -> Option<(&str, Compression)> {
        Compression::ENDINGS
            .iter()
            .find_map(|(end, c)| name.strip_suffix(end).map(|stem| (stem, *c)))
    }
}

/// The member types the backup's reader tells apart (`typeflag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberType {
    /// `'0'` or NUL: a regular file, the only kind that is data.
    Regular,
    /// `'5'`.
    Directory,
    /// `'2'`.
    Symlink,
    /// `'L'`: GNU long name of the next member.
    GnuLongName,
    /// `'x'`: pax extended header of the next member.
    PaxHeader,
    /// Anything else (hard links, devices, pax global headers): not data, skipped.
    Other(u8),
}

impl MemberType {
    fn from_flag(flag: u8) -> MemberType {
        match flag {
            b'0' | 0 => MemberType::Regular,
            b'5' => MemberType::Directory,
            b'2' => MemberType::Symlink,
            b'L' => MemberType::GnuLongName,
            b'x' => MemberType::PaxHeader,
            other => MemberType::Other(other),
        }
    }
}

/// Why an archive cannot be read on.
#[derive(Debug, thiserror::Error)]
#[error("could not read archive \"{}\": {why}", archive.display())]
pub struct ArchiveError {
    pub archive: PathBuf,
    pub why: ArchiveProblem,
}

/// What went wrong in the archive ([`ArchiveError`] names the archive); `at` is a byte offset
/// in the (decompressed) tar stream.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveProblem {
    /// The file could not be opened.
    #[error("{0}")]
    Open(#[source] io::Error),
    #[error("zstd: {0}")]
    Zstd(#[source] io::Error),
    #[error("the archive ends at byte {at} without its end-of-archive blocks (truncated)")]
    NoEnd { at: u64 },
    #[error("bad tar header at byte {at}: {source}")]
    BadHeader {
        at: u64,
        #[source]
        source: HeaderError,
    },
    #[error("the archive ends inside a member at byte {at} (truncated)")]
    EndsInMember { at: u64 },
    #[error("the archive ends at byte {at} inside a 512-byte block (truncated)")]
    EndsInBlock { at: u64 },
    #[error("the compressed stream cannot be decoded near byte {at} of the tar: {source}")]
    Decode {
        at: u64,
        #[source]
        source: io::Error,
    },
    /// The reader stopped (or the visitor did).
    #[error(transparent)]
    Stopped(#[from] StopReading),
}

/// Why a ustar header block is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("the header checksum field is not a number")]
    ChecksumNotNumber,
    #[error("header checksum is {stored} but the header sums to {computed}")]
    Checksum { stored: u64, computed: u64 },
    #[error("the size field is not a number")]
    SizeNotNumber,
}

/// Why a [`MemberVisitor`] stops the reading.
#[derive(Debug, thiserror::Error)]
pub enum StopReading {
    /// A signal, or the run was cancelled.
    #[error("interrupted")]
    Interrupted,
    /// The first pass could not write a member where it stages them.
    #[error("could not write to the staging directory: {0}")]
    Staging(#[source] io::Error),
}

/// One member's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The path in the archive (no leading `./`, no trailing `/`).
    pub path: String,
    pub kind: MemberType,
    /// Bytes of data that follow the header.
    pub size: u64,
}

/// A tar file being read from its start.
pub struct Archive {
    path: PathBuf,
    stream: Box<dyn Read + Send>,
    /// Header blocks read (for the error message's position).
    offset: u64,
}

/// What a reader of the archive does with its regular members.
pub trait MemberVisitor {
    /// A regular member starts; `true` to be handed its data.
    fn start(&mut self, member: &Member) -> bool {
        let _ = member;
        true
    }
    /// The member's next bytes, in order.
    fn data(&mut self, bytes: &[u8]) -> Result<(), StopReading>;
    /// The member's data is complete.
    fn end(&mut self) -> Result<(), StopReading> {
        Ok(())
    }
    /// Whether to stop reading (asked before each member).
    fn cancelled(&self) -> bool {
        false
    }
}

/// Collects a long name's bytes (at most 64 KiB).
#[derive(Default)]
struct NameCollector(Vec<u8>);

impl MemberVisitor for NameCollector {
    fn data(&mut self, bytes: &[u8]) -> Result<(), StopReading> {
        let room = (64usize << 10).saturating_sub(self.0.len());
        self.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(())
    }
}

impl Archive {
    /// Opens `path` (a regular file) with the decoder of `compression`.
    pub fn open(path: &Path, compression: Compression) -> Result<Archive, ArchiveError> {
        let file: File =
            pgcheckdb_scan::open::open_regular(path, false).map_err(|e| ArchiveError {
                archive: path.to_path_buf(),
                why: ArchiveProblem::Open(e),
            })?;
        let raw = BufReader::with_capacity(1 << 20, file);
        let stream: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(raw),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
            Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(raw)),
            Compression::Zstd => {
                Box::new(zstd::stream::read::Decoder::with_buffer(raw).map_err(|e| {
                    ArchiveError {
                        archive: path.to_path_buf(),
                        why: ArchiveProblem::Zstd(e),
                    }
                })?)
            }
        };
        Ok(Archive {
            path: path.to_path_buf(),
            stream,
            offset: 0,
        })
    }

    fn error(&self, why: impl Into<ArchiveProblem>) -> ArchiveError {
        ArchiveError {
            archive: self.path.clone(),
            why: why.into(),
        }
    }

    /// Reads every member in order, handing each regular member (GNU long names and pax
    /// paths applied) to `visitor`.
    pub fn for_each(&mut self, visitor: &mut dyn MemberVisitor) -> Result<(), ArchiveError> {
        let mut long_name: Option<String> = None;
        let mut block = [0u8; TAR_BLOCK];
        loop {
            let at = self.offset;
            if visitor.cancelled() {
                return Err(self.error(StopReading::Interrupted));
            }
            if !self.fill(&mut block)? {
                return Err(self.error(ArchiveProblem::NoEnd { at }));
            }
            if block.iter().all(|&b| b == 0) {
                return Ok(());
            }
            let mut member = parse_header(&block)
                .map_err(|source| self.error(ArchiveProblem::BadHeader { at, source }))?;
            if let MemberType::GnuLongName | MemberType::PaxHeader = member.kind {
                let mut name = NameCollector::default();
                self.member_data(member.size, Some(&mut name))?;
                let name = if member.kind == MemberType::GnuLongName {
                    Some(clean_path(
                        String::from_utf8_lossy(&name.0).trim_end_matches('\0'),
                    ))
                } else {
                    pax_path(&name.0)
                };
                long_name = name.or(long_name);
                continue;
            }
            if let Some(name) = long_name.take() {
                member.path = clean_path(&name);
            }
            // Directories and links carry no data whatever their size field says.
            let size = match member.kind {
                MemberType::Directory | MemberType::Symlink | MemberType::Other(b'1') => 0,
                _ => member.size,
            };
            let wanted = member.kind == MemberType::Regular && visitor.start(&member);
            if wanted {
                self.member_data(size, Some(visitor))?;
                visitor.end().map_err(|why| self.error(why))?;
            } else {
                self.member_data(size, None)?;
            }
        }
    }

    /// Reads `size` bytes of member data and its padding, handing the data to `sink`.
    fn member_data(
        &mut self,
        size: u64,
        mut sink: Option<&mut dyn MemberVisitor>,
    ) -> Result<(), ArchiveError> {
        let padded = size.next_multiple_of(TAR_BLOCK as u64);
        let mut buf = vec![0u8; (256 << 10).min(padded.max(1) as usize)];
        let mut done = 0u64;
        while done < padded {
            let want = (buf.len() as u64).min(padded - done) as usize;
            if !self.fill(&mut buf[..want])? {
                return Err(self.error(ArchiveProblem::EndsInMember { at: self.offset }));
            }
            let data = (size.saturating_sub(done)).min(want as u64) as usize;
            if let (Some(s), true) = (sink.as_deref_mut(), data > 0) {
                s.data(&buf[..data]).map_err(|why| self.error(why))?;
            }
            done += want as u64;
        }
        Ok(())
    }

    /// Fills `buf` entirely; `false` at a clean end of the stream before any byte.
    fn fill(&mut self, buf: &mut [u8]) -> Result<bool, ArchiveError> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => {
                    return Err(self.error(ArchiveProblem::EndsInBlock {
                        at: self.offset + got as u64,
                    }))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(self.error(ArchiveProblem::Decode {
                        at: self.offset + got as u64,
                        source: e,
                    }))
                }
            }
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }
}

/// Parses a ustar header block; the checksum must match.
pub fn parse_header(block: &[u8; TAR_BLOCK]) -> Result<Member, HeaderError> {
    let stored = octal(&block[148..156]).ok_or(HeaderError::ChecksumNotNumber)?;
    let computed: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum();
    if stored != computed {
        return Err(HeaderError::Checksum { stored, computed });
    }
    let size = number(&block[124..136]).ok_or(HeaderError::SizeNotNumber)?;
    let name = field_str(&block[0..100]);
    let prefix = if &block[257..262] == b"ustar" {
        field_str(&block[345..500])
    } else {
        String::new()
    };
    let full = if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    };
    Ok(Member {
        path: clean_path(&full),
        kind: MemberType::from_flag(block[156]),
        size,
    })
}

fn field_str(f: &[u8]) -> String {
    String::from_utf8_lossy(until_nul(f)).into_owned()
}

fn clean_path(p: &str) -> String {
    p.trim_start_matches("./").trim_end_matches('/').to_string()
}

/// An octal field (spaces and NULs around the digits allowed).
fn octal(f: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(f).ok()?;
    let digits = s.trim_matches(|c: char| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// A numeric field: octal, or base-256 when its first byte has the high bit set (sizes of 8
/// GiB and more).
fn number(f: &[u8]) -> Option<u64> {
    if let Some((&first, rest)) = f.split_first().filter(|(&b, _)| b & 0x80 != 0) {
        let mut v: u64 = u64::from(first & 0x7F);
        for &b in rest {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    octal(f)
}

/// The `path` record of a pax extended header (`<len> path=<value>\n` records).
fn pax_path(data: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(data);
    text.lines()
        .filter_map(|line| line.split_once(' ').map(|(_, kv)| kv))
        .find_map(|kv| kv.strip_prefix("path=").map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header for `name` of `size` bytes and type `flag`, with its checksum.
    pub(crate) fn header(name: &str, size: u64, flag: u8) -> [u8; TAR_BLOCK] {
        let mut h = [0u8; TAR_BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000600");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = flag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn tar(members: &[(&str, &[u8], u8)], terminate: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data, flag) in members {
            out.extend_from_slice(&header(name, data.len() as u64, *flag));
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(TAR_BLOCK), 0);
        }
        if terminate {
            out.extend_from_slice(&[0u8; 2 * TAR_BLOCK]);
        }
        out
    }

    #[derive(Default)]
    struct All(Vec<(String, Vec<u8>)>);

    impl MemberVisitor for All {
        fn start(&mut self, m: &Member) -> bool {
            self.0.push((m.path.clone(), Vec::new()));
            true
        }
        fn data(&mut self, bytes: &[u8]) -> Result<(), StopReading> {
            if let Some(last) = self.0.last_mut() {
                last.1.extend_from_slice(bytes);
            }
            Ok(())
        }
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("base.tar");
        std::fs::write(&p, bytes).expect("write");
        let mut a = Archive::open(&p, Compression::None)?;
        let mut all = All::default();
        a.for_each(&mut all)?;
        Ok(all.0)
    }

    #[test]
    fn regular_members_only_with_their_data() {
        let big = vec![7u8; 1000];
        let bytes = tar(
            &[
                ("./base/1/", b"", b'5'),
                ("base/1/1259", &big, b'0'),
                ("pg_tblspc/16400", b"", b'2'),
                ("PG_VERSION", b"17\n", b'0'),
            ],
            true,
        );
        let got = read_all(&bytes).expect("read");
        assert_eq!(
            got,
            vec![
                ("base/1/1259".to_string(), big),
                ("PG_VERSION".to_string(), b"17\n".to_vec())
            ]
        );
    }

    #[test]
    fn bad_headers_and_truncation_are_errors() {
        let good = tar(&[("PG_VERSION", b"17\n", b'0')], true);
        let mut bad = good.clone();
        bad[10] ^= 1; // name changed: the checksum no longer matches
        let err = |bytes: &[u8]| read_all(bytes).unwrap_err().to_string();
        assert!(err(&bad).contains("header checksum"));
        assert!(err(&good[..TAR_BLOCK + 100]).contains("truncated"));
        assert!(err(&good[..2 * TAR_BLOCK]).contains("truncated"));
        assert!(err(&good[..TAR_BLOCK]).contains("truncated"));
        assert_eq!(
            number(&[0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0]),
            Some(2 << 32)
        );
    }

    #[test]
    fn names_and_endings() {
        assert_eq!(
            Compression::of_name("base.tar.gz"),
            Some(("base", Compression::Gzip))
        );
        assert_eq!(
            Compression::of_name("16384.tar"),
            Some(("16384", Compression::None))
        );
        assert_eq!(
            Compression::of_name("pg_wal.tar.zst"),
            Some(("pg_wal", Compression::Zstd))
        );
        assert_eq!(Compression::of_name("backup_manifest"), None);
        let long = "a/".repeat(80) + "f";
        let mut pax = format!(" path={long}\n");
        pax = format!("{}{pax}", pax.len() + 3);
        let bytes = tar(
            &[
                ("././@PaxHeader", pax.as_bytes(), b'x'),
                ("short", b"x", b'0'),
            ],
            true,
        );
        assert_eq!(read_all(&bytes).expect("read")[0].0, long);
    }

    #[test]
    fn messages_are_the_old_texts() {
        let at = |why: ArchiveProblem| {
            ArchiveError {
                archive: PathBuf::from("/b/base.tar"),
                why,
            }
            .to_string()
        };
        let io = || io::Error::other("boom");
        let cases = [
            (at(ArchiveProblem::Open(io())), "could not read archive \"/b/base.tar\": boom"),
            (at(ArchiveProblem::Zstd(io())), "could not read archive \"/b/base.tar\": zstd: boom"),
            (
                at(ArchiveProblem::NoEnd { at: 1024 }),
                "could not read archive \"/b/base.tar\": the archive ends at byte 1024 without its end-of-archive blocks (truncated)",
            ),
            (
                at(ArchiveProblem::BadHeader { at: 512, source: HeaderError::ChecksumNotNumber }),
                "could not read archive \"/b/base.tar\": bad tar header at byte 512: the header checksum field is not a number",
            ),
            (
                at(ArchiveProblem::BadHeader { at: 0, source: HeaderError::Checksum { stored: 5, computed: 6 } }),
                "could not read archive \"/b/base.tar\": bad tar header at byte 0: header checksum is 5 but the header sums to 6",
            ),
            (
                at(ArchiveProblem::BadHeader { at: 0, source: HeaderError::SizeNotNumber }),
                "could not read archive \"/b/base.tar\": bad tar header at byte 0: the size field is not a number",
            ),
            (
                at(ArchiveProblem::EndsInMember { at: 700 }),
                "could not read archive \"/b/base.tar\": the archive ends inside a member at byte 700 (truncated)",
            ),
            (
                at(ArchiveProblem::EndsInBlock { at: 600 }),
                "could not read archive \"/b/base.tar\": the archive ends at byte 600 inside a 512-byte block (truncated)",
            ),
            (
                at(ArchiveProblem::Decode { at: 9, source: io() }),
                "could not read archive \"/b/base.tar\": the compressed stream cannot be decoded near byte 9 of the tar: boom",
            ),
            (
                at(StopReading::Interrupted.into()),
                "could not read archive \"/b/base.tar\": interrupted",
            ),
            (
                at(StopReading::Staging(io()).into()),
                "could not read archive \"/b/base.tar\": could not write to the staging directory: boom",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
