#!/usr/bin/env bash
# Regenerates the fuzzing seed corpus under fuzz/corpus/ from real clusters:
#
#   * PostgreSQL 18 (data checksums on) and 14 (off): initdb, SQL that builds a table with TOAST,
#     HOT chains, dead and redirected line pointers and a dropped column, one index of every
#     built-in access method (btree, hash, gist, gin, spgist, brin), a sequence, VACUUM for the
#     visibility and free space maps; then a clean shutdown and the first blocks of each file
#     are copied out as single 8 KB pages (fuzz/corpus/pages/pg<major>_<format>_<what>_b<blkno>);
#   * pages of the catalogs the offline catalog reader scans (fuzz/corpus/catalog/);
#   * global/pg_control and the relation map files (global and one database) of every major
#     14-19 (fuzz/corpus/control_file/, fuzz/corpus/relmap/).
#
# The `<format>` in a page's name is the standard level's page format for it; the seed-corpus
# test checks each unmutated seed against its format, so a false positive shows up there too.
# fuzz/corpus/seeds.tsv records what that check needs from each cluster (the seed table's
# reltoastrelid).
# Keep the table in step with `fuzzing::seed_table_columns` in crates/pgcheckdb-pg.
#
# Binaries: $PGCHECKDB_PG<major>_BIN, else $PGCHECKDB_CACHE/postgres/<major>/bin (default cache
# /var/cache/pgcheckdb, filled by scripts/install-postgres.sh). Run as root (the clusters are
# created as $PGCHECKDB_PG_USER, default `postgres`) or as an ordinary user.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CORPUS="$REPO/fuzz/corpus"
CACHE_ROOT="${PGCHECKDB_CACHE:-/var/cache/pgcheckdb}"
PG_USER="${PGCHECKDB_PG_USER:-postgres}"
BLCKSZ=8192
# Blocks copied from the start of each relation fork (plus its last block).
FIRST_BLOCKS=4

log() { printf 'fuzz-seeds: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

bindir() {
    local major="$1" var="PGCHECKDB_PG${1}_BIN"
    local dir="${!var:-$CACHE_ROOT/postgres/$major/bin}"
    [[ -x "$dir/initdb" ]] || die "no initdb for PostgreSQL $major in $dir (run scripts/install-postgres.sh or set $var)"
    printf '%s' "$dir"
}

# Runs a command as the cluster owner.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fuzz-seeds.XXXXXX")"
[[ $(id -u) -eq 0 ]] && chown "$PG_USER" "$WORK"
RUNNING=""
cleanup() {
    if [[ -n "$RUNNING" ]]; then
        as_pg "$RUNNING/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# initdb a fresh cluster of `major` into $WORK/data; extra initdb arguments follow.
init_cluster() {
    local major="$1"
    shift
    rm -rf "$WORK/data"
    as_pg "$(bindir "$major")/initdb" -D "$WORK/data" -U postgres -E UTF8 --locale=C "$@" >"$WORK/initdb.log" 2>&1 ||
        { cat "$WORK/initdb.log" >&2; die "initdb $major failed"; }
}

start_cluster() {
    local bin="$1"
    as_pg "$bin/pg_ctl" -D "$WORK/data" -w -l "$WORK/server.log" \
        -o "-k $WORK -c listen_addresses= -c autovacuum=off" start >/dev/null ||
        { cat "$WORK/server.log" >&2; die "server did not start"; }
    RUNNING="$bin"
}

stop_cluster() {
    as_pg "$RUNNING/pg_ctl" -D "$WORK/data" -w -m fast stop >/dev/null
    RUNNING=""
}

sql() {
    as_pg "$RUNNING/psql" -h "$WORK" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 -At "$@"
}

# The seed schema: every page format the standard level knows.
SCHEMA_SQL=$(cat <<'EOF'
CREATE TABLE fuzz_rows (
    id int4 PRIMARY KEY, small int2, big int8, flag bool, name text, gone int4,
    ts timestamptz, amount numeric, payload bytea, code char(3), u uuid, label name);
ALTER TABLE fuzz_rows ALTER COLUMN payload SET STORAGE EXTERNAL;
INSERT INTO fuzz_rows
SELECT g, (g % 30000)::int2, g::int8 * 1000003, g % 3 = 0,
       CASE WHEN g % 7 = 0 THEN NULL ELSE repeat(md5(g::text), 1 + g % 5) END, g,
       timestamptz '2024-01-01' + g * interval '1 minute', (g * 3.14159)::numeric,
       CASE WHEN g % 50 = 0 THEN convert_to(repeat(md5(g::text), 100), 'UTF8')
            ELSE decode(md5(g::text), 'hex') END,
       'c' || (g % 10), md5(g::text)::uuid, 'label_' || g
FROM generate_series(1, 3000) g;
ALTER TABLE fuzz_rows DROP COLUMN gone;
UPDATE fuzz_rows SET small = small + 1 WHERE id % 11 = 0;
UPDATE fuzz_rows SET small = small + 1 WHERE id % 11 = 0;
DELETE FROM fuzz_rows WHERE id % 13 = 0;
CREATE INDEX fuzz_rows_hash ON fuzz_rows USING hash (id);
CREATE INDEX fuzz_rows_brin ON fuzz_rows USING brin (ts) WITH (pages_per_range = 2);
CREATE TABLE fuzz_geo (p point, words text[], doc tsvector);
INSERT INTO fuzz_geo
SELECT point(g % 97, g / 97), ARRAY['w' || (g % 40), 'v' || (g % 7)],
       to_tsvector('simple', 'word' || (g % 200) || ' other' || (g % 13))
FROM generate_series(1, 4000) g;
CREATE INDEX fuzz_geo_gist ON fuzz_geo USING gist (p);
CREATE INDEX fuzz_geo_spgist ON fuzz_geo USING spgist (p);
CREATE INDEX fuzz_geo_gin ON fuzz_geo USING gin (words);
CREATE SEQUENCE fuzz_seq;
SELECT count(nextval('fuzz_seq')) FROM generate_series(1, 5);
VACUUM fuzz_rows;
VACUUM fuzz_geo;
CHECKPOINT;
EOF
)

# `format name relation-path fork` rows for the seed relations (path relative to the data dir).
RELATIONS_SQL=$(cat <<'EOF'
SELECT 'heap', 'table', pg_relation_filepath('fuzz_rows')
UNION ALL SELECT 'toast', 'toast', pg_relation_filepath(reltoastrelid)
    FROM pg_class WHERE relname = 'fuzz_rows'
UNION ALL SELECT 'btree', 'pkey', pg_relation_filepath('fuzz_rows_pkey')
UNION ALL SELECT 'hash', 'index', pg_relation_filepath('fuzz_rows_hash')
UNION ALL SELECT 'brin', 'index', pg_relation_filepath('fuzz_rows_brin')
UNION ALL SELECT 'gist', 'index', pg_relation_filepath('fuzz_geo_gist')
UNION ALL SELECT 'spgist', 'index', pg_relation_filepath('fuzz_geo_spgist')
UNION ALL SELECT 'gin', 'index', pg_relation_filepath('fuzz_geo_gin')
UNION ALL SELECT 'sequence', 'seq', pg_relation_filepath('fuzz_seq')
UNION ALL SELECT 'vm', 'table', pg_relation_filepath('fuzz_rows') || '_vm'
UNION ALL SELECT 'fsm', 'table', pg_relation_filepath('fuzz_rows') || '_fsm'
UNION ALL SELECT 'heap_no_attributes', 'geo', pg_relation_filepath('fuzz_geo')
UNION ALL SELECT 'catalog', relname, pg_relation_filepath(oid) FROM pg_class
    WHERE relname IN ('pg_class', 'pg_attribute', 'pg_database', 'pg_namespace', 'pg_am',
                      'pg_type', 'pg_index', 'pg_tablespace')
EOF
)

# Copies block `blkno` of `file` to `out`.
copy_block() {
    dd if="$1" of="$3" bs=$BLCKSZ skip="$2" count=1 status=none
}

# Copies the first blocks and the last block of a relation file into `dir` as `prefix_b<N>`.
copy_pages() {
    local file="$1" dir="$2" prefix="$3" first="$4"
    local nblocks=$(($(stat -c %s "$file") / BLCKSZ)) blk
    local -A picked=()
    for ((blk = 0; blk < first && blk < nblocks; blk++)); do picked[$blk]=1; done
    ((nblocks > 0)) && picked[$((nblocks - 1))]=1
    for blk in "${!picked[@]}"; do
        copy_block "$file" "$blk" "$dir/${prefix}_b${blk}"
    done
}

seed_pages() {
    local major="$1"
    shift
    log "PostgreSQL $major: cluster with every page format ($*)"
    init_cluster "$major" "$@"
    start_cluster "$(bindir "$major")"
    sql -f - <<<"$SCHEMA_SQL" >/dev/null
    sql -F ' ' -c "$RELATIONS_SQL" >"$WORK/relations"
    printf 'pg%s\treltoastrelid\t%s\n' "$major" \
        "$(sql -c "SELECT reltoastrelid FROM pg_class WHERE relname = 'fuzz_rows'")" >>"$CORPUS/seeds.tsv"
    stop_cluster
    local format name path
    while read -r format name path; do
        local file="$WORK/data/$path"
        [[ -f "$file" ]] || die "PostgreSQL $major: $path ($format $name) is missing"
        if [[ "$format" == catalog ]]; then
            copy_pages "$file" "$CORPUS/catalog" "pg${major}_${name}" 2
        else
            copy_pages "$file" "$CORPUS/pages" "pg${major}_${format}_${name}" "$FIRST_BLOCKS"
        fi
    done <"$WORK/relations"
    seed_control_files "$major"
}

seed_control_files() {
    local major="$1" db
    cp "$WORK/data/global/pg_control" "$CORPUS/control_file/pg${major}_pg_control"
    cp "$WORK/data/global/pg_filenode.map" "$CORPUS/relmap/pg${major}_global"
    db=$(find "$WORK/data/base" -name pg_filenode.map | sort | head -n 1)
    cp "$db" "$CORPUS/relmap/pg${major}_database"
}

rm -rf "$CORPUS/pages" "$CORPUS/catalog" "$CORPUS/control_file" "$CORPUS/relmap" "$CORPUS/seeds.tsv"
mkdir -p "$CORPUS/pages" "$CORPUS/catalog" "$CORPUS/control_file" "$CORPUS/relmap"

seed_pages 18 --data-checksums
seed_pages 14
for major in 15 16 17 19; do
    log "PostgreSQL $major: control file and relation maps"
    init_cluster "$major" --data-checksums
    seed_control_files "$major"
done
[[ $(id -u) -eq 0 ]] && chown -R --reference="$REPO" "$CORPUS"
log "$(find "$CORPUS" -type f | wc -l) seeds in $CORPUS"
