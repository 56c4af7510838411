#!/usr/bin/env bash
# sweep-run.sh - the false-positive sweep: run `pgcheckdb verify` on every healthy real-world
# cluster built by scripts/sweep-real-world.sh and show anything that is not `info`.
#
# Usage:  bash scripts/sweep-run.sh BIN [DIR] [CLUSTER ...]
#         DIR/run.sh BIN [CLUSTER ...]          (the copy sweep-real-world.sh leaves in DIR)
#
#   BIN      the pgcheckdb binary to test
#   DIR      the directory sweep-real-world.sh built (default: the directory of this script,
#            which is right for the DIR/run.sh copy)
#   CLUSTER  only these clusters (names of DIR's subdirectories); default all complete ones
#
# For each cluster (DIR/<name>/data, complete when DIR/<name>/.sweep-ok exists) it runs
#   BIN verify -D DIR/<name>/data --level standard --format json --no-progress -j 2
# and prints one summary line (exit status, counts by severity, counts by kind for non-info
# findings), then every finding whose severity is not "info" (kind, severity, file, block,
# relation, message). It also checks that verify wrote nothing (no file under the data
# directory newer than the run's start) and stops a run that takes longer than SWEEP_TIMEOUT
# seconds (default 900; a hang is a failure).
#
# Environment: SWEEP_LEVEL (default standard), SWEEP_JOBS (-j, default 2), SWEEP_TIMEOUT,
# SWEEP_MAX_LINES (print at most this many non-info findings per cluster; default 0 = all),
# SWEEP_OUT (directory for each run's raw JSON Lines and stderr; default a new temp dir, printed
# at the end).
#
# Exit status: 0 when every cluster exited 0 with no error/warning finding; 1 otherwise (also
# when a cluster directory is incomplete, verify wrote or hung, or no cluster was found).
set -uo pipefail

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
BIN=$1; shift
if [ $# -ge 1 ] && [ -d "$1" ] && [ ! -f "$1/.sweep-ok" ]; then DIR=$1; shift
else DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); fi
[ -x "$BIN" ] || { echo "sweep-run: $BIN is not an executable" >&2; exit 2; }
command -v jq > /dev/null || { echo "sweep-run: needs jq" >&2; exit 2; }
LEVEL=${SWEEP_LEVEL:-standard}
JOBS=${SWEEP_JOBS:-2}
TIMEOUT=${SWEEP_TIMEOUT:-900}
MAX_LINES=${SWEEP_MAX_LINES:-0}
OUT=${SWEEP_OUT:-$(mktemp -d /tmp/pgcheckdb-sweep-out.XXXXXX)}
mkdir -p "$OUT"

if [ $# -gt 0 ]; then names=("$@")
else
    names=()
    for d in "$DIR"/*/; do
        d=${d%/}
        [ -d "$d/data" ] && names+=("$(basename "$d")")
    done
fi
[ ${#names[@]} -gt 0 ] || { echo "sweep-run: no cluster in $DIR (build them with scripts/sweep-real-world.sh $DIR)" >&2; exit 1; }

echo "sweep: $("$BIN" --version 2>/dev/null || echo "$BIN") on ${#names[@]} clusters in $DIR (level $LEVEL)"
bad=0
for name in "${names[@]}"; do
    data=$DIR/$name/data
    if [ ! -f "$DIR/$name/.sweep-ok" ] || [ ! -f "$data/PG_VERSION" ]; then
        echo "== $name: INCOMPLETE (no $DIR/$name/.sweep-ok: rebuild it with sweep-real-world.sh)"
        bad=1
        continue
    fi
    stamp=$OUT/$name.started
    touch "$stamp"
    start=$(date +%s.%N)
    timeout "$TIMEOUT" "$BIN" verify -D "$data" --level "$LEVEL" --format json --no-progress \
        -j "$JOBS" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"
    status=$?
    written=$(find "$data" -newer "$stamp" -print 2>/dev/null | head -5)
    secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
    counts=$(jq -r -s '[.[] | select(.type == "finding")] | group_by(.severity)
                 | map("\(.[0].severity)=\(length)") | join(" ")' "$OUT/$name.jsonl" 2>/dev/null)
    kinds=$(jq -r -s '[.[] | select(.type == "finding" and .severity != "info")] | group_by(.kind)
                 | map("\(.[0].kind)=\(length)") | join(" ")' "$OUT/$name.jsonl" 2>/dev/null)
    nonclean=$(jq -r -s '[.[] | select(.type == "finding" and .severity != "info")] | length' \
        "$OUT/$name.jsonl" 2>/dev/null || echo "?")
    verdict=OK
    if [ "$status" != 0 ] || [ "$nonclean" != 0 ] || [ -n "$written" ]; then verdict=FAIL; bad=1; fi
    printf '== %s: %s exit=%s findings: %s%s (PG %s, %s, %.1fs)\n' "$name" "$verdict" "$status" \
        "${counts:-none}" "${kinds:+ | non-info by kind: $kinds}" "$(cat "$data/PG_VERSION")" \
        "$(du -sh "$data" 2>/dev/null | cut -f1)" "$secs"
    jq -r 'select(.type == "finding" and .severity != "info")
           | "   \(.severity) \(.kind) \(.file // "-")\(if .block != null then " blk \(.block)" else "" end)"
             + "\(if .relation.name != null then " [\(.relation.name)]" else "" end)"
             + "\(if .database.name != null then " db=\(.database.name)" else "" end): \(.message)"' \
        "$OUT/$name.jsonl" 2>/dev/null | if [ "$MAX_LINES" -gt 0 ]; then head -n "$MAX_LINES"; else cat; fi
    if [ "$MAX_LINES" -gt 0 ] && [ "$nonclean" != "?" ] && [ "$nonclean" -gt "$MAX_LINES" ]; then
        echo "   ... $((nonclean - MAX_LINES)) more (SWEEP_MAX_LINES=$MAX_LINES; all in $OUT/$name.jsonl)"
    fi
    [ "$status" = 124 ] && echo "   TIMEOUT: verify ran longer than ${TIMEOUT}s and was stopped"
    [ -n "$written" ] && echo "   WROTE: files changed during verify, e.g.:" && sed 's/^/     /' <<< "$written"
    if [ "$status" != 0 ] && [ "$status" != 2 ]; then
        jq -r 'select(.type == "summary" and .error != null) | "   summary error: \(.error)"' \
            "$OUT/$name.jsonl" 2>/dev/null
        sed 's/^/   stderr: /' "$OUT/$name.stderr" | head -20
    fi
done
echo "sweep: raw output in $OUT"
if [ $bad = 0 ]; then echo "sweep: ALL CLEAN"; else echo "sweep: NOT CLEAN"; fi
exit $bad
