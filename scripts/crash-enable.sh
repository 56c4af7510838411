#!/usr/bin/env bash
# Longer crash test of `pgcheckdb checksums enable`: SIGKILL at many random moments (default
# 200), on a PostgreSQL 15 cluster of a few hundred MB. After every kill pg_control must still
# say "off" (or "on" only after a complete run, with every checksum right), the server must
# start and every table must read back the same; a final rerun must complete and pass
# `pg_checksums --check`. This is the test suite's crash test with more iterations.
#
#   scripts/crash-enable.sh [ITERATIONS] [SEED]
#
# Prints the seed; rerun with the same seed to replay the same kill delays.
set -euo pipefail
cd "$(dirname "$0")/.."
export PGCHECKDB_CRASH_ITERATIONS="${1:-200}"
if [[ -n "${2:-}" ]]; then export PGCHECKDB_CRASH_SEED="$2"; fi
export PGCHECKDB_CRASH_VERBOSE=1
exec cargo test --release -p pgcheckdb --test checksums_enable -- \
    enable_killed_at_random_moments_loses_nothing_and_reruns_complete --exact --nocapture
