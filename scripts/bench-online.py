#!/usr/bin/env python3
"""Measurements of `pgcheckdb verify --online` (docs/PERFORMANCE.md, "verify --online").

Creates a throwaway cluster with data checksums and a pgbench database (--scale), then:

  1. pgbench TPS (4 clients, --secs seconds) alone, with `verify --online --level physical`
     running in a loop meanwhile, and with the same loop limited by --max-rate; --rounds rounds,
     interleaved, medians reported (the machine may be shared and noisy);
  2. the time of `verify --online --level physical` during that load, against
     `verify --level physical` offline on the same cluster after a clean stop;
  3. the page-cache residency (mincore on a mapping of each file) of the server's hot table
     (pgbench_accounts and its primary key), of a cold table (2 million rows the load never
     reads) and of all relation files: everything evicted, the hot table read by the server,
     then residency before and after one `verify --online`, and after a plain `cat` of the
     files for contrast.

Stdlib only. Run as root (the cluster runs as the `postgres` user) or as the cluster's owner.
"""

import argparse
import mmap
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PORT = "5499"


def log(msg):
    print(f"[bench-online] {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-bin", required=True, help="PostgreSQL bin directory")
    p.add_argument("--dir", default="/var/tmp/pgcheckdb-bench-online", help="work directory")
    p.add_argument("--scale", type=int, default=50, help="pgbench scale")
    p.add_argument("--secs", type=int, default=30, help="seconds of each pgbench run")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three pgbench runs")
    p.add_argument("--max-rate", type=float, default=20.0, help="MB/s of the throttled verify loop")
    p.add_argument("--pgcheckdb", default=str(REPO / "target/release/pgcheckdb"))
    p.add_argument("--out", default=str(REPO / "target/bench-online.md"))
    return p.parse_args()


def as_postgres(cmd):
    return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Cluster:
    def __init__(self, args):
        self.bin = Path(args.pg_bin)
        self.dir = Path(args.dir)
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"

    def tool(self, name):
        return str(self.bin / name)

    def create(self, scale):
        run(["rm", "-rf", str(self.dir)])
        self.sock.mkdir(parents=True)
        if os.geteuid() == 0:
            run(["chown", "-R", "postgres:postgres", str(self.dir)])
        run(as_postgres([self.tool("initdb"), "-k", "-D", str(self.data), "-U", "postgres"]))
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"port = {PORT}\nunix_socket_directories = '{self.sock}'\nlisten_addresses = ''\n"
                    "checkpoint_timeout = 30s\nmax_wal_size = 1GB\nshared_buffers = 128MB\n")
        self.start()
        log(f"pgbench -i -s {scale}")
        run(as_postgres([self.tool("pgbench"), *self.conn(), "-i", "-q", "-s", str(scale), "postgres"]))
        log("cold table (the server never reads it during the measurements)")
        self.psql("CREATE TABLE cold AS SELECT g AS id, repeat('c', 120) AS pad FROM generate_series(1, 2000000) g; CHECKPOINT")

    def conn(self):
        return ["-h", str(self.sock), "-p", PORT, "-U", "postgres"]

    def conninfo(self):
        return f"host={self.sock} port={PORT} user=postgres dbname=postgres"

    def start(self):
        run(as_postgres([self.tool("pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.dir / "log"), "start"]))

    def stop(self):
        run(as_postgres([self.tool("pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "stop"]))

    def psql(self, sql):
        return run(as_postgres([self.tool("psql"), *self.conn(), "-XAtq", "-d", "postgres", "-c", sql])).stdout.strip()

    def pgbench_tps(self, secs):
        out = run(as_postgres([self.tool("pgbench"), *self.conn(), "-n", "-c", "4", "-j", "2", "-T", str(secs), "postgres"])).stdout
        m = re.search(r"tps = ([0-9.]+)", out)
        return float(m.group(1)) if m else float("nan")


def verify(args, cluster, online, extra=()):
    cmd = [args.pgcheckdb, "verify", "-D", str(cluster.data), "--level", "physical", "--format", "json",
           "--no-progress", "-j", "2", *extra]
    if online:
        cmd.append("--online")
    t = time.monotonic()
    p = subprocess.run(as_postgres(cmd), capture_output=True, text=True)
    took = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"verify failed ({p.returncode}): {p.stderr}{p.stdout[-2000:]}")
    return took


def tps_with_verify_loop(args, cluster, extra):
    stop = threading.Event()
    times = []

    def loop():
        while not stop.is_set():
            times.append(verify(args, cluster, True, extra))

    t = threading.Thread(target=loop)
    t.start()
    tps = cluster.pgbench_tps(args.secs)
    stop.set()
    t.join()
    return tps, times


def relation_files(data):
    out = []
    for root, _, files in os.walk(data / "base"):
        out += [Path(root) / f for f in files if re.match(r"^[0-9]+(_(fsm|vm|init))?(\.[0-9]+)?$", f)]
    return out


def cached_bytes(paths):
    """Bytes of `paths` in the page cache: mincore on a read-only shared mapping of each file."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in paths:
        size = p.stat().st_size
        if size == 0:
            continue
        with open(p, "rb") as f:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap {p}")
            n = (size + page - 1) // page
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(addr, size, vec)
            libc.munmap(addr, size)
            if rc != 0:
                raise OSError(ctypes.get_errno(), f"mincore {p}")
            total += sum(b & 1 for b in vec) * page
    return total


def evict(paths):
    for p in paths:
        with open(p, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def files_of(cluster, rels):
    out = []
    for rel in rels:
        path = cluster.data / cluster.psql(f"SELECT pg_relation_filepath('{rel}')")
        out += [q for q in path.parent.glob(path.name + "*")]
    return out


def residency(args, cluster):
    files = relation_files(cluster.data)
    hot = files_of(cluster, ("pgbench_accounts", "pgbench_accounts_pkey"))
    cold = files_of(cluster, ("cold",))
    run(["sync"])
    evict(files)
    cluster.psql("SELECT count(*) FROM pgbench_accounts")  # the server reads its hot table
    cluster.psql("SELECT count(*) FROM pgbench_accounts WHERE aid % 7 = 0")
    rows = [("before verify --online", cached_bytes(hot), cached_bytes(cold), cached_bytes(files))]
    verify(args, cluster, True)
    rows.append(("after verify --online", cached_bytes(hot), cached_bytes(cold), cached_bytes(files)))
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass
    rows.append(("after cat of every relation file", cached_bytes(hot), cached_bytes(cold), cached_bytes(files)))
    sizes = [sum(f.stat().st_size for f in group) for group in (hot, cold, files)]
    return rows, sizes


def main():
    args = parse_args()
    c = Cluster(args)
    c.create(args.scale)
    alone, loop, throttled, online_times, rate_times = [], [], [], [], []
    for r in range(args.rounds):
        log(f"round {r + 1}/{args.rounds}")
        alone.append(c.pgbench_tps(args.secs))
        tps, times = tps_with_verify_loop(args, c, [])
        loop.append(tps)
        online_times += times
        tps, times = tps_with_verify_loop(args, c, ["--max-rate", str(args.max_rate)])
        throttled.append(tps)
        rate_times += times
    log("page-cache residency")
    res, sizes = residency(args, c)
    size = c.psql("SELECT pg_size_pretty(sum(pg_relation_size(oid))) FROM pg_class")
    c.stop()
    offline = [verify(args, c, False) for _ in range(max(3, args.rounds))]
    med = statistics.median
    mib = 1 << 20
    lines = [
        f"Cluster: pgbench scale {args.scale} ({size} of relations), data checksums, "
        f"shared_buffers 128MB, checkpoint_timeout 30s; pgbench -c 4 -j 2 -T {args.secs}; "
        f"{args.rounds} round(s), medians; verify -j 2 --level physical.",
        "",
        "| pgbench | TPS (median) | TPS per round |",
        "|---|---|---|",
        f"| alone | {med(alone):.0f} | {', '.join(f'{x:.0f}' for x in alone)} |",
        f"| with `verify --online` in a loop | {med(loop):.0f} | {', '.join(f'{x:.0f}' for x in loop)} |",
        f"| with `verify --online --max-rate {args.max_rate:g}` in a loop | {med(throttled):.0f} | {', '.join(f'{x:.0f}' for x in throttled)} |",
        "",
        "| verify --level physical | runs | seconds (median) | min | max |",
        "|---|---|---|---|---|",
        f"| `--online` during the pgbench load | {len(online_times)} | {med(online_times):.2f} | {min(online_times):.2f} | {max(online_times):.2f} |",
        f"| `--online --max-rate {args.max_rate:g}` during the load | {len(rate_times)} | {med(rate_times):.2f} | {min(rate_times):.2f} | {max(rate_times):.2f} |",
        f"| offline, same cluster stopped (warm cache) | {len(offline)} | {med(offline):.2f} | {min(offline):.2f} | {max(offline):.2f} |",
        "",
        f"| page cache (server idle) | hot: pgbench_accounts + pkey, MiB cached of {sizes[0] / mib:.0f} "
        f"| cold table, MiB cached of {sizes[1] / mib:.0f} | all relation files, MiB cached of {sizes[2] / mib:.0f} |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {h / mib:.1f} | {c / mib:.1f} | {a / mib:.1f} |" for name, h, c, a in res]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
