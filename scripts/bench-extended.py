#!/usr/bin/env python3
"""Benchmark of `pgcheckdb verify --level extended` against the standard level and against
`pg_amcheck --parent-check` (the B-tree checks) and `pg_amcheck --parent-check --heapallindexed`.

Two clusters, each made once and reused (--cluster):
  * pgbench: `pgbench -i -s SCALE` (PostgreSQL's own benchmark tables, three B-tree primary keys);
  * four-indexes: one table of about --table-gb GB, `(id int, name text, at timestamp, u uuid)`,
    with a B-tree index on each column, in a cluster made with --locale en_US.UTF-8 (the text
    index is ordered by the C library's collation, as on most servers).
In interleaved rounds with a warm page cache (one discarded warm-up round):
  * pg_amcheck --parent-check --index '*' -j J -d postgres   (server running; B-tree checks only)
  * pg_amcheck --parent-check --heapallindexed -j J -d postgres   (heap + B-tree)
  * pgcheckdb verify --level standard -j J                   (server stopped; the whole cluster)
  * pgcheckdb verify --level extended -j J                   (the whole cluster)
  * pgcheckdb verify --level extended -j J -d postgres -i '*'   (the B-tree indexes of the same
    database that pg_amcheck checks: the like-for-like comparison with B-tree-only amcheck)
  * pgcheckdb verify --level standard -j J -d postgres -i '*'   (the same indexes at the standard
    level: what the B-tree checks of the extended level cost on top of it)
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
import time
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
    p.add_argument("--cluster", choices=["pgbench", "four-indexes"], default="pgbench")
    p.add_argument("--four-dir", default="/var/tmp/pgcheckdb-bench-four-indexes")
    p.add_argument("--table-gb", type=float, default=2.0, help="four-indexes: heap size of the table")
    p.add_argument("--prepare-only", action="store_true", help="make the cluster, time nothing")
    p.add_argument("--skip-heapallindexed", action="store_true",
                   help="do not time pg_amcheck --heapallindexed (it reads the table once per index)")
    return p.parse_args()


# One row of the four-indexes table takes about 100 bytes of heap (header, line pointer, columns).
FOUR_ROW_BYTES = 100


def ensure_four_index_cluster(args):
    """The four-indexes cluster: made once (initdb, INSERT, CREATE INDEX x4), then reused."""
    work = Path(args.four_dir)
    data, sock, marker = work / "data", work / "sock", work / "data.json"
    if marker.exists() and not args.recreate:
        log(f"reusing {data}")
        return data, sock
    subprocess.run(["rm", "-rf", str(work)], check=True)
    sock.mkdir(parents=True)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", str(work)], check=True)
    subprocess.run(as_postgres([f"{args.pg_bin}/initdb", "-k", "-A", "trust", "-U", "postgres", "--no-sync",
                                "--locale", "en_US.UTF-8", "-E", "UTF8", "-D", str(data)]),
                   check=True, stdout=subprocess.DEVNULL)
    with open(data / "postgresql.conf", "a") as conf:
        conf.write("wal_level = minimal\nmax_wal_senders = 0\nfsync = off\nmax_wal_size = 8GB\n"
                   "maintenance_work_mem = 1GB\n")
    bs.pg_ctl(args, data, sock, "start")
    rows = int(args.table_gb * 1e9 / FOUR_ROW_BYTES)
    log(f"four-indexes: {rows} rows")
    t = time.perf_counter()
    bs.psql(args, sock, "CREATE TABLE big (id int, name text, at timestamp, u uuid)")
    bs.psql(args, sock, "INSERT INTO big SELECT g, md5(g::text) || ' ' || (g % 997)::text, "
                        "timestamp '2020-01-01' + g * interval '1 second', gen_random_uuid() "
                        f"FROM generate_series(1, {rows}) g")
    for col in ("id", "name", "at", "u"):
        bs.psql(args, sock, f"CREATE INDEX big_{col} ON big ({col})")
    bs.psql(args, sock, "VACUUM ANALYZE big")
    log(f"four-indexes made in {time.perf_counter() - t:.0f} s")
    bs.pg_ctl(args, data, sock, "stop")
    marker.write_text(json.dumps({"rows": rows, "created": time.ctime()}))
    return data, sock


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
    if args.cluster == "pgbench":
        data, sock = bs.ensure_pgbench_cluster(args)
        what = f"pgbench -s {args.scale}"
    else:
        data, sock = ensure_four_index_cluster(args)
        what = f"four-indexes ({args.table_gb:g} GB table)"
    if args.prepare_only:
        return
    bs.pg_ctl(args, data, sock, "start")
    bs.psql(args, sock, "CREATE EXTENSION IF NOT EXISTS amcheck")
    bs.pg_ctl(args, data, sock, "stop")
    amcheck = as_postgres([f"{args.pg_bin}/pg_amcheck", "-h", str(sock), "-U", "postgres", "-d", "postgres",
                           "--parent-check", "--index", "*", "-j", str(args.jobs)])
    amcheck_all = as_postgres([f"{args.pg_bin}/pg_amcheck", "-h", str(sock), "-U", "postgres", "-d", "postgres",
                               "--parent-check", "--heapallindexed", "-j", str(args.jobs)])
    ours = lambda level: [args.pgcheckdb, "verify", "-D", str(data), "--level", level, "-j", str(args.jobs),
                          "--format", "json", "--no-progress"]
    ours_btree = ours("extended") + ["-d", "postgres", "-i", "*"]
    standard_btree = ours("standard") + ["-d", "postgres", "-i", "*"]
    times = {"pg_amcheck --parent-check": [], "pg_amcheck --parent-check --heapallindexed": [], "standard": [],
             "extended": [], "extended -i '*'": [], "standard -i '*'": []}
    amchecks = [("pg_amcheck --parent-check", amcheck)]
    if not args.skip_heapallindexed:
        amchecks.append(("pg_amcheck --parent-check --heapallindexed", amcheck_all))
    summary = {}
    for r in range(args.rounds + 1):
        bs.pg_ctl(args, data, sock, "start")
        for name, cmd in amchecks:
            t, res = bs.timed(cmd)
            if res.returncode != 0:
                sys.exit(f"pg_amcheck failed: {res.stdout[-2000:]}{res.stderr[-2000:]}")
            if r > 0:
                times[name].append(t)
        bs.pg_ctl(args, data, sock, "stop")
        for level, cmd in (("standard", ours("standard")), ("extended", ours("extended")),
                           ("extended -i '*'", ours_btree), ("standard -i '*'", standard_btree)):
            t, res = bs.timed(cmd)
            if res.returncode != 0:
                sys.exit(f"pgcheckdb {level} exit {res.returncode}:\n{res.stdout[-3000:]}{res.stderr}")
            summary[level] = json.loads(res.stdout.strip().splitlines()[-1])
            if r > 0:
                times[level].append(t)
        log(f"round {r}{' (warm-up)' if r == 0 else ''}: " +
            ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v and r > 0))
    rss_small, sum_small, f_small = peak_rss(args, data, "64MB")
    rss_big, sum_big, f_big = peak_rss(args, data, "1G")
    med = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
    ext = summary["extended"]["extended"]
    BT = "extended -i '*'"
    SBT = "standard -i '*'"
    ratio = lambda a, b: f"{med[a] / med[b]:.2f}×"
    lines = [f"### Extended level, {what} (`-j {args.jobs}`, warm cache, {args.rounds} rounds, medians)", "",
             f"Machine: {bp.cpu_model()}, {os.cpu_count()} cores; load average at the end {bp.load_average()}.", "",
             "| command | what it reads | median |", "|---|---|---|",
             f"| `pg_amcheck --parent-check --index '*'` | the B-tree indexes of `postgres` | "
             f"{med['pg_amcheck --parent-check']:.2f} s |",
             f"| `pg_amcheck --parent-check --heapallindexed` | heap + B-tree of `postgres` | "
             f"{med['pg_amcheck --parent-check --heapallindexed']:.2f} s |",
             f"| `verify --level standard` | the whole cluster, {summary['standard']['bytes'] / 1e9:.2f} GB | "
             f"{med['standard']:.2f} s |",
             f"| `verify --level extended` | the whole cluster | {med['extended']:.2f} s |",
             f"| `verify --level extended -d postgres -i '*'` | the B-tree indexes of `postgres`, "
             f"{summary[BT]['bytes'] / 1e9:.2f} GB | {med[BT]:.2f} s |",
             f"| `verify --level standard -d postgres -i '*'` | the same indexes | {med[SBT]:.2f} s |", "",
             f"Ratios: B-tree-only amcheck / `extended -i '*'` = "
             f"{ratio('pg_amcheck --parent-check', BT)}; heapallindexed amcheck / extended = "
             f"{ratio('pg_amcheck --parent-check --heapallindexed', 'extended')}; extended / standard = "
             f"×{med['extended'] / med['standard']:.2f}; B-tree checks, extended / standard "
             f"(`-d postgres -i '*'` both) = ×{med[BT] / med[SBT]:.2f}.", "",
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
