#!/usr/bin/env bash
# nixl.sh finds a NIXL for the nixl transport (plugins/nixl), which binds
# NIXL's C API (libnixl_capi.so, declared in the header NIXL ships with its
# Rust bindings, wrapper.h):
#
#   NIXL_PREFIX     a NIXL install (libnixl_capi.so under lib/, lib64 or
#                   lib/<triplet>, its backend plugins in plugins/ beside it)
#   pkg-config      else the prefix of pkg-config's nixl
#   .nixl           else NIXL from the package registries, once installed
#                   by "nixl.sh registry"
#
# The C API's header comes from the crates registry's nixl-sys of the same
# version as the library (NIXL_VERSION; for an install without a nixl.pc,
# set it), checked against the registry index's checksum; NIXL_CAPI_INCLUDE
# names a directory holding wrapper.h instead.
#
#   nixl.sh registry      install NIXL from the registries into .nixl (once):
#                         the nixl-cu12 wheel (libraries, UCX and backend
#                         plugins) and nixl-sys's header; print its libdir
#   nixl.sh need          the same, unless NIXL_PREFIX or pkg-config names
#                         a NIXL
#   nixl.sh env           print the cgo flags (export lines) to build with
#                         -tags nixl, or, on stderr, why NIXL was not found
#                         (exit 1)
#   nixl.sh build GO BIN  build BIN/custody-transport-nixl and
#                         BIN/custody-nixl-reference (custody bench's
#                         NIXL-direct reference), or print one line saying
#                         why they were skipped (exit 0)
set -euo pipefail
cd "$(dirname "$0")/.."

# The registry's NIXL: the version vLLM's NixlConnector runs on here too
# (python/requirements-dev.txt).
registry_version=1.5.1
registry_dir=.nixl/nixl-cu12-$registry_version
registry_libdir=$PWD/$registry_dir/.nixl_cu12.mesonpy.libs

# header_dir VERSION prints a directory holding nixl-sys VERSION's wrapper.h,
# fetching the crate from the crates registry once.
header_dir() {
  local version=$1 dir=.nixl/nixl-sys-$1
  if [ ! -f "$dir/wrapper.h" ]; then
    local crate want got
    crate=$(mktemp)
    # The index line of that version carries the crate's sha256.
    want=$(curl -fsSL --retry 3 https://index.crates.io/ni/xl/nixl-sys |
      grep -E "\"vers\": *\"$version\"" | sed -n 's/.*"cksum": *"\([0-9a-f]*\)".*/\1/p')
    if [ -z "$want" ]; then
      echo "nixl.sh: the crates registry has no nixl-sys $version (the C API header of NIXL $version)" >&2
      rm -f "$crate"
      return 1
    fi
    curl -fsSL --retry 3 -o "$crate" "https://static.crates.io/crates/nixl-sys/$version/download"
    got=$(sha256sum "$crate" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "nixl.sh: nixl-sys $version from the crates registry has sha256 $got, its index says $want" >&2
      rm -f "$crate"
      return 1
    fi
    mkdir -p "$dir"
    tar -xzf "$crate" -C "$dir" --strip-components=1 "nixl-sys-$version/wrapper.h"
    rm -f "$crate"
  fi
  echo "$PWD/$dir"
}

registry() {
  if [ ! -f "$registry_libdir/libnixl_capi.so" ]; then
    ./scripts/python.sh >&2
    "$(./scripts/python.sh path)" -m pip install -q --disable-pip-version-check --no-deps \
      --target "$registry_dir" "nixl-cu12==$registry_version" >&2
  fi
  header_dir "$registry_version" >/dev/null
  echo "$registry_libdir"
}

why=""
find_nixl() {
  local prefix="${NIXL_PREFIX:-}" version="${NIXL_VERSION:-}" include="${NIXL_CAPI_INCLUDE:-}"
  if [ -z "$prefix" ] && pkg-config --exists nixl 2>/dev/null; then
    prefix="$(pkg-config --variable=prefix nixl)"
    version="${version:-$(pkg-config --modversion nixl)}"
  fi
  libdir=""
  if [ -n "$prefix" ]; then
    for d in "$prefix/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)" "$prefix/lib64" "$prefix/lib"; do
      if [ -e "$d/libnixl_capi.so" ]; then libdir="$d"; break; fi
    done
    if [ -z "$libdir" ]; then
      why="NIXL_PREFIX=$prefix has no libnixl_capi.so (NIXL's C API) under lib/"
      return 1
    fi
    if [ -z "$include" ] && [ -z "$version" ]; then
      why="NIXL_PREFIX=$prefix: set NIXL_VERSION (its version, for the C API header) or NIXL_CAPI_INCLUDE"
      return 1
    fi
  elif [ -f "$registry_libdir/libnixl_capi.so" ]; then
    libdir="$registry_libdir"
    version="$registry_version"
  else
    why="NIXL not found: make test-nixl installs it from the registries (scripts/nixl.sh registry), or set NIXL_PREFIX (docs/nixl.md)"
    return 1
  fi
  if ! ls "$libdir"/plugins/libplugin_*.so >/dev/null 2>&1; then
    why="$libdir has no backend plugins in plugins/"
    return 1
  fi
  if [ -z "$include" ]; then
    if ! include=$(header_dir "$version"); then
      why="no header of NIXL's C API for NIXL $version"
      return 1
    fi
  fi
  if [ ! -f "$include/wrapper.h" ]; then
    why="$include has no wrapper.h (NIXL's C API header)"
    return 1
  fi
  # DT_RPATH (not RUNPATH) so that libnixl's own dependencies in the same
  # prefix resolve too, without LD_LIBRARY_PATH.
  cppflags="-I$include"
  ldflags="-L$libdir -Wl,--disable-new-dtags,-rpath,$libdir${prefix:+:$prefix/lib}"
  return 0
}

case "${1:-}" in
registry)
  registry
  ;;
need)
  if [ -z "${NIXL_PREFIX:-}" ] && ! pkg-config --exists nixl 2>/dev/null; then
    registry >/dev/null
  fi
  ;;
env)
  if ! find_nixl; then echo "$why" >&2; exit 1; fi
  echo "export CGO_CPPFLAGS='$cppflags'"
  echo "export CGO_LDFLAGS='$ldflags'"
  ;;
build)
  go="${2:?go binary}"
  bin="${3:?bin directory}"
  if ! find_nixl; then
    echo "skipped custody-transport-nixl and custody-nixl-reference: $why"
    exit 0
  fi
  for cmd in custody-transport-nixl custody-nixl-reference; do
    CGO_CPPFLAGS="$cppflags" CGO_LDFLAGS="$ldflags" "$go" build -tags nixl -o "$bin/$cmd" "./plugins/nixl/cmd/$cmd"
  done
  ;;
*)
  echo "usage: $0 registry | need | env | build GO BIN" >&2
  exit 2
  ;;
esac
