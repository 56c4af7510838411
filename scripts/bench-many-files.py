#!/usr/bin/env python3
"""Benchmark of `pgcheckdb verify` on clusters of many small relations (issue: scale).

Builds throwaway clusters once (PostgreSQL 18 by default, `initdb -k`, reused on the next run)
holding N small tables `(id int PRIMARY KEY, v text)` with 5 rows each: four relation files per
table (heap, index, TOAST table, TOAST index). A table count written `Nv` also runs VACUUM, which
gives every table a free space map and a visibility map: six files per table. Then, warm cache, in
interleaved rounds with the order rotated from round to round, it times:

  * pg_checksums --check -D DATA
  * cat: `find DATA/global DATA/base -type f -print0 | xargs -0 cat > /dev/null`
  * pgcheckdb verify --level physical -j <jobs> --format json --no-progress
  * pgcheckdb verify --level standard -j <jobs> --format json --no-progress
  * pgcheckdb verify --level physical -j 1 (the same work on one core)

and the peak RSS of pg_checksums and pgcheckdb (GNU time's %M: the maximum resident set size).
Prints a markdown report (medians, minima, ratios, peak RSS) and writes it to --out; with
--rss-json it also writes peak RSS per cluster for the chart (`pgcheckdb-bench rss-chart`).

This is a benchmark, not a test; stdlib only. Run as root (clusters are created as `postgres`).
"""

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The targets for many small relations.
TARGET_SPEEDUP_VS_PG_CHECKSUMS = 2.0
TARGET_PHYSICAL_RSS_MB = 32.0
TARGET_STANDARD_OVER_PHYSICAL = 1.5


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", default="/var/cache/pgcheckdb/postgres/18/bin", help="PostgreSQL bin directory")
    p.add_argument("--dir", default="/var/tmp/pgcheckdb-many", help="work directory (clusters in DIR/tables-<N>)")
    p.add_argument("--tables", default="20000,16500v", help="comma list of table counts (`N` or `Nv`, see above), one cluster each")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per cluster")
    p.add_argument("--jobs", type=int, default=2, help="pgcheckdb -j")
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"), help="pgcheckdb binary")
    p.add_argument("--only", default="", help="comma list of command names to run (default all)")
    p.add_argument("--build-only", action="store_true", help="create the clusters and stop")
    p.add_argument("--out", default=str(REPO / "target/bench-many-files.md"), help="markdown results file")
    p.add_argument("--rss-json", default="", help="also write {files: peak RSS} here")
    return p.parse_args()


# ---------------------------------------------------------------- cluster creation


def load_physical_bench():
    """scripts/bench-physical.py, for the helper the benchmarks share (running as `postgres`)."""
    spec = importlib.util.spec_from_file_location("bench_physical", REPO / "scripts/bench-physical.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


as_postgres = load_physical_bench().as_postgres


def fill_sql(first, last):
    """Tables first..last in one transaction: a primary key, 5 rows each."""
    return f"""
DO $$
BEGIN
  FOR i IN {first}..{last} LOOP
    EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v text)', i);
    EXECUTE format('INSERT INTO t%s SELECT g, md5(g::text) FROM generate_series(1, 5) g', i);
  END LOOP;
END $$;
"""


def create_cluster(args, spec, data, sock):
    tables, vacuum = int(spec.rstrip("v")), spec.endswith("v")
    pg = args.pg_bin
    if data.exists():
        shutil.rmtree(data)
    log(f"initdb -k {data}")
    subprocess.run(as_postgres([f"{pg}/initdb", "-k", "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data)]),
                   check=True, stdout=subprocess.DEVNULL)
    opts = (f"-c listen_addresses= -k {sock} -c fsync=off -c synchronous_commit=off "
            f"-c max_locks_per_transaction=1024 -c shared_buffers=256MB -c autovacuum=off")
    logf = data.parent / f"{data.name}.log"
    subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(data), "-o", opts, "-l", str(logf), "-w", "start"]),
                   check=True, stdout=subprocess.DEVNULL)
    psql = as_postgres([f"{pg}/psql", "-h", str(sock), "-U", "postgres", "-d", "postgres", "-X", "-q",
                        "-v", "ON_ERROR_STOP=1"])
    try:
        t = time.perf_counter()
        batch = 500
        for first in range(1, tables + 1, batch):
            subprocess.run(psql + ["-c", fill_sql(first, min(first + batch - 1, tables))], check=True)
        if vacuum:
            # VACUUM gives every table its free space map and visibility map.
            subprocess.run(psql + ["-c", "VACUUM"], check=True)
        subprocess.run(psql + ["-c", "CHECKPOINT"], check=True)
        log(f"{tables} tables in {time.perf_counter() - t:.0f} s")
    finally:
        subprocess.run(as_postgres([f"{pg}/pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"]),
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["sync"], check=True)


def relation_file_stats(data):
    files = 0
    size = 0
    for top in ("global", "base"):
        for root, _, names in os.walk(data / top):
            for n in names:
                if n[:1].isdigit():
                    files += 1
                    size += os.stat(os.path.join(root, n)).st_size
    return files, size


def ensure_cluster(args, spec):
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    sock = work / "sock"
    sock.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(work, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
    data = work / f"tables-{spec}"
    marker = work / f"tables-{spec}.json"
    if not marker.exists():
        create_cluster(args, spec, data, sock)
        files, size = relation_file_stats(data)
        marker.write_text(json.dumps({"tables": spec, "files": files, "bytes": size, "created": time.ctime()}))
    info = json.loads(marker.read_text())
    log(f"{data}: {info['files']} relation files, {info['bytes'] / 1e6:.0f} MB")
    return data, info


# ---------------------------------------------------------------- timing


def run_timed(cmd, shell=False):
    """(seconds, peak RSS in MB of the command itself, or 0 for a shell pipeline).

    The peak RSS comes from GNU time (`%M`): a child forked from this Python process would
    inherit Python's RSS high-water mark across exec, so the command runs under
    /usr/bin/time, whose own footprint is tiny."""
    rss_file = None
    if not shell:
        rss_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-many-rss-{os.getpid()}"
        cmd = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file)] + cmd
    t = time.perf_counter()
    proc = subprocess.run(cmd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{cmd}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    rss_mb = 0.0
    if rss_file is not None:
        rss_mb = int(rss_file.read_text().split()[-1]) / 1024.0
        rss_file.unlink()
    return elapsed, rss_mb


def commands(args, data):
    pgc = args.pgcheckdb
    cmds = {
        "pg_checksums": ([f"{args.pg_bin}/pg_checksums", "--check", "-D", str(data)], False),
        "cat": (f"find {data}/global {data}/base -type f -print0 | xargs -0 cat > /dev/null", True),
        "physical": ([pgc, "verify", "-D", str(data), "--level", "physical", "-j", str(args.jobs),
                      "--format", "json", "--no-progress"], False),
        "standard": ([pgc, "verify", "-D", str(data), "--level", "standard", "-j", str(args.jobs),
                      "--format", "json", "--no-progress"], False),
        "physical -j 1": ([pgc, "verify", "-D", str(data), "--level", "physical", "-j", "1",
                           "--format", "json", "--no-progress"], False),
    }
    if args.only:
        keep = args.only.split(",")
        cmds = {k: v for k, v in cmds.items() if k in keep}
    return cmds


def plan_seconds(args, data):
    """Seconds pgcheckdb spends before the scan, from its -v phase lines: reading the catalogs
    (the listing runs meanwhile) and building the plan."""
    out = subprocess.run([args.pgcheckdb, "verify", "-D", str(data), "--level", "physical", "-j", str(args.jobs),
                          "--format", "json", "--no-progress", "-v"], capture_output=True, text=True, check=True)
    total = 0.0
    for line in out.stderr.splitlines():
        m = re.search(r"(read the catalogs offline|listed the data directory).*\(([0-9.]+) s\)$", line)
        if m:
            total += float(m.group(2))
    return total


def bench_cluster(args, data):
    cmds = commands(args, data)
    names = list(cmds)
    times = {n: [] for n in names}
    rss = {n: [] for n in names}
    for n in names:  # warm-up
        run_timed(cmds[n][0], cmds[n][1])
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t, m = run_timed(cmds[n][0], cmds[n][1])
            times[n].append(t)
            rss[n].append(m)
    return names, times, rss


def loadavg():
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def report(args, results):
    lines = [f"# many small relations: pgcheckdb verify -j {args.jobs} vs pg_checksums --check (warm)", ""]
    lines.append(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
                 f"{os.cpu_count()} CPUs, {args.rounds} interleaved rounds, binary {args.pgcheckdb}")
    lines.append("")
    for info, names, times, rss, load0, load1, est in results:
        med = {n: statistics.median(times[n]) for n in names}
        lines.append(f"## {info['tables']} tables: {info['files']} relation files, {info['bytes'] / 1e6:.0f} MB")
        lines.append("")
        lines.append(f"load average before {load0}, after {load1}; catalogs + listing + plan before the scan (`-v` phases): {est:.3f} s")
        lines.append("")
        lines.append("| command | median s | min s | max s | peak RSS MB (max) | vs pg_checksums |")
        lines.append("|---|---|---|---|---|---|")
        for n in names:
            base = med.get("pg_checksums")
            ratio = f"{base / med[n]:.2f}× faster" if base else ""
            m = "" if n == "cat" else f"{max(rss[n]):.1f}"
            lines.append(f"| {n} | {med[n]:.3f} | {min(times[n]):.3f} | {max(times[n]):.3f} | {m} | {ratio} |")
        lines.append("")
        if "physical" in med and "pg_checksums" in med:
            sp = med["pg_checksums"] / med["physical"]
            ok = sp >= TARGET_SPEEDUP_VS_PG_CHECKSUMS and max(rss["physical"]) <= TARGET_PHYSICAL_RSS_MB
            lines.append(f"- physical: {sp:.2f}× faster than pg_checksums (bar ≥ {TARGET_SPEEDUP_VS_PG_CHECKSUMS}×), "
                         f"peak RSS {max(rss['physical']):.1f} MB (bar ≤ {TARGET_PHYSICAL_RSS_MB:.0f} MB): "
                         f"{'met' if ok else 'MISSED'}")
        if "physical" in med and "standard" in med:
            r = med["standard"] / med["physical"]
            lines.append(f"- standard: {r:.2f}× the physical time (bar ≤ {TARGET_STANDARD_OVER_PHYSICAL}×): "
                         f"{'met' if r <= TARGET_STANDARD_OVER_PHYSICAL else 'MISSED'}; "
                         f"peak RSS {max(rss['standard']):.1f} MB")
        for n in names:
            lines.append(f"- all runs {n}: " + ", ".join(f"{t:.3f}" for t in times[n]))
        lines.append("")
    return "\n".join(lines)


def main():
    args = parse_args()
    counts = args.tables.split(",")
    results = []
    rss_points = {}
    for tables in counts:
        data, info = ensure_cluster(args, tables)
        if args.build_only:
            continue
        load0 = loadavg()
        est = plan_seconds(args, data)
        names, times, rss = bench_cluster(args, data)
        results.append((info, names, times, rss, load0, loadavg(), est))
        rss_points[info["files"]] = {n: max(rss[n]) for n in names if n != "cat"}
    if args.build_only:
        return
    text = report(args, results)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    if args.rss_json:
        Path(args.rss_json).write_text(json.dumps(rss_points, indent=1))


if __name__ == "__main__":
    main()
