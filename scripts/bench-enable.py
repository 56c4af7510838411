#!/usr/bin/env python3
"""Benchmark of `pgcheckdb checksums enable` against `pg_checksums --enable`.

Creates once (reused on the next run) a PostgreSQL cluster WITHOUT data checksums holding
>= 2 GB of relation files (a wide table larger than one 1 GB segment, an index, TOAST), stops it
and keeps it as the pristine copy. Then, in interleaved rounds (the order of the two tools
alternates every round), for each tool:

  1. restore:  rm -rf WORK; cp -a PRISTINE WORK; sync          (same bytes on disk every run)
  2. cache:    warm = the copy stays in the page cache (clean, after sync);
               cold = every file of WORK evicted (posix_fadvise DONTNEED) after the sync
  3. time:     pg_checksums --enable -D WORK                   (syncs the data dir, then pg_control)
               pgcheckdb checksums enable -j N -D WORK         (fsyncs every file and dir, then pg_control)

Both tools end with their data durably on disk before pg_control is written (pg_checksums
without -N syncs the whole data directory), so the comparison is like for like. After the
first run of each tool, `pg_checksums --check` must pass on the result.

Prints a markdown report (medians, minima, ratio) and writes it to --out. Stdlib only. Run as
root (the cluster is created as the `postgres` user) or as the cluster owner.
"""

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_SPEEDUP = 2.5
REPO = Path(__file__).resolve().parent.parent


def load_physical_bench():
    """scripts/bench-physical.py, for the helpers both benchmarks share (same table, same eviction)."""
    spec = importlib.util.spec_from_file_location("bench_physical", REPO / "scripts/bench-physical.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bp = load_physical_bench()
as_postgres = bp.as_postgres
pg_major = bp.pg_major
evict = bp.evict
# Bytes of relation files per generated row (heap + index + TOAST), roughly, on PostgreSQL 15.
BYTES_PER_ROW = 520


def log(msg):
    print(f"[bench-enable] {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin", help="PostgreSQL bin directory")
    p.add_argument("--dir", default="/var/tmp/pgcheckdb-bench-enable", help="work directory")
    p.add_argument("--size-gb", type=float, default=2.3, help="relation bytes to generate, GB (10^9); >= 2")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per cache state")
    p.add_argument("--jobs", type=int, default=2, help="pgcheckdb -j")
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"), help="pgcheckdb binary")
    p.add_argument("--modes", default="warm,cold", help="comma list of warm, cold")
    p.add_argument("--out", default=str(REPO / "target/bench-enable.md"), help="markdown results file")
    p.add_argument("--recreate", action="store_true", help="drop and recreate the pristine cluster")
    return p.parse_args()


def create_pristine(args, pristine):
    pg = args.pg_bin
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    sock = work / "sock"
    sock.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(work, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
    if pristine.exists():
        shutil.rmtree(pristine)
    rows = int(args.size_gb * 1e9 / BYTES_PER_ROW)
    log(f"initdb (no checksums) {pristine}")
    subprocess.run(as_postgres([f"{pg}/initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(pristine)]),
                   check=True, stdout=subprocess.DEVNULL)
    opts = (f"-c listen_addresses= -k {sock} -c wal_level=minimal -c max_wal_senders=0 -c fsync=off "
            f"-c synchronous_commit=off -c maintenance_work_mem=512MB -c max_wal_size=8GB -c shared_buffers=256MB")
    subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(pristine), "-o", opts, "-l", str(work / "postgres.log"),
                                "-w", "start"]), check=True, stdout=subprocess.DEVNULL)
    try:
        log(f"filling {rows} rows (~{args.size_gb} GB)")
        t = time.perf_counter()
        subprocess.run(as_postgres([f"{pg}/psql", "-h", str(sock), "-U", "postgres", "-d", "postgres", "-X", "-q",
                                    "-v", "ON_ERROR_STOP=1", "-c", bp.cluster_sql(rows)]), check=True)
        # Hint bits and the visibility map, as a table in use would have them.
        subprocess.run(as_postgres([f"{pg}/psql", "-h", str(sock), "-U", "postgres", "-d", "postgres", "-X", "-q",
                                    "-c", "VACUUM bench_wide"]), check=True)
        log(f"filled in {time.perf_counter() - t:.0f} s")
    finally:
        subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(pristine), "-m", "fast", "-w", "stop"]),
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["sync"], check=True)


def du_bytes(path):
    total = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except FileNotFoundError:
                pass
    return total


def restore(pristine, work, mode):
    if work.exists():
        shutil.rmtree(work)
    subprocess.run(["cp", "-a", str(pristine), str(work)], check=True)
    subprocess.run(["sync"], check=True)
    if mode == "cold":
        evict(work)
    time.sleep(1)


def commands(args, work):
    return {
        "pg_checksums --enable": as_postgres([f"{args.pg_bin}/pg_checksums", "--enable", "-D", str(work)]),
        f"pgcheckdb checksums enable -j {args.jobs}": as_postgres(
            [args.pgcheckdb, "checksums", "enable", "-j", str(args.jobs), "--no-progress", "-q", "-D", str(work)]),
    }


def check_result(args, work, name):
    out = subprocess.run(as_postgres([f"{args.pg_bin}/pg_checksums", "--check", "-D", str(work)]),
                         capture_output=True, text=True)
    if out.returncode != 0 or "Bad checksums:  0" not in out.stdout:
        sys.exit(f"{name}: pg_checksums --check failed after the run:\n{out.stdout}{out.stderr}")
    log(f"{name}: pg_checksums --check passed")


def main():
    args = parse_args()
    if not Path(args.pgcheckdb).exists():
        sys.exit(f"{args.pgcheckdb} not found: cargo build --release -p pgcheckdb")
    major = pg_major(args.pg_bin)
    base = Path(args.dir)
    pristine = base / f"pristine-{major}"
    work = base / "work"
    marker = base / f"pristine-{major}.json"
    if args.recreate or not marker.exists():
        marker.unlink(missing_ok=True)
        create_pristine(args, pristine)
        marker.write_text(json.dumps({"major": major, "bytes": du_bytes(pristine), "created": time.ctime()}))
    info = json.loads(marker.read_text())
    log(f"pristine cluster {pristine}: {info['bytes'] / 1e9:.2f} GB, created {info['created']}")

    modes = [m for m in args.modes.split(",") if m]
    results = {m: {} for m in modes}
    checked = set()
    for mode in modes:
        for r in range(args.rounds):
            cmds = list(commands(args, work).items())
            if r % 2 == 1:
                cmds.reverse()
            for name, cmd in cmds:
                restore(pristine, work, mode)
                t = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True)
                elapsed = time.perf_counter() - t
                if out.returncode != 0:
                    sys.exit(f"{name} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
                results[mode].setdefault(name, []).append(elapsed)
                log(f"{mode} round {r + 1}: {name}: {elapsed:.2f} s")
                if name not in checked:
                    check_result(args, work, name)
                    checked.add(name)
    if work.exists():
        shutil.rmtree(work)

    names = list(commands(args, work).keys())
    lines = [
        f"Cluster: PostgreSQL {major} ({args.pg_bin}), {info['bytes'] / 1e9:.2f} GB data directory, no checksums; "
        f"{os.cpu_count()} cores, {platform.machine()}, kernel {platform.release()}.",
        f"{args.rounds} interleaved rounds per cache state; before every run the data directory is restored with "
        "`cp -a` from the pristine copy and `sync`ed (cold: then evicted from the page cache).",
        "",
        "| cache | command | median s | min s | GB/s (median) |",
        "|---|---|---|---|---|",
    ]
    ratios = {}
    for mode in modes:
        med = {n: statistics.median(results[mode][n]) for n in names}
        for n in names:
            lines.append(f"| {mode} | `{n}` | {med[n]:.2f} | {min(results[mode][n]):.2f} | "
                         f"{info['bytes'] / 1e9 / med[n]:.2f} |")
        ratios[mode] = med[names[0]] / med[names[1]]
    lines.append("")
    for mode in modes:
        verdict = "meets" if ratios[mode] >= TARGET_SPEEDUP else "misses"
        lines.append(f"- {mode}: pgcheckdb is **{ratios[mode]:.2f}x** faster than pg_checksums "
                     f"({verdict} the {TARGET_SPEEDUP}x target); all runs: "
                     + "; ".join(f"{n}: {', '.join(f'{x:.2f}' for x in results[mode][n])}" for n in names))
    report = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
