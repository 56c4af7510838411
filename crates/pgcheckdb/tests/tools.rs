//! The DBA's tools on real clusters: `checksums enable` never blesses a damaged page (structure
//! checks and placement before stamping), `inspect` (refusals, name resolution, FROZEN, VM and
//! FSM pages, `--hex`, blocks past the end), `corrupt` (refusals, confirmation, options, seed,
//! JSON), and every command quiet on a closed stdout.

mod common;

use std::path::Path;

use pgcheckdb_pg::format::control::{ChecksumState, ControlFile};
use pgcheckdb_pg::ops::corrupt;
use pgcheckdb_testkit::loaded_cluster;
use pgcheckdb_testkit::run::{self, Run};
use pgcheckdb_testkit::{require_binaries, Cluster, BLCKSZ};

use common::bin;

/// A stopped cluster without data checksums loaded with `sql`, and the data-directory-relative
/// paths of `tables` (database `postgres`).
fn cluster(major: u32, sql: &str, tables: &[&str]) -> (Cluster, Vec<String>) {
    loaded_cluster(major, false, sql, tables)
}

fn pgcheckdb(args: &[&str]) -> Run {
    run::pgcheckdb(&bin(), args, None)
}

fn checksum_state(datadir: &Path) -> ChecksumState {
    ControlFile::read_from_datadir(datadir)
        .expect("pg_control readable")
        .checksum_state()
}

/// `lp_off` of line pointer 1 of a heap page.
fn first_tuple_offset(page: &[u8]) -> usize {
    let lp = u32::from_le_bytes([page[24], page[25], page[26], page[27]]);
    (lp & 0x7fff) as usize
}

fn stored_checksum(path: &Path, block: u64) -> u16 {
    let page = corrupt::read_block(path, block, BLCKSZ).expect("read");
    u16::from_le_bytes([page[8], page[9]])
}

// ---------------------------------------------------------------------------------------------
// checksums enable

/// Blocks of `accounts` damaged in ways the page header does not show.
const FLIPPED_LP: u64 = 1;
const WIDE_NATTS: u64 = 2;
const SWAPPED: (u64, u64) = (4, 7);

#[test]
fn enable_never_stamps_pages_that_fail_the_structure_checks_or_are_misplaced() {
    let (c, paths) = cluster(
        17,
        "CREATE TABLE accounts (id int, owner text, balance int);
         INSERT INTO accounts SELECT g, 'owner ' || g, g FROM generate_series(1, 2000) g;
         CREATE INDEX accounts_id ON accounts (id);",
        &["accounts"],
    );
    let datadir = c.datadir();
    let d = datadir.to_str().expect("utf-8");
    let file = datadir.join(&paths[0]);
    // A bit flip in line pointer 1's lp_off: it now points 16 kB further, past the page.
    let page = corrupt::read_block(&file, FLIPPED_LP, BLCKSZ).expect("read");
    let mut flipped = page.clone();
    flipped[25] ^= 0x40;
    corrupt::write_block(&file, FLIPPED_LP, &flipped).expect("write");
    // The first tuple of another page claims 127 attributes (the table has 3).
    let mut wide = corrupt::read_block(&file, WIDE_NATTS, BLCKSZ).expect("read");
    let t = first_tuple_offset(&wide);
    wide[t + 18] = 0x7f;
    corrupt::write_block(&file, WIDE_NATTS, &wide).expect("write");
    // Two pages written at each other's place.
    let (a, b) = SWAPPED;
    let pa = corrupt::read_block(&file, a, BLCKSZ).expect("read");
    let pb = corrupt::read_block(&file, b, BLCKSZ).expect("read");
    corrupt::write_block(&file, a, &pb).expect("write");
    corrupt::write_block(&file, b, &pa).expect("write");

    let enable = |extra: &[&str]| {
        let mut args = vec![
            "checksums",
            "enable",
            "-D",
            d,
            "--format",
            "json",
            "--no-progress",
            "-j",
            "2",
        ];
        args.extend(extra);
        pgcheckdb(&args)
    };
    let dry = enable(&["--dry-run"]);
    assert_eq!(dry.status, 2, "dry run must find the damage\n{dry}");
    let real = enable(&[]);
    assert_eq!(real.status, 2, "enable must refuse\n{real}");
    assert_eq!(real.summary()["outcome"], "refused_damaged", "{real}");
    assert_eq!(
        checksum_state(datadir),
        ChecksumState::Off,
        "pg_control must stay off"
    );
    assert!(
        !real.stderr.contains("standbys"),
        "no standby warning when nothing was switched\n{real}"
    );
    for key in [
        "blocks",
        "new_pages",
        "blocks_rewritten",
        "blocks_already_valid",
        "damaged_blocks",
        "warnings",
    ] {
        assert_eq!(
            dry.summary()[key],
            real.summary()[key],
            "dry run and real run disagree on {key}\n{dry}\n{real}"
        );
    }
    assert_eq!(real.summary()["damaged_blocks"], 4, "{real}");
    let damaged: std::collections::BTreeSet<u64> = real
        .findings
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            assert_eq!(f["file"], paths[0].as_str(), "{f}");
            assert_eq!(
                f["relation"]["name"], "public.accounts",
                "named by relation: {f}"
            );
            assert_eq!(f["database"]["name"], "postgres", "named by database: {f}");
            f["block"].as_u64().expect("block")
        })
        .collect();
    assert_eq!(
        damaged,
        [FLIPPED_LP, WIDE_NATTS, a, b].into_iter().collect(),
        "{real}"
    );
    assert!(
        real.findings
            .iter()
            .any(|f| f["kind"] == "misplaced_page" && f["block"] == a),
        "{real}"
    );
    // The damaged pages got no checksum; a sane one did.
    for blk in [FLIPPED_LP, WIDE_NATTS, a, b] {
        assert_eq!(stored_checksum(&file, blk), 0, "block {blk} was stamped");
    }
    assert_ne!(stored_checksum(&file, 0), 0, "block 0 was not stamped");

    // The escape hatch stamps what the header checks accept; the swap is still caught.
    let skip = enable(&["--dry-run", "--skip-structure-checks"]);
    assert_eq!(skip.summary()["damaged_blocks"], 2, "{skip}");

    // With --allow-damaged the switch is flipped and the standby warning is shown.
    let allowed = enable(&["--allow-damaged"]);
    assert_eq!(allowed.status, 2, "{allowed}");
    assert_eq!(allowed.summary()["outcome"], "enabled", "{allowed}");
    assert_eq!(checksum_state(datadir), ChecksumState::On);
    assert!(allowed.stderr.contains("standbys"), "{allowed}");
    for blk in [FLIPPED_LP, WIDE_NATTS, a, b] {
        assert_eq!(stored_checksum(&file, blk), 0, "block {blk} was stamped");
    }
}

// ---------------------------------------------------------------------------------------------
// inspect

/// `accounts` frozen by VACUUM FREEZE (visibility map and free space map written), and a table
/// in a second database.
const INSPECT_SQL: &str = "
CREATE TABLE accounts (id int, owner text);
INSERT INTO accounts SELECT g, 'owner ' || g FROM generate_series(1, 3000) g;
DELETE FROM accounts WHERE id % 10 = 0;
VACUUM FREEZE accounts;
CREATE TABLE one_block (id int);
INSERT INTO one_block VALUES (1);
CREATE DATABASE second;
";

fn inspect_cluster(major: u32) -> (Cluster, String, String) {
    let (c, paths) = cluster(major, INSPECT_SQL, &["accounts", "one_block"]);
    let mut c = c;
    c.start().expect("start");
    c.psql(
        "second",
        "CREATE TABLE other (id int); INSERT INTO other SELECT generate_series(1, 10);",
    )
    .expect("second");
    c.stop().expect("stop");
    let d = c.datadir().to_str().expect("utf-8").to_string();
    let (accounts, one_block) = (paths[0].clone(), paths[1].clone());
    let _ = one_block;
    (c, d, accounts)
}

// 16, and 19: the newest release's pages, maps and catalogs read the same way.
pgcheckdb_testkit::version_tests! {
    inspect_resolves_names_like_psql_and_decodes_every_fork;
    inspect_resolves_names_like_psql_and_decodes_every_fork_pg16(16),
    inspect_resolves_names_like_psql_and_decodes_every_fork_pg19(19),
}

fn inspect_resolves_names_like_psql_and_decodes_every_fork(major: u32) {
    let (mut c, d, accounts) = inspect_cluster(major);
    let inspect = |extra: &[&str]| {
        let mut args = vec!["inspect", "-D", d.as_str()];
        args.extend(extra);
        pgcheckdb(&args)
    };

    // Unquoted names fold to lower case; a quoted mixed-case name does not exist.
    let folded = inspect(&["--relation", "Accounts", "-d", "postgres", "--block", "0"]);
    assert_eq!(folded.status, 0, "{folded}");
    assert!(folded.stdout.contains("database postgres"), "{folded}");
    assert!(
        folded.stdout.contains("relation public.accounts"),
        "{folded}"
    );
    assert!(
        folded.stdout.contains(" FROZEN "),
        "frozen tuples say so\n{folded}"
    );
    let quoted = inspect(&["--relation", "\"Accounts\"", "--block", "0"]);
    assert_eq!(quoted.status, 1, "{quoted}");
    assert!(
        quoted.stderr.contains("no relation \"Accounts\""),
        "{quoted}"
    );
    let public = inspect(&["--relation", "PUBLIC.accounts", "--block", "0"]);
    assert_eq!(public.status, 0, "{public}");

    // -d: a missing database says so; another database resolves there.
    let missing = inspect(&["--relation", "accounts", "-d", "nosuchdb", "--block", "0"]);
    assert_eq!(missing.status, 1, "{missing}");
    assert!(
        missing.stderr.contains("no such database \"nosuchdb\""),
        "{missing}"
    );
    let other = inspect(&["--relation", "other", "-d", "second", "--block", "0"]);
    assert_eq!(other.status, 0, "{other}");
    assert!(other.stdout.contains("database second"), "{other}");
    let wrong_db = inspect(&["--relation", "other", "-d", "postgres", "--block", "0"]);
    assert_eq!(wrong_db.status, 1, "{wrong_db}");

    // The visibility map page: every heap block all-visible and all-frozen after VACUUM FREEZE.
    let heap_blocks = std::fs::metadata(c.datadir().join(&accounts))
        .expect("stat")
        .len()
        / BLCKSZ as u64;
    let vm = inspect(&[
        "--file", &accounts, "--fork", "vm", "--block", "0", "--format", "json",
    ]);
    assert_eq!(vm.status, 0, "{vm}");
    let page = vm.first_json();
    let map = &page["page"]["visibility_map"];
    assert_eq!(map["all_visible"], heap_blocks, "{vm}");
    assert_eq!(map["all_frozen"], heap_blocks, "{vm}");
    assert_eq!(page["database"], "postgres", "{vm}");
    let vm_text = inspect(&["--file", &accounts, "--fork", "vm", "--block", "0"]);
    assert!(
        vm_text.stdout.contains(&format!(
            "{heap_blocks} all-visible, {heap_blocks} all-frozen"
        )),
        "{vm_text}"
    );
    // The free space map: the deleted rows left free space on the leaf page (block 2).
    let fsm = inspect(&[
        "--file",
        &format!("{accounts}_fsm"),
        "--block",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(fsm.status, 0, "{fsm}");
    let page = fsm.first_json();
    let fsm_view = &page["page"]["free_space_map"];
    assert_eq!(fsm_view["nonzero_leaves"], heap_blocks, "{fsm}");
    assert!(
        fsm_view["root_category"].as_u64().expect("root") > 0,
        "{fsm}"
    );

    // --hex: text dump with offsets, JSON string of the whole page.
    let hex = inspect(&["--file", &accounts, "--block", "0", "--hex"]);
    assert!(hex.stdout.contains("\n0000  "), "{hex}");
    assert!(hex.stdout.contains("\n0010  "), "{hex}");
    assert!(hex.stdout.contains("|..H."), "the ASCII column\n{hex}");
    assert!(hex.stdout.trim_end().ends_with("2000"), "{hex}");
    let hex_json = inspect(&[
        "--file", &accounts, "--block", "0", "--hex", "--format", "json",
    ]);
    let page = hex_json.first_json();
    assert_eq!(
        page["hex"].as_str().expect("hex").len(),
        2 * BLCKSZ,
        "{hex_json}"
    );

    // A block past the end says so, naming the fork's size.
    let past = inspect(&["--relation", "accounts", "--block", "5000"]);
    assert_eq!(past.status, 1, "{past}");
    assert!(
        past.stderr.contains(&format!(
            "block 5000 is past the end: the main fork of relation public.accounts has {heap_blocks} block(s)"
        )),
        "{past}"
    );

    // A running cluster is refused, as verify refuses it.
    c.start().expect("start");
    let running = inspect(&["--file", &accounts, "--block", "0"]);
    c.stop().expect("stop");
    assert_eq!(running.status, 1, "{running}");
    assert!(running.stderr.contains("cannot inspect"), "{running}");
    assert!(running.stdout.is_empty(), "{running}");
}

// ---------------------------------------------------------------------------------------------
// corrupt

pgcheckdb_testkit::version_tests! {
    corrupt_needs_d_and_a_confirmation_and_honours_or_rejects_its_options;
    corrupt_needs_d_and_a_confirmation_and_honours_or_rejects_its_options_pg16(16),
    corrupt_needs_d_and_a_confirmation_and_honours_or_rejects_its_options_pg19(19),
}

fn corrupt_needs_d_and_a_confirmation_and_honours_or_rejects_its_options(major: u32) {
    let (c, d, accounts) = inspect_cluster(major);
    let file = c.datadir().join(&accounts);
    let one_block = c
        .datadir()
        .join(std::path::Path::new(&accounts).parent().expect("dir"));
    let _ = one_block;
    let corrupt = |extra: &[&str]| {
        let mut args = vec!["corrupt", "-D", d.as_str()];
        args.extend(extra);
        pgcheckdb(&args)
    };
    let before = std::fs::read(&file).expect("read");
    let unchanged = |what: &str| {
        assert!(
            std::fs::read(&file).expect("read") == before,
            "{what} changed the file"
        )
    };

    // No -D: $PGDATA is not a default.
    let no_d = run::pgcheckdb(
        &bin(),
        &[
            "corrupt", "--file", &accounts, "--block", "1", "--how", "zero", "--yes",
        ],
        None,
    );
    assert_eq!(no_d.status, 1, "{no_d}");
    let with_env = std::process::Command::new(bin())
        .args([
            "corrupt", "--file", &accounts, "--block", "1", "--how", "zero", "--yes",
        ])
        .env("PGDATA", &d)
        .output()
        .expect("run");
    assert_eq!(with_env.status.code(), Some(1), "$PGDATA must not be used");
    assert!(String::from_utf8_lossy(&with_env.stderr).contains("--pgdata"));
    unchanged("corrupt without -D");

    // No --yes and stdin not a terminal: refused (tests/trust_files.rs: also with "yes" piped
    // in); "no" typed at a terminal: refused; "yes" typed at a terminal: done.
    let unconfirmed = corrupt(&["--file", &accounts, "--block", "1", "--how", "zero"]);
    assert_eq!(unconfirmed.status, 1, "{unconfirmed}");
    assert!(
        unconfirmed
            .stderr
            .contains("stdin is not a terminal: pass --yes"),
        "{unconfirmed}"
    );
    unchanged("an unconfirmed corrupt");
    let args = [
        "corrupt", "-D", &d, "--file", &accounts, "--block", "1", "--how", "zero",
    ];
    let out = typed_at_a_terminal(&args, b"no\n");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not confirmed (answer \"no\")"),
        "{out:?}"
    );
    unchanged("corrupt answered no");
    let out = typed_at_a_terminal(&args, b"yes\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let zeroed = corrupt::read_block(&file, 1, BLCKSZ).expect("read");
    assert!(zeroed.iter().all(|&b| b == 0), "block 1 was not zeroed");

    // Options a kind does not use are rejected; the file is left alone.
    for (how, extra) in [
        ("zero", &["--offset", "100"][..]),
        ("header", &["--with", "3"][..]),
        ("flip-bit", &["--seed", "1"][..]),
        ("garbage", &["--offset", "512"][..]),
        ("swap", &["--offset", "512"][..]),
        ("tear", &["--offset", "1000"][..]),
        ("tear", &["--offset", "0"][..]),
    ] {
        let before = std::fs::read(&file).expect("read");
        let mut args = vec![
            "--file",
            accounts.as_str(),
            "--block",
            "2",
            "--how",
            how,
            "--yes",
        ];
        args.extend(extra);
        let r = corrupt(&args);
        assert_eq!(r.status, 1, "{how} {extra:?}\n{r}");
        assert!(
            std::fs::read(&file).expect("read") == before,
            "{how} {extra:?} wrote"
        );
    }

    // tear --offset is honoured exactly.
    let r = corrupt(&[
        "--file", &accounts, "--block", "2", "--how", "tear", "--offset", "1536", "--yes",
    ]);
    assert_eq!(r.status, 0, "{r}");
    let torn = corrupt::read_block(&file, 2, BLCKSZ).expect("read");
    assert!(torn[1536..].iter().all(|&b| b == 0), "{r}");
    assert!(
        torn[1024..1536].iter().any(|&b| b != 0),
        "zeroed before the offset\n{r}"
    );

    // garbage takes a seed: the same seed gives the same bytes on another block.
    for blk in ["3", "4"] {
        let r = corrupt(&[
            "--file", &accounts, "--block", blk, "--how", "garbage", "--seed", "42", "--yes",
        ]);
        assert_eq!(r.status, 0, "{r}");
        assert!(r.stdout.contains("seed 42"), "{r}");
    }
    assert_eq!(
        corrupt::read_block(&file, 3, BLCKSZ).expect("read"),
        corrupt::read_block(&file, 4, BLCKSZ).expect("read")
    );

    // swap on a one-block table, or with a block past the end, is refused.
    let single = corrupt(&[
        "--relation",
        "one_block",
        "--block",
        "0",
        "--how",
        "swap",
        "--yes",
    ]);
    assert_eq!(single.status, 1, "{single}");
    assert!(single.stderr.contains("swap needs two blocks"), "{single}");
    let far = corrupt(&[
        "--file", &accounts, "--block", "5", "--how", "swap", "--with", "900", "--yes",
    ]);
    assert_eq!(far.status, 1, "{far}");
    let past = corrupt(&[
        "--file", &accounts, "--block", "900", "--how", "zero", "--yes",
    ]);
    assert_eq!(past.status, 1, "{past}");
    assert!(past.stderr.contains("past the end"), "{past}");

    // --format json: a `corrupted` record and the closing summary.
    let json = corrupt(&[
        "--relation",
        "accounts",
        "--block",
        "5",
        "--how",
        "swap",
        "--with",
        "6",
        "--yes",
        "--format",
        "json",
    ]);
    assert_eq!(json.status, 0, "{json}");
    let first = json.first_json();
    assert_eq!(first["type"], "corrupted", "{json}");
    assert_eq!(first["how"], "swap");
    assert_eq!(first["block"], 5);
    assert_eq!(first["relation"], "public.accounts");
    assert_eq!(first["database"], "postgres");
    assert_eq!(json.summary()["exit_status"], 0, "{json}");
}

// ---------------------------------------------------------------------------------------------
// closed stdout

#[test]
fn a_closed_stdout_is_a_quiet_exit() {
    require_binaries(17);
    let mut child = std::process::Command::new(bin())
        .args(["demo"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn demo");
    {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("first line");
        assert!(!first.is_empty(), "demo printed nothing");
        // Dropping the reader closes the pipe, as `head -1` does.
    }
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// Runs pgcheckdb with `args` and its stdin on a new pseudo-terminal, on which `typed` is
/// typed: what a person at a terminal does.
fn typed_at_a_terminal(args: &[&str], typed: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt, grantpt, unlockpt and ptsname_r on the descriptor just opened; the
    // name buffer is ours and its length is passed.
    let (mut master, slave) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0, "grantpt");
        assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(fd, name.as_mut_ptr(), name.len()),
            0,
            "ptsname_r"
        );
        let name = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        (master, name)
    };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave)
        .expect("open the terminal");
    let child = std::process::Command::new(bin())
        .args(args)
        .env_remove("PGDATA")
        .stdin(slave)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    master.write_all(typed).expect("type");
    let out = child.wait_with_output().expect("wait");
    drop(master);
    out
}
