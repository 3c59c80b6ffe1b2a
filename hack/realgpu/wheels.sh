#!/usr/bin/env bash
# Collect gpudra's wheel and the wheels of everything it needs into one directory, for hack/realgpu/run on a
# machine without network (it installs from there with `pip install --no-index`). Needs pip and an index.
#
#   hack/realgpu/wheels.sh                          # into hack/realgpu/wheels, for this Python and platform
#   hack/realgpu/wheels.sh DIR                      # into DIR
#   hack/realgpu/wheels.sh DIR --python-version 3.12   # for another Python on Linux x86-64 (binary wheels only)
#
# PYTHON names the Python whose pip runs (default python3). Bring DIR to the GPU machine and point REALGPU_WHEELS
# at it (or put it at hack/realgpu/wheels in a copy of this repository).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/wheels}"
[ $# -gt 0 ] && shift
python="${PYTHON:-python3}"
log() { printf '[realgpu wheels] %s\n' "$*" >&2; }

mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [ $# -eq 0 ]; then
  # this machine's Python and platform: gpudra and every dependency as wheels (a dependency that ships only a
  # source archive is built into a wheel here)
  log "gpudra and its dependencies into $out"
  "$python" -m pip wheel --disable-pip-version-check --wheel-dir "$out" "$root"
else
  # another Python: gpudra's own wheel (pure Python) built here, its dependencies downloaded as binary wheels for
  # the target (pip's --python-version and friends are the arguments given)
  log "gpudra into $out, its dependencies for $* on Linux x86-64"
  "$python" -m pip wheel --disable-pip-version-check --no-deps --wheel-dir "$out" "$root"
  wheel="$(ls -t "$out"/gpudra-*.whl | head -n 1)"
  "$python" -m pip download --disable-pip-version-check --dest "$out" --only-binary=:all: --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform linux_x86_64 "$@" "$wheel"
fi
log "done: $(ls "$out" | wc -l) wheels in $out; on the GPU machine: REALGPU_WHEELS=$out hack/realgpu/run"
