#!/usr/bin/env python3
"""Benchmark of `pgcheckdb verify --level physical` against `pg_checksums --check` and `cat`.

Creates a throwaway cluster with data checksums once (>= 2 GB of relation files, reused on the
next run), stops it, then times in interleaved rounds:

  * pg_checksums --check -D DATA
  * cat <every relation file> > /dev/null                 (one process, the files pgcheckdb reads)
  * parallel cat: one cat per core over byte-balanced groups of the same files
  * pgcheckdb verify --level physical -j <cores> --format json
  * pgcheckdb verify --level physical -j 1 --format json  (unless --no-single)

with a warm page cache (after one discarded warm-up pass) and a cold one (every file evicted
with posix_fadvise(POSIX_FADV_DONTNEED) after `sync` before every timed command). Prints a
markdown report (medians, minima, MB/s, ratios, verdict against the targets of the physical
level) and writes it to --out.

This is a benchmark, not a test; stdlib only. Run as root or as any user that can read the
cluster; the cluster is created as the `postgres` user when run as root.
"""

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The targets of the physical level (the "done when").
TARGET_SPEEDUP_VS_PG_CHECKSUMS = 2.5
TARGET_WARM_RATIO_VS_CAT = 1.10
TARGET_COLD_RATIO_VS_PARALLEL_CAT = 1.05

# Relation file names as the server writes them: <relfilenode>[_<fork>][.<segno>].
RELATION_FILE = re.compile(r"^[1-9][0-9]*(_(fsm|vm|init))?(\.[1-9][0-9]*)?$")
NUMBERED_DIR = re.compile(r"^[1-9][0-9]*$")

# Bytes of relation files per generated row (heap + index + TOAST), measured on PostgreSQL 15.
BYTES_PER_ROW = 520

REPO = Path(__file__).resolve().parent.parent


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin", help="PostgreSQL bin directory")
    p.add_argument("--dir", default="/var/tmp/pgcheckdb-bench", help="work directory (cluster in DIR/data-<major>)")
    p.add_argument("--size-gb", type=float, default=2.3, help="relation bytes to generate, in GB (10^9); >= 2")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per cache state")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pgcheckdb -j and parallel cat width")
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"), help="pgcheckdb binary")
    p.add_argument("--modes", default="warm,cold", help="comma list of warm, cold")
    p.add_argument("--no-single", action="store_true", help="skip pgcheckdb -j 1")
    p.add_argument("--only", default="", help="comma list of command names to run (default all)")
    p.add_argument("--out", default=str(REPO / "target/bench-physical.md"), help="markdown results file")
    p.add_argument("--recreate", action="store_true", help="drop and recreate the cluster")
    return p.parse_args()


# ---------------------------------------------------------------- cluster creation


def as_postgres(cmd):
    """`cmd` run as the postgres user when we are root (initdb and postgres refuse root)."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--"] + cmd


def pg_major(pg_bin):
    out = subprocess.run([f"{pg_bin}/postgres", "--version"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"\) (\d+)", out).group(1))


def cluster_sql(rows):
    """One transaction that creates and fills the table, so wal_level=minimal skips its WAL."""
    return f"""
BEGIN;
CREATE TABLE bench_wide (
    id      bigint,
    k       integer,
    created timestamptz,
    a       text,
    b       text,
    doc     text
);
-- Out-of-line and uncompressed: every 40th row puts ~2.5 KB into the TOAST table.
ALTER TABLE bench_wide ALTER COLUMN doc SET STORAGE EXTERNAL;
INSERT INTO bench_wide
SELECT i, (i * 7919) % 1000003, now() - i * interval '1 second',
       repeat(md5(i::text), 6), repeat(md5((i + 1)::text), 6),
       CASE WHEN i % 40 = 0 THEN repeat(md5((-i)::text), 80) END
FROM generate_series(1::bigint, {rows}) AS i;
CREATE INDEX bench_wide_k ON bench_wide (k);
COMMIT;
"""


def create_cluster(args, data, sock):
    """initdb -k, fill with SQL, stop. Owned by postgres when run as root."""
    pg = args.pg_bin
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(work, "postgres", "postgres")
    if data.exists():
        shutil.rmtree(data)
    sock.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(sock, "postgres", "postgres")
    rows = int(args.size_gb * 1e9 / BYTES_PER_ROW)
    log(f"initdb -k {data}")
    subprocess.run(as_postgres([f"{pg}/initdb", "-k", "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data)]),
                   check=True, stdout=subprocess.DEVNULL)
    opts = (f"-c listen_addresses= -k {sock} -c wal_level=minimal -c max_wal_senders=0 -c fsync=off "
            f"-c synchronous_commit=off -c maintenance_work_mem=512MB -c max_wal_size=8GB -c shared_buffers=256MB")
    subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(data), "-o", opts, "-l", str(work / "postgres.log"), "-w", "start"]),
                   check=True, stdout=subprocess.DEVNULL)
    try:
        log(f"filling: {rows} rows (~{args.size_gb} GB), one transaction")
        t = time.perf_counter()
        subprocess.run(as_postgres([f"{pg}/psql", "-h", str(sock), "-U", "postgres", "-d", "postgres", "-X", "-q",
                                    "-v", "ON_ERROR_STOP=1", "-c", cluster_sql(rows)]), check=True)
        log(f"filled in {time.perf_counter() - t:.0f} s")
    finally:
        subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"]),
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["sync"], check=True)


def ensure_cluster(args):
    major = pg_major(args.pg_bin)
    data = Path(args.dir) / f"data-{major}"
    marker = Path(args.dir) / f"data-{major}.json"
    sock = Path(args.dir) / "sock"
    if args.recreate or not marker.exists():
        marker.unlink(missing_ok=True)
        create_cluster(args, data, sock)
        files = relation_files(data)
        total = sum(size for _, size in files)
        marker.write_text(json.dumps({"major": major, "bytes": total, "files": len(files), "created": time.ctime()}))
    else:
        log(f"reusing {data} (created {json.loads(marker.read_text())['created']}; --recreate to rebuild)")
    return major, data


# ---------------------------------------------------------------- the files pgcheckdb reads


def relation_dirs(data):
    """global/, base/<db>/ and pg_tblspc/<spc>/PG_*/<db>/, as pgcheckdb lists them."""
    dirs = [data / "global"]
    dirs += sorted(d for d in (data / "base").iterdir() if NUMBERED_DIR.match(d.name))
    tblspc = data / "pg_tblspc"
    if tblspc.is_dir():
        for spc in sorted(tblspc.iterdir()):
            for ver in sorted(spc.iterdir()):
                if ver.name.startswith("PG_"):
                    dirs += sorted(d for d in ver.iterdir() if NUMBERED_DIR.match(d.name))
    return dirs


def relation_files(data):
    """(path, size) of every relation file."""
    out = []
    for d in relation_dirs(data):
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if entry.is_file() and RELATION_FILE.match(entry.name):
                out.append((entry.path, entry.stat().st_size))
    return out


def balanced_groups(files, n):
    """Splits files into n groups of about equal bytes (largest first onto the lightest group)."""
    groups = [[0, []] for _ in range(n)]
    for path, size in sorted(files, key=lambda f: -f[1]):
        g = min(groups, key=lambda g: g[0])
        g[0] += size
        g[1].append(path)
    return [g for g in groups if g[1]]


# ---------------------------------------------------------------- page cache


def all_files(data):
    for root, _, names in os.walk(data):
        for n in names:
            yield os.path.join(root, n)


def evict(data):
    """Drops every file of the cluster from the page cache (sync first so pages are clean)."""
    os.sync()
    for path in all_files(data):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(files):
    """Fraction of the files' pages in the page cache (via util-linux fincore), or None."""
    if not shutil.which("fincore"):
        return None
    paths = [p for p, _ in files]
    resident = 0
    for i in range(0, len(paths), 500):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES"] + paths[i:i + 500],
                             capture_output=True, text=True).stdout
        resident += sum(int(x) for x in out.split())
    total = sum(s for _, s in files)
    return resident / total if total else 0.0


# ---------------------------------------------------------------- commands


class Bench:
    """A named command and its timings per cache state."""

    def __init__(self, name, argv=None, parallel=None):
        self.name = name
        self.argv = argv
        self.parallel = parallel  # list of argv run concurrently
        self.times = {"warm": [], "cold": []}

    def run(self):
        """Runs once; returns seconds. Fails loudly on a non-zero exit."""
        t = time.perf_counter()
        if self.parallel:
            procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in self.parallel]
            codes = [p.wait() for p in procs]
        else:
            codes = [subprocess.run(self.argv, stdout=subprocess.DEVNULL).returncode]
        elapsed = time.perf_counter() - t
        if any(codes):
            sys.exit(f"{self.name} failed with exit status {codes}")
        return elapsed


def make_benches(args, data, files):
    paths = [p for p, _ in files]
    pgc = [f"{args.pg_bin}/pg_checksums", "--check", "-D", str(data)]
    if os.geteuid() == 0 and pg_checksums_refuses_root(pgc):
        pgc = as_postgres(pgc)
    groups = balanced_groups(files, args.jobs)
    benches = [
        Bench("pg_checksums", pgc),
        Bench("cat", ["cat"] + paths),
        Bench(f"parallel cat ×{len(groups)}", parallel=[["cat"] + g[1] for g in groups]),
        Bench(f"pgcheckdb -j {args.jobs}", [args.pgcheckdb, "verify", "-D", str(data), "--level", "physical",
                                            "-j", str(args.jobs), "--format", "json", "--no-progress"]),
    ]
    if not args.no_single and args.jobs != 1:
        benches.append(Bench("pgcheckdb -j 1", [args.pgcheckdb, "verify", "-D", str(data), "--level", "physical",
                                                "-j", "1", "--format", "json", "--no-progress"]))
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        benches = [b for b in benches if b.name in wanted or b.name.split(" ")[0] in wanted]
    return benches


def pg_checksums_refuses_root(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    return r.returncode != 0 and "root" in r.stderr


def pgcheckdb_summary(args, data):
    out = subprocess.run([args.pgcheckdb, "verify", "-D", str(data), "--level", "physical", "--format", "json",
                          "--no-progress"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"pgcheckdb verify exit {out.returncode} on the bench cluster:\n{out.stdout[-2000:]}{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- measurement


def rounds(benches, mode, n, data, files):
    """n interleaved rounds; the order rotates each round so no command always runs first."""
    if mode == "warm":
        log("warm-up pass (discarded)")
        for b in benches:
            b.run()
    for r in range(n):
        order = benches[r % len(benches):] + benches[:r % len(benches)]
        for b in order:
            if mode == "cold":
                evict(data)
                if r == 0:
                    frac = resident_fraction(files)
                    if frac is not None and frac > 0.01:
                        log(f"warning: {frac:.1%} of the relation files still cached after eviction")
            b.times[mode].append(b.run())
        log(f"{mode} round {r + 1}/{n}: " + ", ".join(f"{b.name} {b.times[mode][-1]:.3f}s" for b in benches))


def load_average():
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def mode_table(benches, mode, total_bytes):
    """Markdown table of one cache state, with ratios against the baselines."""
    med = {b.name: statistics.median(b.times[mode]) for b in benches if b.times[mode]}
    if not med:
        return "", {}
    base_pgc = med.get("pg_checksums")
    base_cat = med.get("cat")
    base_pcat = next((v for k, v in med.items() if k.startswith("parallel cat")), None)
    lines = [
        f"| {mode} | median s | min s | max s | MB/s (median) | speed-up vs pg_checksums | time ÷ cat | time ÷ parallel cat |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in benches:
        t = b.times[mode]
        if not t:
            continue
        m = med[b.name]
        cells = [
            b.name, f"{m:.3f}", f"{min(t):.3f}", f"{max(t):.3f}", f"{total_bytes / m / 1e6:.0f}",
            f"{base_pgc / m:.2f}×" if base_pgc else "–",
            f"{m / base_cat:.3f}" if base_cat else "–",
            f"{m / base_pcat:.3f}" if base_pcat else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), med


def verdicts(args, warm, cold):
    """The issue's targets, checked against the medians."""
    ours = warm.get(f"pgcheckdb -j {args.jobs}") if warm else None
    out = []
    if warm and ours and "pg_checksums" in warm:
        s = warm["pg_checksums"] / ours
        out.append(f"- warm: pgcheckdb -j {args.jobs} is {s:.2f}× faster than pg_checksums --check "
                   f"(target ≥ {TARGET_SPEEDUP_VS_PG_CHECKSUMS}×): **{'met' if s >= TARGET_SPEEDUP_VS_PG_CHECKSUMS else 'NOT met'}**")
    if warm and ours and "cat" in warm:
        r = ours / warm["cat"]
        out.append(f"- warm: pgcheckdb -j {args.jobs} takes {r:.3f}× the time of cat "
                   f"(target ≤ {TARGET_WARM_RATIO_VS_CAT}): **{'met' if r <= TARGET_WARM_RATIO_VS_CAT else 'NOT met'}**")
    cold_ours = cold.get(f"pgcheckdb -j {args.jobs}") if cold else None
    pcat = next((v for k, v in cold.items() if k.startswith("parallel cat")), None) if cold else None
    if cold_ours and pcat:
        r = cold_ours / pcat
        out.append(f"- cold: pgcheckdb -j {args.jobs} takes {r:.3f}× the time of parallel cat "
                   f"(target ≤ {TARGET_COLD_RATIO_VS_PARALLEL_CAT}): "
                   f"**{'met' if r <= TARGET_COLD_RATIO_VS_PARALLEL_CAT else 'NOT met'}**")
    return "\n".join(out)


def main():
    args = parse_args()
    if args.size_gb < 2:
        log("warning: --size-gb below 2: the issue's targets are defined for a cluster of at least 2 GB")
    command_line = "python3 scripts/bench-physical.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    major, data = ensure_cluster(args)
    files = relation_files(data)
    total = sum(s for _, s in files)
    summary = pgcheckdb_summary(args, data)
    if summary["bytes"] != total:
        log(f"note: cat reads {total} bytes, pgcheckdb {summary['bytes']} (partial trailing blocks excluded)")
    log(f"{len(files)} relation files, {total / 1e9:.3f} GB; load {load_average()}")
    benches = make_benches(args, data, files)
    load_before = load_average()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        rounds(benches, mode, args.rounds, data, files)
    load_after = load_average()
    warm_table, warm = mode_table(benches, "warm", total) if "warm" in modes else ("", {})
    cold_table, cold = mode_table(benches, "cold", total) if "cold" in modes else ("", {})
    groups = balanced_groups(files, args.jobs)
    report = f"""## Physical verify benchmark, {time.strftime('%Y-%m-%d %H:%M %Z')}

Command: `{command_line}`

- machine: {os.cpu_count()} CPUs, {cpu_model()}, kernel {platform.release()}, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM
- cluster: PostgreSQL {major}, `{data}`, data checksums {summary['checksums']}, {len(files)} relation files,
  {total / 1e9:.3f} GB ({summary['blocks']} blocks, {summary['new_pages']} new pages)
- parallel cat: {len(groups)} groups of {', '.join(f'{g[0] / 1e9:.2f} GB' for g in groups)}
- {args.rounds} interleaved rounds per cache state (order rotated each round){'; warm after one discarded warm-up pass' if 'warm' in modes else ''}{'; cold: sync + posix_fadvise(DONTNEED) on every cluster file before each command' if 'cold' in modes else ''}
- load average (1/5/15 min) before: {load_before}, after: {load_after}
- MB/s = 10^6 bytes of relation files per second; ratios are of medians

{warm_table}

{cold_table}

{verdicts(args, warm, cold)}
"""
    print(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    log(f"written to {args.out}")


if __name__ == "__main__":
    main()
