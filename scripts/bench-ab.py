#!/usr/bin/env python3
"""Interleaved A/B of two pgcheckdb builds: `verify` wall time at each level on one stopped
cluster, the builds alternating within each round (the order flips every round), after one
discarded warm-up run each. Prints a markdown table of medians and the new/old ratio.

Usage: python3 scripts/bench-ab.py OLD_BINARY NEW_BINARY DATA_DIRECTORY [ROUNDS]

For a refactor that must not change speed: run it on a warm page cache, and read the ratio,
not the seconds (the machine is noisy). Stdlib only.
"""
import statistics
import subprocess
import sys
import time

LEVELS = ["physical", "standard", "extended"]


def run(binary, data, level):
    """Wall seconds of one `verify` run (its output is discarded)."""
    started = time.monotonic()
    subprocess.run(
        [binary, "verify", "-D", data, "--level", level, "-j", "2", "--format", "json", "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.monotonic() - started


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    old, new, data = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    times = {(b, lvl): [] for b in ("old", "new") for lvl in LEVELS}
    for lvl in LEVELS:
        run(old, data, lvl)
        run(new, data, lvl)
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for lvl in LEVELS:
            for name, binary in order:
                times[(name, lvl)].append(run(binary, data, lvl))
    print("| level | old median s | new median s | new/old |")
    print("|---|---|---|---|")
    for lvl in LEVELS:
        o = statistics.median(times[("old", lvl)])
        n = statistics.median(times[("new", lvl)])
        print(f"| {lvl} | {o:.3f} | {n:.3f} | {n / o:.3f} |")


if __name__ == "__main__":
    main()
