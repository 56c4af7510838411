#!/usr/bin/env python3
"""Benchmark of `pgcheckdb verify --level standard` against `pg_amcheck` (heap + B-tree).

Two clusters of about the same size (>= 2 GB of relation files), made once and reused:
  * "wide": the wide-row cluster of scripts/bench-physical.py (TOAST, one B-tree index);
  * "pgbench": `pgbench -i -s SCALE` (many small tuples, B-tree primary keys).

For each, in interleaved rounds with a warm page cache (one discarded warm-up pass):
  * pg_amcheck -j J -d postgres        (server running; heap tables, TOAST, B-tree indexes)
  * pgcheckdb verify --level standard -j J   (server stopped; every relation of every database)
  * pgcheckdb verify --level physical -j J   (server stopped)
The server is started before pg_amcheck and stopped after it; start/stop are not timed.
Prints a markdown report with medians and ratios and writes it to --out. Stdlib only.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_SPEEDUP_VS_AMCHECK = 2.0


def load_physical_bench():
    spec = importlib.util.spec_from_file_location("bench_physical", REPO / "scripts/bench-physical.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bp = load_physical_bench()
log = bp.log
as_postgres = bp.as_postgres


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    p.add_argument("--dir", default="/var/tmp/pgcheckdb-bench", help="wide cluster work dir (shared with bench-physical)")
    p.add_argument("--pgbench-dir", default="/var/tmp/pgcheckdb-bench-pgbench")
    p.add_argument("--size-gb", type=float, default=2.3)
    p.add_argument("--scale", type=int, default=150, help="pgbench scale (150 is about 2.2 GB)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"))
    p.add_argument("--out", default=str(REPO / "target/bench-standard.md"))
    p.add_argument("--recreate", action="store_true")
    return p.parse_args()


def pg_ctl(args, data, sock, action):
    opts = f"-c listen_addresses= -k {sock}"
    cmd = [f"{args.pg_bin}/pg_ctl", "-D", str(data), "-w", "-l", str(Path(data).parent / "postgres.log")]
    cmd += ["-o", opts, "start"] if action == "start" else ["-m", "fast", "stop"]
    subprocess.run(as_postgres(cmd), check=True, stdout=subprocess.DEVNULL)


def psql(args, sock, sql):
    subprocess.run(as_postgres([f"{args.pg_bin}/psql", "-h", str(sock), "-U", "postgres", "-d", "postgres", "-X", "-q",
                                "-v", "ON_ERROR_STOP=1", "-c", sql]), check=True, stdout=subprocess.DEVNULL)


def ensure_pgbench_cluster(args):
    work = Path(args.pgbench_dir)
    data, sock, marker = work / "data", work / "sock", work / "data.json"
    if marker.exists() and not args.recreate:
        log(f"reusing {data}")
        return data, sock
    subprocess.run(["rm", "-rf", str(work)], check=True)
    sock.mkdir(parents=True)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", str(work)], check=True)
    subprocess.run(as_postgres([f"{args.pg_bin}/initdb", "-k", "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data)]),
                   check=True, stdout=subprocess.DEVNULL)
    with open(data / "postgresql.conf", "a") as conf:
        conf.write("wal_level = minimal\nmax_wal_senders = 0\nfsync = off\nmax_wal_size = 8GB\n")
    pg_ctl(args, data, sock, "start")
    log(f"pgbench -i -s {args.scale}")
    t = time.perf_counter()
    subprocess.run(as_postgres([f"{args.pg_bin}/pgbench", "-h", str(sock), "-U", "postgres", "-i", "-q", "-I", "dtGvp",
                                "-s", str(args.scale), "postgres"]), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    log(f"pgbench -i done in {time.perf_counter() - t:.0f} s")
    pg_ctl(args, data, sock, "stop")
    marker.write_text(json.dumps({"scale": args.scale, "created": time.ctime()}))
    return data, sock


def timed(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t
    return elapsed, r


def measure(args, name, data, sock):
    """Rounds of amcheck / standard / physical on one cluster; returns per-command times."""
    pg_ctl(args, data, sock, "start")
    psql(args, sock, "CREATE EXTENSION IF NOT EXISTS amcheck")
    pg_ctl(args, data, sock, "stop")
    amcheck = as_postgres([f"{args.pg_bin}/pg_amcheck", "-h", str(sock), "-U", "postgres", "-d", "postgres",
                           "-j", str(args.jobs)])
    ours = lambda level: [args.pgcheckdb, "verify", "-D", str(data), "--level", level, "-j", str(args.jobs),
                          "--format", "json", "--no-progress"]
    times = {"pg_amcheck": [], "standard": [], "physical": []}
    summary = {}
    for r in range(args.rounds + 1):
        pg_ctl(args, data, sock, "start")
        t, res = timed(amcheck)
        pg_ctl(args, data, sock, "stop")
        if res.returncode != 0:
            sys.exit(f"pg_amcheck failed on {name}: {res.stdout[-2000:]}{res.stderr[-2000:]}")
        if r > 0:
            times["pg_amcheck"].append(t)
        for level in ("standard", "physical"):
            t, res = timed(ours(level))
            if res.returncode != 0:
                sys.exit(f"pgcheckdb {level} exit {res.returncode} on {name}:\n{res.stdout[-3000:]}{res.stderr}")
            summary[level] = json.loads(res.stdout.strip().splitlines()[-1])
            if r > 0:
                times[level].append(t)
        log(f"{name} round {r}{' (warm-up)' if r == 0 else ''}: " +
            ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v and r > 0))
    return times, summary


def report(args, results):
    lines = [f"### Standard level vs pg_amcheck (`-j {args.jobs}`, warm cache, {args.rounds} rounds, medians)", ""]
    lines.append(f"Machine: {bp.cpu_model()}, {os.cpu_count()} cores; load average at the end {bp.load_average()}.")
    lines.append("")
    lines.append("| cluster | bytes checked | pg_amcheck | pgcheckdb standard | pgcheckdb physical | "
                 "standard vs pg_amcheck | standard GB/s | physical GB/s | page-check cost |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, (times, summary) in results.items():
        med = {k: statistics.median(v) for k, v in times.items()}
        gb = summary["standard"]["bytes"] / 1e9
        speedup = med["pg_amcheck"] / med["standard"]
        cost = med["standard"] / med["physical"]
        lines.append(f"| {name} | {gb:.2f} GB | {med['pg_amcheck']:.2f} s | {med['standard']:.2f} s | "
                     f"{med['physical']:.2f} s | **{speedup:.2f}×** faster | {gb / med['standard']:.2f} | "
                     f"{gb / med['physical']:.2f} | ×{cost:.2f} time |")
        ok = "meets" if speedup >= TARGET_SPEEDUP_VS_AMCHECK else "MISSES"
        verdicts.append(f"* {name}: {speedup:.2f}× faster than pg_amcheck — {ok} the ≥ {TARGET_SPEEDUP_VS_AMCHECK}× target.")
    lines += ["", *verdicts, "", "Command: `python3 scripts/bench-standard.py " + " ".join(sys.argv[1:]) + "`", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)


def main():
    args = parse_args()
    phys_args = argparse.Namespace(pg_bin=args.pg_bin, dir=args.dir, size_gb=args.size_gb, recreate=args.recreate)
    _, wide = bp.ensure_cluster(phys_args)
    pgbench_data, pgbench_sock = ensure_pgbench_cluster(args)
    results = {
        "wide rows (bench-physical)": measure(args, "wide", wide, Path(args.dir) / "sock"),
        f"pgbench -s {args.scale}": measure(args, "pgbench", pgbench_data, pgbench_sock),
    }
    report(args, results)


if __name__ == "__main__":
    main()
