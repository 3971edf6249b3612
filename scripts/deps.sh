#!/usr/bin/env bash
# deps.sh installs the Debian packages custody builds against, when missing.
# As root it runs apt-get; otherwise it prints the one command to run.
# With "protoc" it installs only the protobuf compiler (for make proto).
set -euo pipefail

want=(gcc pkg-config libucx-dev ucx-utils curl ca-certificates)
[ "${1:-}" = protoc ] && want=(protobuf-compiler)

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "custody needs: ${missing[*]}. Run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
