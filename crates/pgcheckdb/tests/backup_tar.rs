//! `verify --backup` on tar-format `pg_basebackup` backups (uncompressed, gzip, and on 15+ lz4
//! and zstd) and a plain one, all taken in one `pgbench` write load window of a primary with a
//! tablespace: no error finding on the healthy copies, damage to a page older than the start
//! LSN found at its file and block inside the (recompressed) archive, manifest size and
//! checksum mismatches found (every `--manifest-checksums` algorithm), broken archives a tool
//! error. Cross-checked with `pg_verifybackup` (tar backups from 18 on, plain always).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pgcheckdb_testkit::asserts::{assert_clean, assert_problems, assert_status, finding, key};
use pgcheckdb_testkit::run::{self, Key, Run};
use pgcheckdb_testkit::{Cluster, ClusterOptions};

const BLCKSZ: usize = 8192;

/// One backup of the load window: its directory name, its `pg_basebackup` options and the
/// ending of its tar files (`None` for plain).
struct Format {
    name: &'static str,
    args: Vec<String>,
    ending: Option<&'static str>,
}

/// Whether the installation was built with `--with-<lib>` (PostgreSQL 15 may lack zstd).
fn built_with(c: &Cluster, lib: &str) -> bool {
    let out = c
        .run_program("pg_config", &["--configure"])
        .expect("pg_config --configure");
    String::from_utf8_lossy(&out.stdout).contains(&format!("--with-{lib}"))
}

fn formats(c: &Cluster, spc_dir: &Path, plain_spc: &Path) -> Vec<Format> {
    let major = c.major();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut out = vec![
        Format {
            name: "tar",
            args: s(&["-Ft"]),
            ending: Some(".tar"),
        },
        Format {
            name: "gz",
            args: s(&["-Ft", "-z", "--manifest-checksums=SHA224"]),
            ending: Some(".tar.gz"),
        },
    ];
    if major >= 15 {
        assert!(
            built_with(c, "lz4"),
            "PostgreSQL {major} is built without lz4"
        );
        out.push(Format {
            name: "lz4",
            args: s(&[
                "-Ft",
                "--compress=server-lz4",
                "--manifest-checksums=SHA384",
            ]),
            ending: Some(".tar.lz4"),
        });
    }
    // The zstd backup runs wherever pg_basebackup supports it; the test says when not.
    if major >= 15 && !built_with(c, "zstd") {
        eprintln!("PG {major}: this installation is built without zstd: no .tar.zst backup");
    } else if major >= 15 {
        out.push(Format {
            name: "zst",
            args: s(&[
                "-Ft",
                "--compress=client-zstd",
                "--manifest-checksums=SHA512",
            ]),
            ending: Some(".tar.zst"),
        });
    }
    // No WAL: the page-LSN rule, with the pd_lsn noted as each page went by.
    out.push(Format {
        name: "nowal",
        args: s(&["-Ft", "-X", "none"]),
        ending: Some(".tar"),
    });
    let mapping = format!("-T{}={}", spc_dir.display(), plain_spc.display());
    out.push(Format {
        name: "plain",
        args: vec!["-Fp".into(), "--manifest-checksums=SHA256".into(), mapping],
        ending: None,
    });
    out
}

/// Decompresses a tar file of the backup by its ending.
fn unpack(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).expect("read archive");
    let name = path.to_string_lossy();
    let mut out = Vec::new();
    if name.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .expect("gunzip");
    } else if name.ends_with(".lz4") {
        lz4_flex::frame::FrameDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .expect("lz4");
    } else if name.ends_with(".zst") {
        out = zstd::stream::decode_all(&raw[..]).expect("zstd");
    } else {
        out = raw;
    }
    out
}

/// Compresses a tar again, as its ending says.
fn pack(tar: &[u8], path: &Path) -> Vec<u8> {
    let name = path.to_string_lossy();
    if name.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(tar).expect("gzip");
        e.finish().expect("gzip")
    } else if name.ends_with(".lz4") {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(tar).expect("lz4");
        e.finish().expect("lz4")
    } else if name.ends_with(".zst") {
        zstd::stream::encode_all(tar, 1).expect("zstd")
    } else {
        tar.to_vec()
    }
}

/// Offsets of member `name`'s header and data in an uncompressed tar, and its size.
fn member(tar: &[u8], name: &str) -> (usize, usize, usize) {
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let path = String::from_utf8_lossy(&h[..end]).into_owned();
        let size_text = String::from_utf8_lossy(&h[124..136]);
        let size = usize::from_str_radix(size_text.trim_matches(|c| c == ' ' || c == '\0'), 8)
            .expect("size");
        if path.trim_start_matches("./") == name {
            return (at, at + 512, size);
        }
        at += 512 + size.next_multiple_of(512);
    }
    panic!("no member {name} in the archive");
}

/// Sets a member's size field to `size` and fixes the header checksum (the data blocks stay).
fn set_member_size(tar: &mut [u8], header: usize, size: usize) {
    let h = &mut tar[header..header + 512];
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// Copies backup `from` to `to`, applying `change` to the uncompressed tar of each archive
/// whose file name starts with a prefix in `edits`.
/// A change to an archive: the stem of its file name (`base`, a tablespace oid) and the edit.
type Edit<'a> = (&'a str, &'a dyn Fn(&mut Vec<u8>));

fn copy_with(from: &Path, to: &Path, edits: &[Edit<'_>]) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list backup") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        let mut bytes = std::fs::read(e.path()).expect("read");
        if let Some((_, change)) = edits
            .iter()
            .find(|(p, _)| name.starts_with(&format!("{p}.")))
        {
            let mut tar = unpack(&e.path());
            change(&mut tar);
            bytes = pack(&tar, &e.path());
        }
        std::fs::write(to.join(&name), bytes).expect("write");
    }
}

/// `START WAL LOCATION` of the archive's `backup_label`, as a number.
fn start_lsn(tar: &[u8]) -> u64 {
    let (_, data, size) = member(tar, "backup_label");
    let label = String::from_utf8_lossy(&tar[data..data + size]).into_owned();
    let text = label
        .lines()
        .find_map(|l| l.strip_prefix("START WAL LOCATION: "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("START WAL LOCATION in backup_label");
    let (hi, lo) = text.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).expect("LSN") << 32) | u64::from_str_radix(lo, 16).expect("LSN")
}

/// A block of member `name` whose `pd_lsn` is past the backup's start: the server wrote it
/// during the copy, so the backup's WAL has a block reference for it (and without WAL its
/// LSN says so). Panics when the load wrote no such block: the test would prove nothing.
fn replayed_block(tar: &[u8], name: &str) -> usize {
    let start = start_lsn(tar);
    let (_, data, size) = member(tar, name);
    (0..size / BLCKSZ)
        .find(|b| {
            let p = &tar[data + b * BLCKSZ..];
            let hi = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as u64;
            let lo = u32::from_le_bytes([p[4], p[5], p[6], p[7]]) as u64;
            (hi << 32 | lo) > start
        })
        .unwrap_or_else(|| panic!("no block of {name} written after the backup's start LSN"))
}

/// Flips one byte in the middle of block `block` of member `name`.
fn flip(tar: &mut [u8], name: &str, block: usize) {
    let (_, data, size) = member(tar, name);
    assert!(size >= (block + 1) * BLCKSZ, "{name} has no block {block}");
    tar[data + block * BLCKSZ + 4000] ^= 0x5A;
}

fn verify(c: &Cluster, dir: &Path, level: &str) -> Run {
    let d = dir.display().to_string();
    common::verify_json(&["--backup", &d], level, &[], c.user())
}

fn pg_verifybackup(c: &Cluster, dir: &Path, tar: bool) -> bool {
    let mut cmd = c.command("pg_verifybackup");
    if tar {
        // pg_waldump, which pg_verifybackup runs on the WAL, does not read tar files.
        cmd.arg("-n");
    }
    cmd.arg(dir);
    cmd.output().expect("run pg_verifybackup").status.success()
}

/// A primary with data checksums, pgbench tables (scale 5), a table pgbench never touches
/// (`cold`), one in a tablespace (`far`), frozen and checkpointed before the backups, an unlogged
/// one (`scratch`: a backup holds only its init fork) and two catalogs rewritten.
fn primary(major: u32) -> (Cluster, PathBuf) {
    let opts = ClusterOptions::new(major, true).setting("max_wal_size", "256MB");
    let mut c = Cluster::init_temp(&opts).expect("initdb");
    let spc = c.make_dir("spc").expect("tablespace dir");
    c.start().expect("start");
    c.pgbench("postgres", &["-i", "-q", "-s", "5"])
        .expect("pgbench -i");
    c.psql(
        "postgres",
        &format!("CREATE TABLESPACE far LOCATION '{}'", spc.display()),
    )
    .expect("tablespace");
    c.psql(
        "postgres",
        "CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 5000) g; \
         CREATE TABLE far TABLESPACE far AS SELECT g AS id FROM generate_series(1, 5000) g; \
         CREATE UNLOGGED TABLE scratch AS SELECT g AS id FROM generate_series(1, 1000) g; \
         VACUUM FREEZE cold; VACUUM FREEZE far; CHECKPOINT;",
    )
    .expect("tables");
    // Catalogs with file numbers past the initdb range, as after maintenance: a mapped one
    // (pg_class, named by the relation map) and one the catalogs name (pg_namespace). Naming
    // the findings needs both from the archive.
    for catalog in ["pg_class", "pg_namespace"] {
        c.psql("postgres", &format!("VACUUM FULL {catalog}"))
            .expect("VACUUM FULL");
    }
    (c, spc)
}

fn tar_backups(major: u32) {
    let (mut c, spc) = primary(major);
    if std::env::var_os("PGCHECKDB_KEEP_BACKUPS").is_some() {
        c.keep();
    }
    let cold = c.relation_filepath("postgres", "cold").expect("cold path");
    let far = c.relation_filepath("postgres", "far").expect("far path");
    let branches = c
        .relation_filepath("postgres", "pgbench_branches")
        .expect("branches path");
    let spc_oid = c
        .query_value(
            "postgres",
            "SELECT oid FROM pg_tablespace WHERE spcname = 'far'",
        )
        .expect("tablespace oid");
    let far_member = far
        .strip_prefix(&format!("pg_tblspc/{spc_oid}/"))
        .expect("far is in the tablespace")
        .to_string();
    let plain_spc = c.make_dir("plain_spc").expect("plain tablespace dir");
    let formats = formats(&c, &spc, &plain_spc);

    // One load window, every format: pgbench runs until the last backup is taken (stopped
    // then), however long the backups take on a busy machine.
    let mut bench = c
        .spawn_pgbench("postgres", &["-c", "4", "-j", "2", "-T", "3600", "-n"])
        .expect("pgbench");
    std::thread::sleep(Duration::from_secs(2));
    let mut dirs = Vec::new();
    for f in &formats {
        let dir = c.make_dir(f.name).expect("backup dir");
        let d = dir.display().to_string();
        let mut args = c.conn_args();
        args.extend(["-D", &d, "-c", "fast"].map(String::from));
        args.extend(f.args.iter().cloned());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        c.run_program("pg_basebackup", &refs)
            .unwrap_or_else(|e| panic!("pg_basebackup {}: {e}", f.name));
        dirs.push(dir);
    }
    let _ = bench.kill();
    let _ = bench.wait();
    c.stop().expect("stop");

    for (f, dir) in formats.iter().zip(&dirs) {
        if let Some(ending) = f.ending {
            assert!(dir.join(format!("base{ending}")).is_file(), "{}", f.name);
            assert!(
                dir.join(format!("{spc_oid}{ending}")).is_file(),
                "{}",
                f.name
            );
            // WAL is compressed on the client side only: server-lz4 leaves pg_wal.tar.
            let wal = std::fs::read_dir(dir)
                .expect("list")
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("pg_wal.tar"));
            assert_eq!(wal, f.name != "nowal", "{}: pg_wal.tar*", f.name);
        }
        let levels: &[&str] = if f.name == "tar" {
            &["physical", "standard"]
        } else {
            &["standard"]
        };
        for level in levels {
            let run = verify(&c, dir, level);
            let what = format!("PG {major} {} backup at {level}", f.name);
            assert_clean(&run, &what);
            let b = &run.summary()["backup"];
            let rule = if f.name == "nowal" {
                "page_lsn"
            } else {
                "wal_block_set"
            };
            assert_eq!(b["rule"], rule, "{what}\n{run}");
            assert_eq!(b["manifest"]["mismatched"], 0, "{what}\n{run}");
            assert_eq!(b["manifest"]["missing"], 0, "{what}\n{run}");
            assert!(
                b["manifest"]["checksums_verified"].as_u64().unwrap_or(0) > 100,
                "{what}\n{run}"
            );
            // pgbench_accounts alone (scale 5) has over 8000 blocks.
            assert!(
                run.summary()["blocks"].as_u64().unwrap_or(0) > 8000,
                "{what}\n{run}"
            );
            eprintln!(
                "{what}: {} blocks in {:.2} s, {} failing block(s) set aside, {} WAL blocks",
                run.summary()["blocks"],
                run.summary()["seconds"].as_f64().unwrap_or(0.0),
                b["replayed_blocks_unverified"],
                b["wal_blocks"]
            );
        }
        if f.name != "nowal" && (f.ending.is_none() || major >= 18) {
            assert!(
                pg_verifybackup(&c, dir, f.ending.is_some()),
                "pg_verifybackup on the {} backup",
                f.name
            );
        }
    }

    // Damage to pages older than the start LSN, written into each archive (recompressed): found
    // at file and block, and the manifest sees the member changed.
    let damaged_formats = formats
        .iter()
        .zip(&dirs)
        .filter(|(f, _)| f.ending.is_some() && f.name != "nowal");
    for (f, dir) in damaged_formats {
        let damaged = c.work_dir().join(format!("{}_damaged", f.name));
        let cold_edit = |tar: &mut Vec<u8>| flip(tar, &cold, 1);
        let far_edit = |tar: &mut Vec<u8>| flip(tar, &far_member, 0);
        let spc_prefix = spc_oid.clone();
        copy_with(
            dir,
            &damaged,
            &[("base", &cold_edit), (spc_prefix.as_str(), &far_edit)],
        );
        let run = verify(&c, &damaged, "standard");
        let what = format!("PG {major} damaged {} backup", f.name);
        assert_status(&run, 2, &what);
        let expected: BTreeSet<Key> = [
            key("checksum_mismatch", &cold, 1),
            Key::new("backup_manifest_mismatch", &cold, None),
            key("checksum_mismatch", &far, 0),
            Key::new("backup_manifest_mismatch", &far, None),
        ]
        .into_iter()
        .collect();
        assert_problems(&run, &expected, &what);
        let m = finding(&run, &Key::new("backup_manifest_mismatch", &cold, None));
        assert!(m["detail"]["calculated"].is_string(), "{what}\n{run}");
        let page = finding(&run, &key("checksum_mismatch", &cold, 1));
        assert_eq!(page["relation"]["name"], "public.cold", "{what}\n{run}");
        if major >= 18 {
            assert!(
                !pg_verifybackup(&c, &damaged, true),
                "pg_verifybackup: {what}"
            );
        }
    }

    // A torn page that replay rewrites (a block of pgbench_branches the load wrote after the
    // backup's start) is counted, not reported: by the backup's WAL, and without WAL by the
    // pd_lsn noted in the stream; the cold page is reported in both. The manifest is left out, as the
    // server computed its checksums over the bytes it sent.
    for name in ["tar", "nowal"] {
        let i = formats.iter().position(|f| f.name == name).expect("format");
        let torn = c.work_dir().join(format!("{name}_torn"));
        let edit = |tar: &mut Vec<u8>| {
            let block = replayed_block(tar, &branches);
            flip(tar, &branches, block);
            flip(tar, &cold, 1);
        };
        copy_with(&dirs[i], &torn, &[("base", &edit)]);
        std::fs::remove_file(torn.join("backup_manifest")).expect("rm manifest");
        let run = verify(&c, &torn, "standard");
        let what = format!("PG {major} {name} backup, torn replayed page");
        assert_status(&run, 2, &what);
        let expected: BTreeSet<Key> = [key("checksum_mismatch", &cold, 1)].into_iter().collect();
        assert_problems(&run, &expected, &what);
        // At least the flipped page (the copy may hold other torn pages replay rewrites).
        let unverified = run.summary()["backup"]["replayed_blocks_unverified"].as_u64();
        assert!(unverified >= Some(1), "{what}\n{run}");
    }

    // A member whose size no longer matches the manifest.
    let tar_dir = &dirs[0];
    let resized = c.work_dir().join("tar_resized");
    let shrink = |tar: &mut Vec<u8>| {
        let (header, _, size) = member(tar, "PG_VERSION");
        set_member_size(tar, header, size - 1);
    };
    copy_with(tar_dir, &resized, &[("base", &shrink)]);
    let run = verify(&c, &resized, "physical");
    assert_status(&run, 2, "resized member");
    let key = Key::new("backup_manifest_mismatch", "PG_VERSION", None);
    assert_problems(&run, &[key.clone()].into_iter().collect(), "resized member");
    assert_eq!(finding(&run, &key)["detail"]["expected_size"], 3);

    // The plain backup's SHA-256 checksums are verified too: a changed byte is a mismatch.
    let plain = dirs.last().expect("plain backup");
    let conf = plain.join("pg_hba.conf");
    let mut hba = std::fs::read(&conf).expect("pg_hba.conf");
    hba[0] ^= 0x20;
    std::fs::write(&conf, &hba).expect("write pg_hba.conf");
    let run = verify(&c, plain, "physical");
    assert_status(&run, 2, "plain, changed byte");
    let key = Key::new("backup_manifest_mismatch", "pg_hba.conf", None);
    assert_problems(
        &run,
        &[key.clone()].into_iter().collect(),
        "plain, changed byte",
    );
    assert_eq!(finding(&run, &key)["detail"]["algorithm"], "SHA256");

    // Broken archives are tool errors with one line: a truncated compressed stream, a bad
    // header.
    let gz = &dirs[1];
    let broken = c.work_dir().join("gz_truncated");
    copy_with(gz, &broken, &[]);
    let base = broken.join("base.tar.gz");
    let len = std::fs::metadata(&base).expect("size").len();
    std::fs::File::options()
        .write(true)
        .open(&base)
        .and_then(|f| f.set_len(len / 2))
        .expect("truncate");
    let run = verify(&c, &broken, "physical");
    assert_status(&run, 1, "truncated gzip");
    let lines = run.stderr_lines();
    assert!(
        lines.len() == 1 && lines[0].contains("could not read archive"),
        "{run}"
    );
    let bad_header = c.work_dir().join("tar_bad_header");
    let scribble = |tar: &mut Vec<u8>| {
        let (header, _, _) = member(tar, "PG_VERSION");
        tar[header] ^= 0x01;
    };
    copy_with(tar_dir, &bad_header, &[("base", &scribble)]);
    let run = verify(&c, &bad_header, "physical");
    assert_status(&run, 1, "bad tar header");
    assert!(
        run.stderr.contains("bad tar header") && run.stderr_lines().len() == 1,
        "{run}"
    );

    // The extended level is refused clearly; -D on a tar backup names --backup.
    let run = verify(&c, tar_dir, "extended");
    assert_status(&run, 1, "extended on tar");
    assert!(
        run.stderr.contains("extended level is not available"),
        "{run}"
    );
    let d = tar_dir.display().to_string();
    let run = run::pgcheckdb(&common::bin(), &["verify", "-D", &d], c.user());
    assert_status(&run, 1, "-D on tar");
    assert!(run.stderr.contains("--backup"), "{run}");

    let gz = formats
        .iter()
        .position(|f| f.name == "gz")
        .expect("gz format");
    forged_members_are_bounded_and_staged_privately(&c, &dirs[gz]);
}

/// A tar member header for a regular file `name` of `size` bytes (ustar, mode 0600).
fn member_header(name: &str, size: usize) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000600\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = b'0';
    h[257..265].copy_from_slice(b"ustar\x0000");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// Puts members of zeros in front of an uncompressed tar's first member.
fn prepend_zero_members(tar: &mut Vec<u8>, members: &[(&str, usize)]) {
    let mut front = Vec::new();
    for &(name, size) in members {
        front.extend_from_slice(&member_header(name, size));
        front.resize(front.len() + size.next_multiple_of(512), 0);
    }
    tar.splice(0..0, front);
}

/// `root` and every directory and file under it (not following links): whether it is a
/// directory, and its mode bits.
fn modes_under(root: &Path) -> Vec<(PathBuf, bool, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |m: &std::fs::Metadata| m.permissions().mode() & 0o7777;
    let mut out = Vec::new();
    if let Ok(meta) = std::fs::symlink_metadata(root) {
        out.push((root.to_path_buf(), meta.is_dir(), mode(&meta)));
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), meta.is_dir(), mode(&meta)));
        }
    }
    out
}

/// A gzip backup whose `base.tar` starts with members a forged archive could hold: 256 MiB
/// of zeros where nothing is needed (`junk/bomb.bin`), under `pg_xact/` with a name that is no
/// segment's, and a `pg_xact` segment of 2 MiB (32 pages of the largest block size are 1 MiB).
/// None of them is unpacked; the oversized segment is a finding, the others only what the
/// manifest says of unlisted files. While the run is inside its second pass (the staging
/// complete), it is stopped and its staging directory read: 0700 directories and 0600 files,
/// the catalogs (pg_authid among them) there, nothing of the forged members. The directory is
/// gone after the run.
fn forged_members_are_bounded_and_staged_privately(c: &Cluster, backup: &Path) {
    let forged = c.work_dir().join("gz_forged");
    let bombs: [(&str, usize); 3] = [
        ("junk/bomb.bin", 256 << 20),
        ("pg_xact/bomb", 64 << 20),
        ("pg_xact/0FFF", 2 << 20),
    ];
    let edit = |tar: &mut Vec<u8>| prepend_zero_members(tar, &bombs);
    copy_with(backup, &forged, &[("base", &edit)]);
    let tmp = c.work_dir().join("private_tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir tmp");
    let d = forged.display().to_string();
    let child = std::process::Command::new(common::bin())
        .args(["verify", "--backup", &d, "--format", "json"])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start pgcheckdb");
    let pid = child.id() as i32;
    let staged_control = || {
        std::fs::read_dir(&tmp)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("global/pg_control").exists())
    };
    let started = std::time::Instant::now();
    let staging = loop {
        if let Some(dir) = staged_control() {
            // SAFETY: stopping our own child, continued below.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            break dir;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the staging directory never held pg_control"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let modes = modes_under(&staging);
    // SAFETY: continuing our own child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let out = child.wait_with_output().expect("wait for pgcheckdb");
    let run = run::parse(out);

    assert!(
        !staging.exists(),
        "the staging directory is removed after the run"
    );
    assert!(
        modes.iter().any(|(p, _, _)| p.ends_with("global/1260")),
        "pg_authid is staged: {modes:?}"
    );
    for (path, is_dir, mode) in &modes {
        let rel = path.strip_prefix(&staging).expect("under staging");
        let want = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*mode, want, "{} is not private", rel.display());
        assert!(
            !rel.starts_with("junk")
                && !rel.starts_with("pg_xact/bomb")
                && !rel.starts_with("pg_xact/0FFF"),
            "a forged member was unpacked: {}",
            rel.display()
        );
    }
    assert_status(&run, 2, "forged gz backup");
    let expected: BTreeSet<Key> = [
        Key::new("backup_file_oversized", "pg_xact/0FFF", None),
        Key::new("backup_file_unexpected", "pg_xact/0FFF", None),
        Key::new("backup_file_unexpected", "pg_xact/bomb", None),
        Key::new("backup_file_unexpected", "junk/bomb.bin", None),
    ]
    .into_iter()
    .collect();
    assert_problems(&run, &expected, "forged gz backup");
    let f = finding(
        &run,
        &Key::new("backup_file_oversized", "pg_xact/0FFF", None),
    );
    assert_eq!(f["detail"]["size"], 2 << 20, "{run}");
}

pgcheckdb_testkit::version_tests! {
    tar_backups;
    tar_backups_pg14(14),
    tar_backups_pg15(15),
    tar_backups_pg16(16),
    tar_backups_pg17(17),
    tar_backups_pg18(18),
    tar_backups_pg19(19),
}
