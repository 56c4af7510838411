//! Relation file names: `<relfilenode>[_<fork>][.<segno>]` and the temporary form
//! `t<backend>_<relfilenode>...`, parsed as strictly as the server's own parser.

use serde::Serialize;

/// `ForkNumber`: which fork of a relation a file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkNumber {
    Main,
    Fsm,
    Vm,
    Init,
}

impl ForkNumber {
    /// The fork's name as used in file names and output (`main`, `fsm`, `vm`, `init`).
    pub fn name(self) -> &'static str {
        match self {
            ForkNumber::Main => "main",
            ForkNumber::Fsm => "fsm",
            ForkNumber::Vm => "vm",
            ForkNumber::Init => "init",
        }
    }

    /// Parses a fork name; `main` is not used in file names but accepted here.
    pub fn from_name(name: &str) -> Option<ForkNumber> {
        match name {
            "main" => Some(ForkNumber::Main),
            "fsm" => Some(ForkNumber::Fsm),
            "vm" => Some(ForkNumber::Vm),
            "init" => Some(ForkNumber::Init),
            _ => None,
        }
    }
}

/// A parsed relation file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelFileName {
    pub relfilenode: u32,
    pub fork: ForkNumber,
    pub segno: u32,
    /// `Some(backend)` for a temporary relation's file (`t<backend>_...`).
    pub temp_backend: Option<u32>,
}

impl std::fmt::Display for RelFileName {
    /// The file name the server gives this file: `[t<backend>_]<relfilenode>[_<fork>][.<segno>]`,
    /// the exact inverse of [`parse_relation_file_name`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(backend) = self.temp_backend {
            write!(f, "t{backend}_")?;
        }
        write!(f, "{}", self.relfilenode)?;
        if self.fork != ForkNumber::Main {
            write!(f, "_{}", self.fork.name())?;
        }
        if self.segno != 0 {
            write!(f, ".{}", self.segno)?;
        }
        Ok(())
    }
}

/// Parses a decimal number with no sign and no leading zero, fitting in `u32`.
fn parse_oid(digits: &str) -> Option<u32> {
    let first = *digits.as_bytes().first()?;
    if !(b'1'..=b'9').contains(&first) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Parses `<relfilenode>[_<fork>][.<segno>]`.
fn parse_permanent(name: &str) -> Option<(u32, ForkNumber, u32)> {
    let (stem, segno) = match name.split_once('.') {
        Some((stem, seg)) => (stem, parse_oid(seg)?),
        None => (name, 0),
    };
    let (node, fork) = match stem.split_once('_') {
        Some((node, fork)) => (
            node,
            ForkNumber::from_name(fork).filter(|f| *f != ForkNumber::Main)?,
        ),
        None => (stem, ForkNumber::Main),
    };
    Some((parse_oid(node)?, fork, segno))
}

/// Parses a relation file name, permanent or temporary; `None` for anything else.
pub fn parse_relation_file_name(name: &str) -> Option<RelFileName> {
    if let Some(rest) = name.strip_prefix('t') {
        let (backend, tail) = rest.split_once('_')?;
        let backend = parse_oid(backend)?;
        let (relfilenode, fork, segno) = parse_permanent(tail)?;
        return Some(RelFileName {
            relfilenode,
            fork,
            segno,
            temp_backend: Some(backend),
        });
    }
    let (relfilenode, fork, segno) = parse_permanent(name)?;
    Some(RelFileName {
        relfilenode,
        fork,
        segno,
        temp_backend: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_names() {
        let r = parse_relation_file_name("16384").expect("main fork");
        assert_eq!(
            (r.relfilenode, r.fork, r.segno, r.temp_backend),
            (16384, ForkNumber::Main, 0, None)
        );
        let r = parse_relation_file_name("16384_vm.2").expect("vm segment");
        assert_eq!((r.fork, r.segno), (ForkNumber::Vm, 2));
        assert_eq!(
            parse_relation_file_name("16384_init").map(|r| r.fork),
            Some(ForkNumber::Init)
        );
    }

    #[test]
    fn temporary_names() {
        let r = parse_relation_file_name("t3_16384_fsm.1").expect("temp");
        assert_eq!(
            (r.temp_backend, r.relfilenode, r.fork, r.segno),
            (Some(3), 16384, ForkNumber::Fsm, 1)
        );
    }

    #[test]
    fn names_are_rebuilt_exactly() {
        for name in [
            "16384",
            "16384_vm.2",
            "16384_init",
            "t3_16384_fsm.1",
            "4294967295.1023",
        ] {
            let parsed = parse_relation_file_name(name).expect(name);
            assert_eq!(parsed.to_string(), name);
        }
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "0",
            "016384",
            "16384.0",
            "16384.",
            "16384_main",
            "16384_foo",
            "foo.bar",
            "16384.1.2",
            "99999999999",
            "pg_filenode.map",
            "PG_VERSION",
            "t_1",
            "16384_vm_fsm",
        ] {
            assert_eq!(parse_relation_file_name(bad), None, "{bad}");
        }
    }
}
