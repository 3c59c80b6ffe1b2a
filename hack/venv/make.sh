#!/bin/sh
# The virtualenv every make target runs in, made with $1 (make's PYTHON) at $2 (make's VENV) unless it exists.
# gpudra needs Python 3.11 or newer: an older interpreter is refused with what to run instead, and a virtualenv
# made earlier with one (a first `make demo` under python3 = 3.10) is made again rather than failing forever.
set -eu
python=$1
venv=$2

too_old() {
    ! "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

version() {
    "$1" --version 2>&1 || echo "not found"
}

if [ -x "$venv/bin/python" ]; then
    too_old "$venv/bin/python" || exit 0
    echo "$venv was made with $(version "$venv/bin/python"), older than gpudra needs (3.11 or newer): making it again with $python" >&2
fi
if too_old "$python"; then
    echo "gpudra needs Python 3.11 or newer, and $python is $(version "$python"): run make again with PYTHON=python3.11 (or python3.12, python3.13)" >&2
    exit 1
fi
rm -rf "$venv"
"$python" -m venv "$venv"
