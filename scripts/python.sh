#!/usr/bin/env bash
# python.sh makes the Python side's virtual environment, .venv in the tree
# (ignored by git): the custody package (editable), what generates its
# engine API stubs, its test tools and the vLLM it is tested against, all
# pinned in python/requirements-dev.txt and installed from the Python
# package registry with uv. It does nothing when .venv already holds what
# those files name.
#
#   scripts/python.sh         make or refresh .venv
#   scripts/python.sh path    print the venv's python
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
py=$venv/bin/python
[ "${1:-}" = path ] && { echo "$PWD/$py"; exit 0; }

base=${PYTHON:-python3}
# A Debian machine without Python, or without its venv module: install them
# as root, else say what to run.
if ! { command -v "$base" >/dev/null && "$base" -c 'import ensurepip, venv' 2>/dev/null; }; then
  if [ "$(id -u)" -ne 0 ] || [ -n "${PYTHON:-}" ]; then
    echo "python.sh: $base with its venv module is needed: run sudo apt-get install -y python3 python3-venv (Python 3.10 or later), or set PYTHON" >&2
    exit 1
  fi
  echo "installing python3 python3-venv" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
fi

stamp=$venv/.custody-stamp
want=$(cat python/requirements-dev.txt python/overrides.txt python/pyproject.toml | sha256sum | cut -d' ' -f1)
[ -x "$py" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0

if [ ! -x "$py" ]; then
  "$base" -m venv "$venv"
fi
"$py" -m pip install -q --disable-pip-version-check uv==0.13.8
start=$(date +%s)
"$venv/bin/uv" pip install -q --python "$py" --override python/overrides.txt \
  -r python/requirements-dev.txt -e ./python
echo "python.sh: .venv ready in $(( $(date +%s) - start )) s" >&2
echo "$want" > "$stamp"
