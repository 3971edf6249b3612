#!/usr/bin/env bash
# nixl.sh finds an installed NIXL for the nixl transport (plugins/nixl):
# NIXL_PREFIX, else pkg-config's nixl. NIXL is never built or fetched here.
#
#   nixl.sh env           print the cgo flags (export lines) to build with
#                         -tags nixl, or, on stderr, why NIXL was not found
#                         (exit 1)
#   nixl.sh build GO BIN  build BIN/custody-transport-nixl and
#                         BIN/custody-nixl-reference (custody bench's
#                         NIXL-direct reference), or print one line saying
#                         why they were skipped (exit 0)
set -euo pipefail

why=""
find_nixl() {
  local prefix="${NIXL_PREFIX:-}"
  if [ -z "$prefix" ]; then
    prefix="$(pkg-config --variable=prefix nixl 2>/dev/null || true)"
  fi
  if [ -z "$prefix" ]; then
    why="NIXL not found: set NIXL_PREFIX to a NIXL install (docs/nixl.md)"
    return 1
  fi
  if [ ! -f "$prefix/include/nixl.h" ]; then
    why="NIXL_PREFIX=$prefix has no include/nixl.h"
    return 1
  fi
  libdir=""
  for d in "$prefix/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)" "$prefix/lib64" "$prefix/lib"; do
    if [ -e "$d/libnixl.so" ]; then libdir="$d"; break; fi
  done
  if [ -z "$libdir" ]; then
    why="NIXL_PREFIX=$prefix has no libnixl.so under lib/"
    return 1
  fi
  if ! ls "$libdir"/plugins/libplugin_*.so >/dev/null 2>&1; then
    why="NIXL_PREFIX=$prefix has no backend plugins in $libdir/plugins"
    return 1
  fi
  # DT_RPATH (not RUNPATH) so that libnixl's own dependencies (Abseil in
  # the same prefix) resolve too, without LD_LIBRARY_PATH.
  cppflags="-I$prefix/include"
  ldflags="-L$libdir -Wl,--disable-new-dtags,-rpath,$libdir:$prefix/lib"
  return 0
}

case "${1:-}" in
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
  echo "usage: $0 env | build GO BIN" >&2
  exit 2
  ;;
esac
