#!/usr/bin/env python3
"""Benchmark of `pgcheckdb verify --level extended` against the standard level and against
`pg_amcheck --parent-check` on the B-tree indexes only.

One `pgbench -i -s SCALE` cluster, made once and reused (the cluster of scripts/bench-standard.py
when --pgbench-dir points at it). In interleaved rounds with a warm page cache (one discarded
warm-up round):
  * pg_amcheck --parent-check --index '*' -j J -d postgres   (server running; B-tree checks only)
  * pgcheckdb verify --level standard -j J                   (server stopped)
  * pgcheckdb verify --level extended -j J                   (server stopped)
The server is started before pg_amcheck and stopped after it; start/stop are not timed.
Then once: peak RSS of the extended level with --memory 64MB and with the default 1 GiB
(/usr/bin/time -v), and whether both report the same findings.
Prints a markdown report with medians and ratios and writes it to --out. Stdlib only.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bs = load("bench_standard", "bench-standard.py")
bp = bs.bp
log = bp.log
as_postgres = bp.as_postgres


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    p.add_argument("--pgbench-dir", default="/var/tmp/pgcheckdb-bench-pgbench100")
    p.add_argument("--scale", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"))
    p.add_argument("--out", default=str(REPO / "target/bench-extended.md"))
    p.add_argument("--recreate", action="store_true")
    return p.parse_args()


def findings(stdout):
    out = []
    for line in stdout.splitlines():
        v = json.loads(line)
        if v.get("type") == "finding":
            out.append((v["kind"], v["file"], v.get("block")))
    return sorted(out)


def peak_rss(args, data, memory):
    cmd = ["/usr/bin/time", "-v", args.pgcheckdb, "verify", "-D", str(data), "--level", "extended", "-j",
           str(args.jobs), "--format", "json", "--no-progress", "--memory", memory]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kb = next(int(l.split(":")[1]) for l in r.stderr.splitlines() if "Maximum resident set size" in l)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    return kb / 1024, summary, findings(r.stdout)


def main():
    args = parse_args()
    data, sock = bs.ensure_pgbench_cluster(args)
    bs.pg_ctl(args, data, sock, "start")
    bs.psql(args, sock, "CREATE EXTENSION IF NOT EXISTS amcheck")
    bs.pg_ctl(args, data, sock, "stop")
    amcheck = as_postgres([f"{args.pg_bin}/pg_amcheck", "-h", str(sock), "-U", "postgres", "-d", "postgres",
                           "--parent-check", "--index", "*", "-j", str(args.jobs)])
    amcheck_all = as_postgres([f"{args.pg_bin}/pg_amcheck", "-h", str(sock), "-U", "postgres", "-d", "postgres",
                               "--parent-check", "--heapallindexed", "-j", str(args.jobs)])
    ours = lambda level: [args.pgcheckdb, "verify", "-D", str(data), "--level", level, "-j", str(args.jobs),
                          "--format", "json", "--no-progress"]
    times = {"pg_amcheck --parent-check": [], "pg_amcheck --parent-check --heapallindexed": [], "standard": [],
             "extended": []}
    summary = {}
    for r in range(args.rounds + 1):
        bs.pg_ctl(args, data, sock, "start")
        for name, cmd in (("pg_amcheck --parent-check", amcheck),
                          ("pg_amcheck --parent-check --heapallindexed", amcheck_all)):
            t, res = bs.timed(cmd)
            if res.returncode != 0:
                sys.exit(f"pg_amcheck failed: {res.stdout[-2000:]}{res.stderr[-2000:]}")
            if r > 0:
                times[name].append(t)
        bs.pg_ctl(args, data, sock, "stop")
        for level in ("standard", "extended"):
            t, res = bs.timed(ours(level))
            if res.returncode != 0:
                sys.exit(f"pgcheckdb {level} exit {res.returncode}:\n{res.stdout[-3000:]}{res.stderr}")
            summary[level] = json.loads(res.stdout.strip().splitlines()[-1])
            if r > 0:
                times[level].append(t)
        log(f"round {r}{' (warm-up)' if r == 0 else ''}: " +
            ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v and r > 0))
    rss_small, sum_small, f_small = peak_rss(args, data, "64MB")
    rss_big, sum_big, f_big = peak_rss(args, data, "1G")
    med = {k: statistics.median(v) for k, v in times.items()}
    ext = summary["extended"]["extended"]
    lines = [f"### Extended level (`-j {args.jobs}`, warm cache, {args.rounds} rounds, medians)", "",
             f"Machine: {bp.cpu_model()}, {os.cpu_count()} cores; load average at the end {bp.load_average()}.", "",
             "| cluster | bytes | pg_amcheck --parent-check (B-tree only) | pg_amcheck --parent-check "
             "--heapallindexed (heap + B-tree) | standard | extended | extended vs B-tree-only amcheck | "
             "extended vs heap + B-tree amcheck | extended / standard |", "|---|---|---|---|---|---|---|---|---|",
             f"| pgbench -s {args.scale} | {summary['extended']['bytes'] / 1e9:.2f} GB | "
             f"{med['pg_amcheck --parent-check']:.2f} s | {med['pg_amcheck --parent-check --heapallindexed']:.2f} s | "
             f"{med['standard']:.2f} s | {med['extended']:.2f} s | "
             f"{med['pg_amcheck --parent-check'] / med['extended']:.2f}× | "
             f"{med['pg_amcheck --parent-check --heapallindexed'] / med['extended']:.2f}× | "
             f"×{med['extended'] / med['standard']:.2f} |", "",
             f"Facts: {ext['facts']}, indexes checked {ext['indexes_checked']}, merge {ext['merge_seconds']:.3f} s.",
             f"Peak RSS: {rss_small:.0f} MiB with `--memory 64MB` ({sum_small['extended']['spill_files']} spill "
             f"files, {sum_small['extended']['spilled_bytes'] / 1e6:.1f} MB spilled), {rss_big:.0f} MiB with 1 GiB; "
             f"findings identical: {f_small == f_big}.", "",
             "All rounds (s): " + "; ".join(f"{k} " + " ".join(f"{x:.2f}" for x in v) for k, v in times.items()), "",
             "Command: `python3 scripts/bench-extended.py " + " ".join(sys.argv[1:]) + "`", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
