#!/usr/bin/env bash
# ucx.sh installs a current UCX from the Python package registry, the one
# NIXL's wheels run on (libucx-cu12: UCX with its headers, libraries and
# pkg-config files; its CUDA parts load only where CUDA is), into .ucx in
# the tree (ignored by git), for the ucx transport to build against:
#
#   scripts/ucx.sh current   install it (once) and print its prefix, for
#                            make UCX_PREFIX=$(scripts/ucx.sh current)
#
# Without UCX_PREFIX, make builds against the UCX pkg-config finds (Debian's
# libucx-dev, which scripts/deps.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.22.0
dir=.ucx/libucx-cu12-$version
case "${1:-}" in
current)
  if [ ! -f "$dir/libucx/lib/pkgconfig/ucx.pc" ]; then
    ./scripts/python.sh >&2
    "$(./scripts/python.sh path)" -m pip install -q --disable-pip-version-check --no-deps \
      --target "$dir" "libucx-cu12==$version" >&2
    chmod +x "$dir"/libucx/bin/* 2>/dev/null || true
  fi
  echo "$PWD/$dir/libucx"
  ;;
*)
  echo "usage: scripts/ucx.sh current" >&2
  exit 2
  ;;
esac
