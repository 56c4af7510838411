#!/usr/bin/env bash
# sweep-real-world.sh - build real-world, healthy, cleanly stopped PostgreSQL clusters that
# nobody on this project designed, for the false-positive sweep (docs/SWEEP.md).
#
# Usage:  bash scripts/sweep-real-world.sh [DIR]        (DIR defaults to a new temp dir)
#         SWEEP_ONLY="crash16 standby17" bash scripts/sweep-real-world.sh DIR
#
# Then:   DIR/run.sh /path/to/pgcheckdb     (a copy of scripts/sweep-run.sh; see there)
#
# Each cluster lives in DIR/<name>/ with its data directory in DIR/<name>/data, the socket in
# DIR/<name>/sock and the server log in DIR/<name>/server.log. A cluster is complete once
# DIR/<name>/.sweep-ok exists (it records the PostgreSQL version and what was done); a cluster
# that already has it is not built again (delete DIR/<name> to rebuild it). Clusters:
#
#   regress14 .. regress18  PostgreSQL's regression database after pg_regress ran the installcheck
#                         schedule (src/test/regress/parallel_schedule) of the same major version
#                         against it; databases kept. 15 is Debian's server
#                         (/usr/lib/postgresql/15/bin), the others the wheels' servers; 15 and 16
#                         without checksums, 14, 17 and 18 with. Needs the source tarball
#                         (postgresql-<major>_*.orig.tar.*) in $SWEEP_PG_SRC (default DIR/src),
#                         else tries `apt-get source --download-only postgresql-<major>` (needs a
#                         deb-src line for a suite that has the package), else downloads the
#                         .orig tarball named by the Sources index of Debian 13 or Ubuntu
#                         22.04/24.04/25.10. regress.so is compiled with cc against the server's
#                         include/server.
#   regress19             PostgreSQL 19's server filled by PostgreSQL **18's** regression SQL
#                         (18's src/test/regress, parallel_schedule and pg_regress; --bindir is 19's,
#                         so 19's psql runs it): 19's src/test/regress is not reachable here (no
#                         19 source package or .orig tarball in the archives this script reads).
#                         18's regress.c is compiled against 19's server headers, which the 19
#                         build of scripts/install-postgres.sh lacks: the first build fetches
#                         them (`install-postgres.sh --server-headers 19`: Debian's
#                         postgresql-server-dev-19 of the installed version, into the cache).
#                         Checksums on (19's initdb default). Tests whose output changed in 19
#                         fail; the database is filled all the same. join_hash is left out (it
#                         never finishes on 19rc1 here, and rolls back all it does; see
#                         build_regress).
#   upgrade14to18         made on 14 with checksums (every index AM, TOAST, sequences, a matview,
#                         an unlogged table), pg_upgrade --link to 18, then DML and VACUUM on 18.
#   upgrade18to19         made on 18 (checksums on, its default), the same shapes plus pgbench with
#                         foreign keys and FOR SHARE sessions (multixacts, whose offsets pg_upgrade
#                         rewrites into 19's 64-bit format), pg_upgrade --copy to 19 (checksums
#                         on, its default), then DML, pgbench and VACUUM on 19.
#   upgrade14to19         made on 14 without checksums (its default), the same; checksums switched
#                         on offline with 14's pg_checksums --enable, as pg_upgrade to 19 requires
#                         of a cluster without them when the new one has its default (checksums
#                         on); pg_upgrade --link to 19, then DML, pgbench and VACUUM on 19.
#   standby17             streaming standby (pg_basebackup -R) of a pgbench primary, stopped while
#                         the primary runs pgbench, holds a long open transaction and a prepared
#                         transaction that created a table, after a checkpoint on the primary
#                         and a restartpoint on the standby: "shut down in recovery".
#   standby17-primary     that primary, stopped afterwards (the prepared transaction stays).
#   crash16               pgbench traffic, `pg_ctl stop -m immediate` mid-run, start (crash
#                         recovery), clean stop.
#   crashed18             no checksums; pgbench traffic with DDL (CREATE/DROP TABLE, TRUNCATE,
#                         CREATE INDEX CONCURRENTLY, VACUUM FULL, an unlogged table), then
#                         `pg_ctl stop -m immediate`, left crashed (never recovered): checked as
#                         crash recovery will find it.
#   nochecks14, nochecks18  no checksums, churned: pgbench, UPDATE/DELETE, VACUUM, VACUUM FULL,
#                         CLUSTER, TRUNCATE, ADD/DROP COLUMN with defaults, TOAST, every index AM,
#                         partitioned tables, an aborted UPDATE then a truncating VACUUM.
#   many18                5,000 tables with an index each.
#   features16            everyday features nobody thinks about: pgbench with foreign keys
#                         (multixacts from KEY SHARE locks), SELECT FOR SHARE from several
#                         sessions, COPY FREEZE, large objects, an invalid index left by a failed
#                         CREATE UNIQUE INDEX CONCURRENTLY, REINDEX CONCURRENTLY, SET UNLOGGED /
#                         SET LOGGED, a tablespace outside the data directory, VACUUM FREEZE;
#                         made without checksums and switched on offline with pg_checksums --enable.
#
# Servers run as the `postgres` user when we are root, on Unix sockets only (listen_addresses
# = ''), each on its own port. PostgreSQL binaries: $PGCHECKDB_CACHE/postgres/<major>/bin (default
# /var/cache/pgcheckdb), as written by scripts/install-postgres.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:-$(mktemp -d /tmp/pgcheckdb-sweep.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PGROOT=${PGCHECKDB_CACHE:-/var/cache/pgcheckdb}/postgres
SRC=${SWEEP_PG_SRC:-$DIR/src}
ONLY=${SWEEP_ONLY:-regress14 regress15 regress16 regress17 regress18 regress19 upgrade14to18 upgrade18to19 upgrade14to19 standby17 crash16 crashed18 nochecks14 nochecks18 many18 features16}
PG_USER=postgres

log() { printf '[sweep %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }
trap 'log "error: failed at line $LINENO: $BASH_COMMAND"' ERR
# Connection options are passed as words (see conn): the directory must not contain blanks.
[[ "$DIR" != *[[:space:]]* ]] || die "the directory must not contain blanks: $DIR"

# Runs a command as the cluster user (or as ourselves when not root).
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

# The bin directory of a major version (15 may be Debian's: pass "debian15").
bindir() {
    case $1 in
        debian15) echo /usr/lib/postgresql/15/bin ;;
        *) echo "$PGROOT/$1/bin" ;;
    esac
}

# Per-cluster state: bin dir and port, keyed by cluster name.
declare -A BIN PORT
NEXT_PORT=${SWEEP_BASE_PORT:-55400}

# pg_init NAME VERSION CHECKSUMS(on|off) [setting=value ...]: initdb DIR/NAME/data.
pg_init() {
    local name=$1 ver=$2 sums=$3; shift 3
    local root=$DIR/$name bin
    bin=$(bindir "$ver")
    [ -x "$bin/initdb" ] || die "no PostgreSQL $ver in $bin"
    rm -rf "$root"
    mkdir -p "$root/sock"
    chmod 0700 "$root"
    [ "$(id -u)" = 0 ] && chown -R "$PG_USER:" "$root"
    BIN[$name]=$bin
    PORT[$name]=$NEXT_PORT
    NEXT_PORT=$((NEXT_PORT + 1))
    local flags=(-D "$root/data" -A trust -U postgres -E UTF8 --locale=C --no-sync)
    if [ "$sums" = on ]; then flags+=(-k); elif "$bin/postgres" --version | grep -q ' 1[89]'; then flags+=(--no-data-checksums); fi
    as_pg "$bin/initdb" "${flags[@]}" > "$root/initdb.log" 2>&1 || { cat "$root/initdb.log" >&2; die "initdb $name"; }
    pg_conf "$name" listen_addresses "''" unix_socket_directories "'$root/sock'" \
        port "${PORT[$name]}" fsync off max_connections 50 "$@"
}

# pg_conf NAME name value [name value ...]: appends settings to postgresql.conf.
pg_conf() {
    local conf=$DIR/$1/data/postgresql.conf; shift
    while [ $# -ge 2 ]; do echo "$1 = $2" >> "$conf"; shift 2; done
}

# pg_adopt NAME VERSION: state for a data directory made by another tool (pg_basebackup, pg_upgrade).
pg_adopt() {
    local name=$1
    BIN[$name]=$(bindir "$2")
    PORT[$name]=$NEXT_PORT
    NEXT_PORT=$((NEXT_PORT + 1))
    mkdir -p "$DIR/$name/sock"
    [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$DIR/$name" "$DIR/$name/sock"
    pg_conf "$name" unix_socket_directories "'$DIR/$name/sock'" port "${PORT[$name]}"
}

pg_start() {
    as_pg "${BIN[$1]}/pg_ctl" -D "$DIR/$1/data" -l "$DIR/$1/server.log" -w -t 600 start > /dev/null \
        || { tail -30 "$DIR/$1/server.log" >&2; die "start $1"; }
}

# pg_stop NAME [MODE]: fast (clean) by default.
pg_stop() {
    as_pg "${BIN[$1]}/pg_ctl" -D "$DIR/$1/data" -m "${2:-fast}" -w -t 600 stop > /dev/null \
        || { tail -30 "$DIR/$1/server.log" >&2; die "stop $1"; }
}

# conn NAME: libpq options for the cluster's socket.
conn() { echo "-h $DIR/$1/sock -p ${PORT[$1]} -U postgres"; }

# sql NAME DB: runs the SQL on stdin, stopping at the first error.
sql() {
    # shellcheck disable=SC2046
    as_pg "${BIN[$1]}/psql" -X -q -v ON_ERROR_STOP=1 $(conn "$1") -d "$2" -f - > /dev/null
}

# value NAME DB QUERY: one value.
value() {
    # shellcheck disable=SC2046
    as_pg "${BIN[$1]}/psql" -X -A -t $(conn "$1") -d "$2" -c "$3"
}

# pgbench NAME ARGS...
pgbench() {
    local name=$1; shift
    # shellcheck disable=SC2046
    as_pg "${BIN[$name]}/pgbench" $(conn "$name") "$@"
}

# done_mark NAME NOTE: marks the cluster complete, recording its version and control state.
done_mark() {
    local name=$1 note=$2 bin=${BIN[$1]}
    {
        echo "cluster: $name"
        echo "version: $("$bin/postgres" --version)"
        echo "built: $(date -u +%FT%TZ)"
        echo "what: $note"
        "$bin/pg_controldata" "$DIR/$name/data" | grep -E 'cluster state|checksum version|Latest checkpoint.s NextXID'
    } > "$DIR/$name/.sweep-ok"
    log "$name: done ($(du -sh "$DIR/$name/data" | cut -f1), $(grep 'cluster state' "$DIR/$name/.sweep-ok" | sed 's/.*: *//'))"
}

wanted() { [[ " $ONLY " == *" $1 "* ]] && [ ! -f "$DIR/$1/.sweep-ok" ]; }

# ---------------------------------------------------------------- the SQL the clusters share

# Every index access method, TOAST, sequences, a matview, an unlogged table, a partitioned table.
SQL_SHAPES=$(cat <<'EOF'
CREATE EXTENSION IF NOT EXISTS bloom;
CREATE SEQUENCE s_plain;
CREATE TABLE shapes (id bigserial PRIMARY KEY, n int, t text, arr int[], pt point, r int4range,
                     tsv tsvector, big text, ident int GENERATED ALWAYS AS IDENTITY);
INSERT INTO shapes (n, t, arr, pt, r, tsv, big)
SELECT g, md5(g::text), ARRAY[g, g % 7, g % 13], point(g % 100, g / 100), int4range(g, g + 10),
       to_tsvector('simple', 'word' || (g % 50) || ' other' || (g % 9)),
       CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 400) END
FROM generate_series(1, 20000) g;
INSERT INTO shapes (n, big) SELECT g, string_agg(md5((g * i)::text), '') FROM generate_series(1, 20) g,
       generate_series(1, 300) i GROUP BY g;   -- compressed and out-of-line TOAST
ALTER TABLE shapes ALTER COLUMN t SET STORAGE EXTERNAL;
INSERT INTO shapes (n, t) SELECT g, repeat('x', 5000) FROM generate_series(1, 30) g;
CREATE INDEX shapes_hash ON shapes USING hash (n);
CREATE INDEX shapes_gist ON shapes USING gist (pt);
CREATE INDEX shapes_gist_range ON shapes USING gist (r);
CREATE INDEX shapes_gin ON shapes USING gin (arr);
CREATE INDEX shapes_gin_tsv ON shapes USING gin (tsv);
CREATE INDEX shapes_spgist ON shapes USING spgist (t);
CREATE INDEX shapes_spgist_pt ON shapes USING spgist (pt);
CREATE INDEX shapes_brin ON shapes USING brin (id) WITH (pages_per_range = 4);
CREATE INDEX shapes_bloom ON shapes USING bloom (n, ident);
CREATE INDEX shapes_expr ON shapes (lower(t)) WHERE n % 2 = 0;
CREATE UNIQUE INDEX shapes_id_n ON shapes (id, n) INCLUDE (ident);
CREATE MATERIALIZED VIEW shapes_mv AS SELECT n % 100 AS k, count(*) AS c FROM shapes GROUP BY 1;
CREATE UNIQUE INDEX shapes_mv_k ON shapes_mv (k);
CREATE UNLOGGED TABLE shapes_unlogged AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 5000) g;
CREATE INDEX ON shapes_unlogged (t);
CREATE TABLE parts (id int, day date, v text) PARTITION BY RANGE (day);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
CREATE TABLE parts_2 PARTITION OF parts FOR VALUES FROM ('2024-02-01') TO ('2024-03-01')
       PARTITION BY HASH (id);
CREATE TABLE parts_2a PARTITION OF parts_2 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE parts_2b PARTITION OF parts_2 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE parts_def PARTITION OF parts DEFAULT;
CREATE INDEX ON parts (id);
INSERT INTO parts SELECT g, date '2024-01-01' + (g % 90), md5(g::text) FROM generate_series(1, 30000) g;
SELECT nextval('s_plain') FROM generate_series(1, 77);
CREATE TABLE empty_t (a int);
CREATE INDEX ON empty_t (a);
-- Rows whose data ends in long runs of zero bytes (zeroed counters, a preallocated blob): the
-- first row of each page sits at its end, so pages end in zeros without being torn.
CREATE TABLE zero_tail (id int, counters bigint[], blob bytea);
INSERT INTO zero_tail SELECT g, array_fill(0::bigint, ARRAY[100]), decode(repeat('00', 1200), 'hex')
FROM generate_series(1, 200) g;
ANALYZE;
EOF
)

# Churn: the write patterns a long-lived database sees.
SQL_CHURN=$(cat <<'EOF'
UPDATE shapes SET n = n + 1, t = md5(t) WHERE id % 3 = 0;
DELETE FROM shapes WHERE id % 11 = 0;
UPDATE shapes SET big = repeat(md5(id::text), 300) WHERE id % 97 = 0;   -- new TOAST, old dead
VACUUM shapes;
ALTER TABLE shapes ADD COLUMN added_const int DEFAULT 42;            -- "fast default": attmissingval
ALTER TABLE shapes ADD COLUMN added_volatile float8 DEFAULT random();   -- rewrites the table
ALTER TABLE shapes DROP COLUMN arr;
INSERT INTO shapes (n, t) SELECT g, 'after-alter' || g FROM generate_series(1, 500) g;
UPDATE parts SET v = upper(v) WHERE id % 5 = 0;
DELETE FROM parts WHERE id % 7 = 0;
VACUUM FULL parts_1;
CLUSTER shapes USING shapes_pkey;
CREATE TABLE to_truncate AS SELECT g FROM generate_series(1, 10000) g;
TRUNCATE to_truncate;
INSERT INTO to_truncate SELECT g FROM generate_series(1, 100) g;
CREATE TABLE shrink AS SELECT g AS id, repeat('y', 200) AS pad FROM generate_series(1, 20000) g;
CREATE INDEX ON shrink (id);
BEGIN; UPDATE shrink SET pad = 'z' WHERE id > 2000; ROLLBACK;   -- aborted tuples at the end
DELETE FROM shrink WHERE id > 2000;
VACUUM shrink;                                              -- truncates the relation
CREATE TABLE aborted_tail AS SELECT g AS id, repeat('a', 100) AS pad FROM generate_series(1, 5000) g;
VACUUM aborted_tail;
BEGIN; UPDATE aborted_tail SET pad = 'b' || pad; ROLLBACK;  -- doubles the table, all aborted
VACUUM aborted_tail;                                        -- removes them and truncates
REFRESH MATERIALIZED VIEW CONCURRENTLY shapes_mv;
REINDEX TABLE shapes_unlogged;
VACUUM (ANALYZE);
CHECKPOINT;
EOF
)

# ---------------------------------------------------------------- a. regression database

# regress_source MAJOR: prints the path of the extracted src/test/regress of PostgreSQL MAJOR.
regress_source() {
    local major=$1 tarball out=$SRC/pg$1
    if [ -d "$out/src/test/regress/sql" ]; then echo "$out/src/test/regress"; return; fi
    mkdir -p "$SRC"
    tarball=$(ls "$SRC"/postgresql-"$major"_*.orig.tar.* 2>/dev/null | head -1 || true)
    if [ -z "$tarball" ]; then
        log "regress$major: fetching the source with apt-get source --download-only postgresql-$major"
        (cd "$SRC" && apt-get source --download-only "postgresql-$major" > "$SRC/apt-$major.log" 2>&1) || true
        tarball=$(ls "$SRC"/postgresql-"$major"_*.orig.tar.* 2>/dev/null | head -1 || true)
    fi
    [ -n "$tarball" ] || tarball=$(fetch_orig_from_archives "$major") || true
    [ -n "$tarball" ] || { log "regress$major: no source tarball in $SRC (see $SRC/apt-$major.log)"; return 1; }
    mkdir -p "$out"
    tar -xf "$tarball" -C "$out" --strip-components=1 --wildcards '*/src/test/regress/*'
    echo "$out/src/test/regress"
}

# fetch_orig_from_archives MAJOR: when apt has no source package for MAJOR (Debian 12 ships
# only 15), the .orig tarball from the Debian and Ubuntu archives whose Sources index lists
# postgresql-MAJOR (15: Debian 12, whose source package apt may fail to fetch when its
# security update left the archive; 14: Ubuntu 22.04, 16: Ubuntu 24.04, 17: Ubuntu 25.10;
# 18: Debian 13, or Debian unstable once 13 dropped it).
# Prints the downloaded path.
fetch_orig_from_archives() {
    local major=$1 index dir file
    for index in http://deb.debian.org/debian/dists/bookworm/main/source/Sources.xz \
                 http://deb.debian.org/debian/dists/trixie/main/source/Sources.xz \
                 http://deb.debian.org/debian/dists/sid/main/source/Sources.xz \
                 http://archive.ubuntu.com/ubuntu/dists/jammy/main/source/Sources.xz \
                 http://archive.ubuntu.com/ubuntu/dists/noble/main/source/Sources.xz \
                 http://archive.ubuntu.com/ubuntu/dists/questing/main/source/Sources.xz; do
        read -r dir file < <(curl -sf "$index" | xz -dc 2>/dev/null | awk -v pkg="postgresql-$major" '
            $0 == "Package: " pkg { p = 1 } p && /^Directory:/ { d = $2 }
            p && / [^ ]*\.orig\.tar\.[a-z0-9]+$/ { f = $NF } p && /^$/ { if (d && f) { print d, f; exit } p = 0 }') || true
        [ -n "${file:-}" ] || continue
        local base=${index%%/dists/*}
        log "regress$major: downloading $base/$dir/$file"
        curl -sf -o "$SRC/$file" "$base/$dir/$file" && { echo "$SRC/$file"; return 0; }
        rm -f "$SRC/$file"
    done
    return 1
}

# build_regress NAME VERSION CHECKSUMS [SQL_MAJOR]: the regression database on the server of
# VERSION, filled by the regression SQL, schedule and pg_regress of SQL_MAJOR (default: the
# server's own major; 19 takes 18's, see regress19 above).
build_regress() {
    local name=$1 ver=$2 sums=$3 major sql_major regress work bin
    bin=$(bindir "$ver")
    major=$("$bin/postgres" --version | sed -E 's/.*\(PostgreSQL\) ([0-9]+).*/\1/')
    sql_major=${4:-$major}
    regress=$(regress_source "$sql_major") || { log "$name: SKIPPED (no source)"; return 0; }
    local pgxs include
    if [ "$sql_major" = "$major" ]; then
        pgxs=$("$bin/pg_config" --pkglibdir)/pgxs
    else
        pgxs=$("$(bindir "$sql_major")/pg_config" --pkglibdir)/pgxs
    fi
    include=$("$bin/pg_config" --includedir-server)
    # A Debian-installed build (19) comes without its server headers: fetch them once.
    if [ ! -f "$include/postgres.h" ] && grep -q '^debian' "$PGROOT/$major/.pgcheckdb-source" 2>/dev/null; then
        log "$name: fetching the server headers of $major (scripts/install-postgres.sh --server-headers $major)"
        bash "$HERE/install-postgres.sh" --server-headers "$major" || die "$name: could not fetch the server headers of $major"
        include=$("$bin/pg_config" --includedir-server)
    fi
    [ -f "$include/postgres.h" ] || { log "$name: SKIPPED (no server headers in $include)"; return 0; }
    pg_init "$name" "$ver" "$sums" max_prepared_transactions 10 max_connections 100
    work=$DIR/$name/regress
    cp -r "$regress" "$work"
    if [ "$sql_major" != "$major" ]; then
        # Left out of the borrowed schedule: 18's join_hash never finishes on 19rc1 here (its
        # parallel hash join rescans over tables created in the same transaction wait for good,
        # the workers in MessageQueueSend, the leader in ExecuteGather; the same query over
        # committed tables takes milliseconds). The test rolls back everything it does, so it
        # would leave nothing in the database.
        sed -i -E 's/^(test:.*) join_hash( |$)/\1\2/' "$work/parallel_schedule"
    fi
    mkdir -p "$work/lib"
    # regress.so against the server's headers; autoinc/refint (contrib/spi) from the installation.
    cc -O2 -fPIC -shared -I"$include" -o "$work/lib/regress.so" "$work/regress.c" 2> "$work/cc.log" \
        || { cat "$work/cc.log" >&2; die "$name: regress.so did not compile"; }
    local libdir; libdir=$("$bin/pg_config" --pkglibdir)
    for so in autoinc refint; do ln -sf "$libdir/$so.so" "$work/lib/$so.so"; done
    [ "$(id -u)" = 0 ] && chown -R "$PG_USER:" "$work"
    pg_start "$name"
    log "$name: pg_regress installcheck ($("$bin/postgres" --version)) ..."
    local pg_regress=$pgxs/src/test/regress/pg_regress
    [ -x "$pg_regress" ] || pg_regress=/usr/lib/postgresql/$sql_major/lib/pgxs/src/test/regress/pg_regress
    # pg_regress's own exit status reflects failed tests, which is fine: the database stays.
    (cd "$work" && as_pg "$pg_regress" --inputdir="$work" --outputdir="$work" --bindir="$bin" \
        --dlpath="$work/lib" --schedule="$work/parallel_schedule" --max-concurrent-tests=20 \
        --host="$DIR/$name/sock" --port="${PORT[$name]}" --user=postgres \
        > "$DIR/$name/pg_regress.log" 2>&1) || true
    grep -E 'tests (passed|failed)|failed \(ignored\)|of .* tests' "$DIR/$name/pg_regress.log" | tail -2 >&2 || true
    [ "$(value "$name" postgres "SELECT count(*) FROM pg_database WHERE datname = 'regression'")" = 1 ] \
        || die "$name: no regression database"
    pg_stop "$name"
    done_mark "$name" "pg_regress parallel_schedule (installcheck) of $sql_major's regression SQL, checksums $sums; $(grep -cE '^(not ok|.* FAILED)' "$DIR/$name/pg_regress.log" || true) failed tests"
}

# ---------------------------------------------------------------- b. pg_upgrade 14 -> 18, 18 -> 19, 14 -> 19

# build_upgrade NAME OLD NEW MODE OLD_CHECKSUMS: made on OLD (the shapes, pgbench; for a 19
# target also foreign-key pgbench and FOR SHARE sessions: multixacts), checksums switched on
# offline with OLD's pg_checksums when OLD_CHECKSUMS is "off", pg_upgrade --MODE to NEW (made
# with checksums), then DML, pgbench and VACUUM on NEW.
build_upgrade() {
    local name=$1 from=$2 to=$3 mode=$4 old_sums=$5 old=$1-old$2
    pg_init "$old" "$from" "$old_sums"
    pg_start "$old"
    sql "$old" postgres <<< "CREATE DATABASE app;"
    sql "$old" app <<< "$SQL_SHAPES"
    sql "$old" app <<'EOF'
UPDATE shapes SET n = n + 1 WHERE id % 5 = 0;
DELETE FROM shapes WHERE id % 17 = 0;
VACUUM shapes;
EOF
    if [ "$to" -ge 19 ]; then
        # Multixacts in the old cluster: 19 widened pg_multixact/offsets to 64 bits and
        # pg_upgrade converts them.
        pgbench "$old" -q -i -s 2 --foreign-keys app > /dev/null 2>&1
        printf '%s\n' '\set id random(1, 20)' 'BEGIN;' \
            'SELECT * FROM pgbench_accounts WHERE aid = :id FOR SHARE;' \
            'SELECT pg_sleep(0.002);' 'COMMIT;' > "$DIR/$old/share.sql"
        [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$DIR/$old/share.sql"
        shared_traffic "$old" 5 app
        sql "$old" app <<< "CHECKPOINT;"
        [ "$(value "$old" app "SELECT next_multixact_id::text::bigint > 1 FROM pg_control_checkpoint()")" = t ] \
            || die "$old: no multixact was made"
    else
        pgbench "$old" -q -i -s 2 app > /dev/null 2>&1
        pgbench "$old" -T 5 -c 2 app > /dev/null 2>&1
    fi
    pg_stop "$old"
    if [ "$old_sums" = off ]; then
        as_pg "${BIN[$old]}/pg_checksums" --enable -D "$DIR/$old/data" > "$DIR/$old/pg_checksums.log" 2>&1 \
            || { cat "$DIR/$old/pg_checksums.log" >&2; die "$old: pg_checksums --enable"; }
    fi
    # New cluster with checksums, as the old one has now; pg_upgrade runs in its own directory.
    pg_init "$name" "$to" on
    local work=$DIR/$name/upgrade-work
    mkdir -p "$work"; [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$work"
    log "$name: pg_upgrade --$mode $from -> $to ..."
    (cd "$work" && as_pg "${BIN[$name]}/pg_upgrade" -b "${BIN[$old]}" -B "${BIN[$name]}" \
        -d "$DIR/$old/data" -D "$DIR/$name/data" -U postgres "--$mode" \
        -p "${PORT[$old]}" -P "${PORT[$name]}" -s "$work" > "$DIR/$name/pg_upgrade.log" 2>&1) \
        || { tail -30 "$DIR/$name/pg_upgrade.log" >&2; die "pg_upgrade"; }
    pg_start "$name"
    # shellcheck disable=SC2046
    as_pg "${BIN[$name]}/vacuumdb" $(conn "$name") --all --analyze-in-stages > /dev/null 2>&1
    sql "$name" app <<EOF
INSERT INTO shapes (n, t) SELECT g, 'on-$to-' || g FROM generate_series(1, 3000) g;
UPDATE shapes SET t = t || '!' WHERE id % 4 = 0;
DELETE FROM shapes WHERE id % 23 = 0;
UPDATE shapes SET big = repeat('q', 9000) WHERE id % 101 = 0;
INSERT INTO shapes_unlogged SELECT g, 'x' FROM generate_series(5001, 6000) g;
REFRESH MATERIALIZED VIEW shapes_mv;
SELECT nextval('s_plain');
VACUUM;
EOF
    pgbench "$name" -T 5 -c 2 app > /dev/null 2>&1
    sql "$name" app <<< "VACUUM ANALYZE;"
    pg_stop "$name"
    # --link: the old cluster's files are the new one's; --copy: the old cluster is left as it
    # was. Either way the old directory is not a cluster to sweep.
    rm -rf "${DIR:?}/$old"
    local note="made on $from"
    if [ "$old_sums" = off ]; then note+=" without checksums, pg_checksums --enable on $from"; else note+=" with checksums"; fi
    if [ "$to" -ge 19 ]; then note+=" (foreign-key pgbench and FOR SHARE sessions: multixacts)"; fi
    done_mark "$name" "$note, pg_upgrade --$mode to $to, DML + pgbench + VACUUM on $to"
}

# ---------------------------------------------------------------- c. standby shut down in recovery

build_standby() {
    local primary=standby17-primary name=standby17
    pg_init "$primary" 17 on max_prepared_transactions 10 wal_level replica
    pg_start "$primary"
    pgbench "$primary" -q -i -s 5 postgres > /dev/null 2>&1
    pgbench "$primary" -T 5 -c 2 postgres > /dev/null 2>&1
    rm -rf "${DIR:?}/$name"; mkdir -p "$DIR/$name"; chmod 0700 "$DIR/$name"
    [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$DIR/$name"
    # shellcheck disable=SC2046
    as_pg "${BIN[$primary]}/pg_basebackup" $(conn "$primary") -D "$DIR/$name/data" -R -X stream -c fast
    pg_adopt "$name" 17
    # pg_basebackup -R writes every libpq option it knows; the server's walreceiver may load an
    # older libpq that rejects some (e.g. sslnegotiation): a plain conninfo, which wins (later line).
    echo "primary_conninfo = 'host=$DIR/$primary/sock port=${PORT[$primary]} user=postgres'" \
        >> "$DIR/$name/data/postgresql.auto.conf"
    pg_start "$name"
    log "$name: pgbench on the primary, an open transaction and a prepared one ..."
    pgbench "$primary" -T 25 -c 2 postgres > "$DIR/$name/pgbench.log" 2>&1 &
    local bench=$!
    # A long-running transaction that holds an xid (it ends when the primary stops).
    # shellcheck disable=SC2046
    as_pg "${BIN[$primary]}/psql" -X $(conn "$primary") -d postgres \
        -c "BEGIN; CREATE TABLE long_open (a int); INSERT INTO long_open SELECT generate_series(1, 1000); SELECT pg_sleep(3600); COMMIT;" \
        > /dev/null 2>&1 &
    local long=$!
    sleep 3
    sql "$primary" postgres <<'EOF'
BEGIN;
CREATE TABLE prepared_t (id int PRIMARY KEY, v text);
INSERT INTO prepared_t SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
PREPARE TRANSACTION 'sweep_prepared';
EOF
    sleep 4
    # A checkpoint on the primary mid-traffic, as checkpoint_timeout would make: the standby's
    # restartpoint then writes pages holding xids newer than its pg_control's nextXid.
    sql "$primary" postgres <<< "CHECKPOINT;"
    sleep 6
    local want; want=$(value "$primary" postgres "SELECT pg_current_wal_lsn()")
    local caught_up=f
    for _ in $(seq 60); do
        caught_up=$(value "$name" postgres "SELECT pg_last_wal_replay_lsn() >= '$want'")
        [ "$caught_up" = t ] && break
        sleep 1
    done
    [ "$caught_up" = t ] || { tail -20 "$DIR/$name/server.log" >&2; die "$name: standby did not catch up"; }
    # CHECKPOINT on the standby: a restartpoint, as a long-running standby would have had.
    value "$name" postgres "CHECKPOINT" > /dev/null
    pg_stop "$name"        # while the primary still runs pgbench
    wait "$bench" || true
    pg_stop "$primary"
    wait "$long" || true
    done_mark "$name" "streaming standby of 17, stopped during pgbench with an open and a prepared transaction on the primary"
    done_mark "$primary" "primary of standby17: pgbench, a prepared transaction left (CREATE TABLE in it), clean stop"
}

# ---------------------------------------------------------------- d. crash recovery

build_crash() {
    local name=crash16
    pg_init "$name" 16 on
    pg_start "$name"
    pgbench "$name" -q -i -s 5 postgres > /dev/null 2>&1
    sql "$name" postgres <<< "$SQL_SHAPES"
    pgbench "$name" -T 30 -c 2 postgres > "$DIR/$name/pgbench.log" 2>&1 &
    local bench=$!
    sql "$name" postgres <<< "UPDATE shapes SET n = n + 1 WHERE id % 2 = 0; CHECKPOINT;"
    sleep 6
    sql "$name" postgres <<< "DELETE FROM shapes WHERE id % 9 = 0; INSERT INTO shapes (n, big) SELECT g, repeat('w', 8000) FROM generate_series(1, 50) g;"
    log "$name: pg_ctl stop -m immediate during pgbench"
    pg_stop "$name" immediate
    wait "$bench" || true
    pg_start "$name"       # crash recovery
    grep -q 'redo done' "$DIR/$name/server.log" || die "$name: no crash recovery in the log"
    sql "$name" postgres <<< "VACUUM pgbench_accounts;"
    pg_stop "$name"
    done_mark "$name" "16 with checksums, stop -m immediate during pgbench, crash recovery, clean stop"
}

build_crashed() {
    local name=crashed18
    pg_init "$name" 18 off
    pg_start "$name"
    pgbench "$name" -q -i -s 5 postgres > /dev/null 2>&1
    sql "$name" postgres <<< "$SQL_SHAPES"
    sql "$name" postgres <<< "CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, t text); CHECKPOINT;"
    pgbench "$name" -T 60 -c 2 postgres > "$DIR/$name/pgbench.log" 2>&1 &
    local bench=$!
    local i
    for i in 2 3 4 5 6 7; do
        sql "$name" postgres <<< "CREATE TABLE churn$i AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 5000) g;
CREATE INDEX CONCURRENTLY churn${i}_t ON churn$i (t);
INSERT INTO ul SELECT g + $i * 10000, md5(g::text) FROM generate_series(1, 2000) g;
UPDATE shapes SET n = n + 1 WHERE id % 3 = $((i % 3));
TRUNCATE churn$i;
VACUUM FULL pgbench_tellers;
DROP TABLE IF EXISTS churn$((i - 1));"
    done
    log "$name: pg_ctl stop -m immediate during pgbench and DDL"
    pg_stop "$name" immediate
    wait "$bench" || true
    done_mark "$name" "18 without checksums, stop -m immediate during pgbench and DDL, not recovered"
}

# ---------------------------------------------------------------- e. no checksums, churned

build_nochecks() {
    local name=$1 ver=$2
    pg_init "$name" "$ver" off
    pg_start "$name"
    pgbench "$name" -q -i -s 3 postgres > /dev/null 2>&1
    pgbench "$name" -T 8 -c 2 postgres > /dev/null 2>&1
    sql "$name" postgres <<< "$SQL_SHAPES"
    sql "$name" postgres <<< "$SQL_CHURN"
    sql "$name" postgres <<< "VACUUM FULL pgbench_history; CLUSTER pgbench_accounts USING pgbench_accounts_pkey; TRUNCATE pgbench_history;"
    pgbench "$name" -T 5 -c 2 postgres > /dev/null 2>&1
    pg_stop "$name"
    done_mark "$name" "no checksums, pgbench + churn (VACUUM FULL, CLUSTER, TRUNCATE, ALTER TABLE, aborted UPDATE + truncating VACUUM)"
}

# ---------------------------------------------------------------- f. many relations

build_many() {
    local name=many18
    pg_init "$name" 18 on max_locks_per_transaction 256
    pg_start "$name"
    log "$name: 5,000 tables with an index each ..."
    # shellcheck disable=SC2046
    as_pg "${BIN[$name]}/psql" -X -q -v ON_ERROR_STOP=1 $(conn "$name") -d postgres > /dev/null <<'EOF'
SELECT format('CREATE TABLE many_%s (id int PRIMARY KEY, v text); INSERT INTO many_%s SELECT g, md5(g::text) FROM generate_series(1, %s) g',
              i, i, 1 + i % 20)
FROM generate_series(1, 5000) i \gexec
VACUUM;
EOF
    pg_stop "$name"
    done_mark "$name" "18 with checksums, 5,000 tables with a primary key index each"
}

# ---------------------------------------------------------------- g. everyday features

# shared_traffic NAME SECONDS [DB]: FOR SHARE sessions beside foreign-key pgbench (multixacts).
shared_traffic() {
    local db=${3:-postgres}
    pgbench "$1" -n -T "$2" -c 4 -f "$DIR/$1/share.sql" "$db" > /dev/null 2>&1 &
    local share=$!
    pgbench "$1" -T "$2" -c 3 "$db" > /dev/null 2>&1
    wait "$share"
}

build_features() {
    local name=features16
    pg_init "$name" 16 off max_prepared_transactions 5
    local space=$DIR/$name/tablespace
    mkdir -p "$space"; [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$space"
    pg_start "$name"
    pgbench "$name" -q -i -s 2 --foreign-keys postgres > /dev/null 2>&1
    # Row locks from several sessions on few rows: multixact xmax values.
    printf '%s\n' '\set id random(1, 20)' 'BEGIN;' \
        'SELECT * FROM pgbench_accounts WHERE aid = :id FOR SHARE;' \
        'SELECT pg_sleep(0.002);' 'COMMIT;' > "$DIR/$name/share.sql"
    [ "$(id -u)" = 0 ] && chown "$PG_USER:" "$DIR/$name/share.sql"
    shared_traffic "$name" 8
    sql "$name" postgres <<EOF
CREATE TABLESPACE outside LOCATION '$space';
CREATE TABLE frozen (id int, v text);
BEGIN;
TRUNCATE frozen;
COPY frozen FROM PROGRAM 'seq 1 20000 | sed "s/\$/\tv/"' WITH (FREEZE);
COMMIT;
SELECT lo_from_bytea(0, decode(repeat('ab', 50000), 'hex')) FROM generate_series(1, 5);
CREATE TABLE dup (id int);
INSERT INTO dup SELECT g % 1000 FROM generate_series(1, 5000) g;
CREATE INDEX dup_ok ON dup (id);
REINDEX INDEX CONCURRENTLY dup_ok;
CREATE TABLE moved (id int PRIMARY KEY, v text) TABLESPACE outside;
INSERT INTO moved SELECT g, md5(g::text) FROM generate_series(1, 3000) g;
ALTER TABLE pgbench_history SET TABLESPACE outside;
CREATE TABLE toggled AS SELECT g AS id FROM generate_series(1, 3000) g;
ALTER TABLE toggled SET UNLOGGED;
ALTER TABLE toggled SET LOGGED;
CREATE TABLE filled (id int, v text) WITH (fillfactor = 50);
INSERT INTO filled SELECT g, 'v' FROM generate_series(1, 5000) g;
UPDATE filled SET v = 'w';
VACUUM FREEZE;
EOF
    # A failed unique build leaves an invalid index behind (outside a transaction block).
    sql "$name" postgres <<< "CREATE UNIQUE INDEX CONCURRENTLY dup_unique ON dup (id);" 2> /dev/null || true
    [ "$(value "$name" postgres "SELECT count(*) FROM pg_index WHERE NOT indisvalid")" -ge 1 ] \
        || die "$name: no invalid index was left"
    shared_traffic "$name" 5     # after VACUUM FREEZE, so multixacts stay on disk
    pg_stop "$name"
    as_pg "${BIN[$name]}/pg_checksums" --enable -D "$DIR/$name/data" > "$DIR/$name/pg_checksums.log" 2>&1 \
        || { cat "$DIR/$name/pg_checksums.log" >&2; die "$name: pg_checksums --enable"; }
    done_mark "$name" "16, foreign-key pgbench (multixacts), FOR SHARE, COPY FREEZE, large objects, invalid index, REINDEX CONCURRENTLY, SET UNLOGGED/LOGGED, outside tablespace, VACUUM FREEZE, then pg_checksums --enable"
}

# ---------------------------------------------------------------- main

for c in $ONLY; do
    wanted "$c" || { [ -f "$DIR/$c/.sweep-ok" ] && log "$c: already built"; continue; }
    log "$c: building in $DIR/$c"
    case $c in
        regress15) build_regress regress15 debian15 off ;;
        regress18) build_regress regress18 18 on ;;
        regress14) build_regress regress14 14 on ;;
        regress16) build_regress regress16 16 off ;;
        regress17) build_regress regress17 17 on ;;
        regress19) build_regress regress19 19 on 18 ;;
        upgrade14to18) build_upgrade upgrade14to18 14 18 link on ;;
        upgrade18to19) build_upgrade upgrade18to19 18 19 copy on ;;
        upgrade14to19) build_upgrade upgrade14to19 14 19 link off ;;
        standby17) build_standby ;;
        crash16) build_crash ;;
        crashed18) build_crashed ;;
        nochecks14) build_nochecks nochecks14 14 ;;
        nochecks18) build_nochecks nochecks18 18 ;;
        many18) build_many ;;
        features16) build_features ;;
        *) die "unknown cluster $c" ;;
    esac
done

cp "$HERE/sweep-run.sh" "$DIR/run.sh"
chmod +x "$DIR/run.sh"
log "clusters in $DIR; run: $DIR/run.sh /path/to/pgcheckdb"
