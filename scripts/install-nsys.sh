#!/usr/bin/env bash
# Install NVIDIA Nsight Systems (the `nsys` CLI) from Debian's non-free
# component into <repo>/.nsys/, two versions side by side:
#
#   .nsys/2022.4/nsys   Nsight Systems 2022.4.2  (Debian bookworm, nsight-systems 2022.4.2.1~11.8.0)
#   .nsys/2023.4/nsys   Nsight Systems 2023.4.4  (Debian trixie,   nsight-systems 2023.4.4.54~12.4.1)
#
# Each .nsys/<ver>/ holds NVIDIA's usual layout (target-linux-x64/,
# host-linux-x64/) plus an executable wrapper .nsys/<ver>/nsys that execs
# target-linux-x64/nsys. Nothing here is committed: /.nsys/ is in .gitignore.
#
# Usage:
#   scripts/install-nsys.sh [--check] [--force] [--quiet] [--libs-only] [VERSION...]
#     VERSION   2022.4 and/or 2023.4 (default: both)
#     --check   after installing, record a CPU-only capture with each version
#               (python nvtx==0.2.11 in a cached venv .nsys/venv-nvtx-0.2.11),
#               export it to SQLite, check NVTX_EVENTS holds the ranges and
#               run `nsys stats` on the export
#     --force   reinstall even if already installed
#     --quiet   print only the nsys paths (stdout)
#     --libs-only  fetch only the bundled libraries into .nsys/.deps/lib and
#               print that folder (tests/test_install_nsys.py uses it)
#   Env: NSYS_DIR (default <repo>/.nsys), NSYS_APT_MIRROR (default
#        http://deb.debian.org/debian), NSYS_APT_KEYRING (default
#        /usr/share/keyrings/debian-archive-keyring.gpg).
#
# On success it prints the path of each working nsys wrapper, one per line, on
# stdout. An installed version is recognised by its stamp file: no network, a
# few milliseconds. A fresh install of both downloads 346 MiB (362 MB) of
# Nsight .debs (deleted afterwards), 3 MB of bundled libraries and the package
# lists of two suites, takes ~24 s with a fast mirror and leaves 1.3 GB in
# .nsys/ (591 MB for 2022.4, 651 MB for 2023.4; the nvtx venvs made by --check
# and the tests add 64 MB).
#
# The machine's apt state is neither touched nor consulted: apt runs with a
# private sources list (one suite, components non-free and main), private
# lists and cache under .nsys/.apt/<suite>/, an empty package status of its own
# (so the packages the machine has installed, at whatever version, say a
# libssh-4 from bookworm-security, never become the version asked for: apt
# would pick the installed version as the candidate and find no source for it
# in these lists) and no default release; only `apt-get update` +
# `apt-get download`, of the versions these lists hold; the .debs are unpacked
# with dpkg -x. The machine's own apt configuration (a proxy, say) still
# applies. Runs as root (apt-get download as another user also works if it may
# write .nsys/).
#
# Fixes applied to the Debian layout so the CLI works outside /usr:
#  - target-linux-x64 is moved out of usr/lib/x86_64-linux-gnu/nsight-systems/
#    next to host-linux-x64 (nsys looks for QdstrmImporter in
#    <target>/../host-linux-x64);
#  - host-linux-x64/libssh.so (a link into /usr/lib) is replaced by a copy of
#    libssh.so.4. It and the other non-base libraries the CLI links to are
#    bundled from Debian bookworm's main (libssh-4, libpfm4, the krb5/gssapi
#    libraries and libcrypto from libssl3 into host-linux-x64/; libelf1 into
#    target-linux-x64/): QdstrmImporter and nsys have RPATH $ORIGIN, so no
#    LD_LIBRARY_PATH is needed, nothing leaks into the profiled program, and a
#    bare Debian 12/13 or Ubuntu 24.04 needs no extra package (python3 is still
#    needed for `nsys stats`);
#  - host-linux-x64/python/lib gets the target's python/lib/*.py
#    (`nsys stats` in 2023.4 imports nsysstats from there).
# The 2022.4 wrapper also adds --sample=none --cpuctxsw=none to `profile` and
# `start` (see the comment in wrapper_text below).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${NSYS_DIR:-$ROOT/.nsys}
MIRROR=${NSYS_APT_MIRROR:-http://deb.debian.org/debian}
KEYRING=${NSYS_APT_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
NVTX_VERSION=0.2.11
LAYOUT=2   # bump when the layout below changes: older installs are redone

# Bundled libraries: Debian bookworm packages -> sonames, and where they go.
DEP_SUITE=bookworm
DEP_PKGS="libssh-4 libpfm4 libelf1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libssl3"
HOST_LIBS="libssh.so.4 libpfm.so.4 libgssapi_krb5.so.2 libkrb5.so.3 libk5crypto.so.3 libkrb5support.so.0 libkeyutils.so.1 libcom_err.so.2 libcrypto.so.3"
TARGET_LIBS="libelf.so.1"

CHECK=0 FORCE=0 QUIET=0 LIBS_ONLY=0 VERSIONS=()
for a in "$@"; do
  case $a in
    --check) CHECK=1 ;;
    --force) FORCE=1 ;;
    --quiet|-q) QUIET=1 ;;
    --libs-only) LIBS_ONLY=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    2022.4|2023.4) VERSIONS+=("$a") ;;
    *) echo "install-nsys: unknown argument: $a (try --help)" >&2; exit 2 ;;
  esac
done
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2022.4 2023.4)

log() { [ "$QUIET" = 1 ] || echo "install-nsys: $*" >&2; }
die() { echo "install-nsys: ERROR: $*" >&2; exit 1; }

suite_of()  { case $1 in 2022.4) echo bookworm ;; 2023.4) echo trixie ;; esac; }
# Debian package version prefix we insist on.
pkgver_of() { case $1 in 2022.4) echo '2022.4.2.' ;; 2023.4) echo '2023.4.4.' ;; esac; }

mkdir -p "$DEST"
# Serialise concurrent runs (e.g. parallel test workers).
exec 9>"$DEST/.lock"
flock 9

apt_opts() { # $1 = suite
  local d=$DEST/.apt/$1
  echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null" \
       "-o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache" \
       "-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null" \
       "-o Dir::State::status=$d/status -o APT::Default-Release=" \
       "-o APT::Sandbox::User=root -o Acquire::Languages=none"
}

UPDATED=" "
apt_update() { # $1 = suite; once per run
  case $UPDATED in *" $1 "*) return 0 ;; esac
  local d=$DEST/.apt/$1
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  : >"$d/status"
  echo "deb [signed-by=$KEYRING] $MIRROR $1 non-free main" >"$d/sources.list"
  log "apt-get update ($1 non-free main, private lists in $d)"
  # shellcheck disable=SC2046
  apt-get -q $(apt_opts "$1") update >"$d/update.log" 2>&1 \
    || { cat "$d/update.log" >&2; die "apt-get update for $1 failed"; }
  UPDATED="$UPDATED$1 "
}

apt_download() { # $1 = suite, $2 = dir, rest = packages
  local suite=$1 dir=$2; shift 2
  log "apt-get download $* ($suite)"
  # shellcheck disable=SC2046
  (cd "$dir" && apt-get -q $(apt_opts "$suite") download "$@") >"$dir/download.log" 2>&1 \
    || { cat "$dir/download.log" >&2; die "apt-get download $* ($suite) failed"; }
}

# The bundled libraries, unpacked once into $DEST/.deps/lib.
fetch_deps() {
  local lib=$DEST/.deps/lib so
  if [ -f "$DEST/.deps/.done" ] && [ "$(cat "$DEST/.deps/.done")" = "$DEP_PKGS" ]; then return 0; fi
  apt_update "$DEP_SUITE"
  rm -rf "$DEST/.deps"
  mkdir -p "$DEST/.deps/dl" "$DEST/.deps/stage" "$lib"
  # shellcheck disable=SC2086
  apt_download "$DEP_SUITE" "$DEST/.deps/dl" $DEP_PKGS
  for deb in "$DEST/.deps/dl"/*.deb; do dpkg -x "$deb" "$DEST/.deps/stage"; done
  for so in $HOST_LIBS $TARGET_LIBS; do
    local f
    f=$(find "$DEST/.deps/stage" -name "$so" | head -n1)
    [ -n "$f" ] || die "$so not found in $DEP_PKGS"
    cp -L "$f" "$lib/$so"
  done
  mkdir -p "$DEST/.deps/doc"
  cp -r "$DEST/.deps/stage/usr/share/doc/." "$DEST/.deps/doc/" 2>/dev/null || true
  rm -rf "$DEST/.deps/dl" "$DEST/.deps/stage"
  echo "$DEP_PKGS" >"$DEST/.deps/.done"
}

installed_ok() { # $1 = dir
  [ -f "$1/.installed" ] && grep -q " layout=$LAYOUT\$" "$1/.installed" \
    && [ -x "$1/nsys" ] && [ -x "$1/target-linux-x64/nsys" ] \
    && [ -x "$1/host-linux-x64/QdstrmImporter" ] && [ -e "$1/host-linux-x64/libssh.so" ] \
    && [ -f "$1/host-linux-x64/python/lib/nsysstats.py" ]
}

# The wrapper .nsys/<ver>/nsys. It sets no LD_LIBRARY_PATH (that would leak
# into the profiled program): the bundled libraries are found through RPATH.
wrapper_text() { # $1 = version
  cat <<'EOF'
#!/bin/sh
# Wrapper generated by scripts/install-nsys.sh: runs this Nsight Systems CLI.
here=$(dirname "$(readlink -f "$0")")
real="$here/target-linux-x64/nsys"
EOF
  if [ "$1" = 2022.4 ]; then
    cat <<'EOF'
# nsys 2022.4 on current kernels (seen on 6.18): with CPU sampling or CPU
# context-switch tracing on (both are on by default), the agent process often
# busy-loops on its perf_event fds after the profiled program exits (epoll
# keeps reporting EPOLLHUP) and `nsys profile` never returns; the agent
# (`nsys --start-agent --session-name=profile-...`) is left spinning. So
# `profile` and `start` get --sample=none and --cpuctxsw=none unless the caller
# passes -s/--sample/--cpuctxsw itself (anywhere on the line), or sets
# NSYS_WRAPPER_RAW=1.
if [ "${NSYS_WRAPPER_RAW:-0}" != 1 ] && { [ "${1:-}" = profile ] || [ "${1:-}" = start ]; }; then
  sub=$1; shift
  extra_s=--sample=none extra_c=--cpuctxsw=none
  for a in "$@"; do
    case $a in
      -s|-s=*|--sample|--sample=*) extra_s= ;;
      --cpuctxsw|--cpuctxsw=*) extra_c= ;;
    esac
  done
  exec "$real" "$sub" $extra_s $extra_c "$@"
fi
EOF
  fi
  # shellcheck disable=SC2016
  echo 'exec "$real" "$@"'
}

write_wrapper() { # $1 = dir, $2 = version; rewrites it only when it differs
  local want
  want=$(wrapper_text "$2")
  if [ ! -x "$1/nsys" ] || [ "$(cat "$1/nsys")" != "$want" ]; then
    printf '%s\n' "$want" >"$1/.nsys.tmp"
    chmod 755 "$1/.nsys.tmp"
    mv -f "$1/.nsys.tmp" "$1/nsys"
  fi
}

install_one() { # $1 = 2022.4 | 2023.4
  local ver=$1 suite prefix dir stage new dl pv
  suite=$(suite_of "$ver"); prefix=$(pkgver_of "$ver")
  dir=$DEST/$ver
  if [ "$FORCE" = 0 ] && installed_ok "$dir"; then
    write_wrapper "$dir" "$ver"
    log "$ver already installed ($(cat "$dir/.installed"))"
    return 0
  fi
  local t0=$SECONDS
  fetch_deps
  apt_update "$suite"
  # Candidate version of nsight-systems in that suite; host and target must match.
  # shellcheck disable=SC2046
  pv=$(apt-cache $(apt_opts "$suite") show --no-all-versions nsight-systems 2>/dev/null \
        | sed -n 's/^Version: //p' | head -n1)
  [ -n "$pv" ] || die "nsight-systems not found in $suite non-free"
  case $pv in "$prefix"*) ;; *) die "$suite offers nsight-systems $pv, expected $prefix*" ;; esac

  dl=$DEST/.dl-$ver stage=$DEST/.stage-$ver new=$DEST/.new-$ver
  rm -rf "$dl" "$stage" "$new"
  mkdir -p "$dl" "$stage" "$new"
  apt_download "$suite" "$dl" "nsight-systems=$pv" "nsight-systems-target=$pv"
  log "unpacking $(du -sh "$dl" | cut -f1) of .debs"
  local deb
  for deb in "$dl"/*.deb; do dpkg -x "$deb" "$stage"; done

  local tgt=$stage/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64
  local host=$stage/usr/lib/nsight-systems/host-linux-x64
  [ -x "$tgt/nsys" ] || die "no target-linux-x64/nsys in the .debs (layout changed?)"
  [ -x "$host/QdstrmImporter" ] || die "no host-linux-x64/QdstrmImporter in the .debs (layout changed?)"
  mv "$tgt" "$new/target-linux-x64"
  mv "$host" "$new/host-linux-x64"
  local H=$new/host-linux-x64 T=$new/target-linux-x64 so
  # Bundled libraries (the Debian layout has libssh.so -> /usr/lib/.../libssh.so.4).
  rm -f "$H/libssh.so" "$H/libssh.so.4"
  for so in $HOST_LIBS; do cp "$DEST/.deps/lib/$so" "$H/$so"; done
  for so in $TARGET_LIBS; do cp "$DEST/.deps/lib/$so" "$T/$so"; done
  ln -s libssh.so.4 "$H/libssh.so"
  mkdir -p "$new/bundled-libs-doc"
  cp -r "$DEST/.deps/doc/." "$new/bundled-libs-doc/"
  # nsys stats: host-linux-x64/python/lib must hold nsysstats.py & co.
  mkdir -p "$H/python/lib"
  cp -n "$T/python/lib/"*.py "$H/python/lib/"
  local dangling
  dangling=$(find "$new" -xtype l)
  [ -z "$dangling" ] || die "dangling symlinks after unpacking: $dangling"

  write_wrapper "$new" "$ver"

  local missing
  missing=$( { ldd "$T/nsys"; ldd "$H/QdstrmImporter"; } 2>&1 | grep 'not found' | sort -u || true)
  [ -z "$missing" ] || die "nsys $ver needs system libraries that are missing:
$missing"
  "$new/nsys" --version >/dev/null || die "$new/nsys --version failed"

  echo "$pv ($suite) layout=$LAYOUT" >"$new/.installed"
  # Swap in with a short window (callers may be using the old tree).
  if [ -e "$dir" ]; then mv "$dir" "$DEST/.old-$ver-$$"; fi
  mv "$new" "$dir"
  rm -rf "$DEST/.old-$ver-$$" "$dl" "$stage"
  log "$ver installed: $("$dir/nsys" --version) in $((SECONDS - t0)) s"
}

check_one() { # $1 = 2022.4 | 2023.4 ; $2 = venv python
  local ver=$1 py=$2 nsys=$DEST/$1/nsys tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/nsys-check.XXXXXX")
  log "check $ver: profile -t nvtx,osrt / export --type sqlite / stats"
  timeout 300 "$nsys" profile -t nvtx,osrt --sample=none --cpuctxsw=none -o "$tmp/cap" --force-overwrite true \
      "$py" -c '
import nvtx
for i in range(3):
    nvtx.push_range("outer%d" % i, domain="clef")
    nvtx.push_range("inner", domain="clef")
    nvtx.pop_range(domain="clef")
    nvtx.pop_range(domain="clef")
' </dev/null >"$tmp/profile.log" 2>&1 \
    || { cat "$tmp/profile.log" >&2; die "nsys $ver profile failed"; }
  timeout 300 "$nsys" export --type sqlite --quiet true --force-overwrite true -o "$tmp/cap.sqlite" "$tmp/cap.nsys-rep" \
      </dev/null >"$tmp/export.log" 2>&1 \
    || { cat "$tmp/export.log" >&2; die "nsys $ver export failed"; }
  local n
  n=$("$py" -c '
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("""select count(*) from NVTX_EVENTS e join StringIds s on s.id = e.textId
                    where e.eventType = 59 and (s.value like "outer%" or s.value = "inner")""").fetchone()[0])
' "$tmp/cap.sqlite") || die "nsys $ver: could not read NVTX_EVENTS"
  [ "$n" = 6 ] || die "nsys $ver: expected 6 NVTX push/pop ranges (eventType 59), found $n"
  # shellcheck disable=SC2015
  timeout 300 "$nsys" stats --report osrtsum --format csv -o - "$tmp/cap.sqlite" </dev/null >"$tmp/stats.log" 2>&1 \
      && ! grep -q 'ERROR' "$tmp/stats.log" \
    || { cat "$tmp/stats.log" >&2; die "nsys $ver stats failed"; }
  rm -rf "$tmp"
  log "check $ver: OK (6 NVTX ranges recorded, stats ran)"
}

if [ "$LIBS_ONLY" = 1 ]; then
  fetch_deps
  echo "$DEST/.deps/lib"
  exit 0
fi
for v in "${VERSIONS[@]}"; do install_one "$v"; done
# Release the lock: nsys agents started by --check must not inherit it.
exec 9>&-

if [ "$CHECK" = 1 ]; then
  venv=$DEST/venv-nvtx-$NVTX_VERSION
  if ! "$venv/bin/python" -c 'import nvtx' 2>/dev/null; then
    log "creating $venv (pip install nvtx==$NVTX_VERSION)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "nvtx==$NVTX_VERSION" >&2
  fi
  for v in "${VERSIONS[@]}"; do check_one "$v" "$venv/bin/python"; done
fi

for v in "${VERSIONS[@]}"; do echo "$DEST/$v/nsys"; done
