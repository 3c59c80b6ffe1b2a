#!/bin/sh
# `make test-pythons`: the unit tier and `gpudra up` as a user runs it (tests/integration/test_up_process.py) on each
# newer Python gpudra supports that this machine has, each in a virtualenv of its own (.venv-3.13), made as `make`
# makes .venv. An interpreter is looked for as python3.N on PATH, then under pyenv's versions (the newest patch).
# One line per version; the exit status is 1 when a version's tests failed or its virtualenv could not be made.
# PYTHON_MINORS="13" narrows it (default: 12 13 14); TESTS replaces the tests run; VENVS is the folder the
# virtualenvs and their logs go in (default: the checkout).
set -u
cd "$(dirname "$0")/../.."
minors=${PYTHON_MINORS:-12 13 14}
tests=${TESTS:-tests/unit tests/integration/test_up_process.py}
venvs=${VENVS:-.}
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}

is_minor() {  # $1 runs and is Python 3.$2
    "$1" -c "import sys; sys.exit(sys.version_info[:2] != (3, $2))" >/dev/null 2>&1
}

interpreter() {  # the Python 3.$1 to use, or nothing
    if is_minor "python3.$1" "$1"; then
        command -v "python3.$1"
        return
    fi
    for candidate in $(ls -d "$pyenv_root"/versions/3."$1".*/bin/python 2>/dev/null | sort -V -r); do
        if is_minor "$candidate" "$1"; then
            echo "$candidate"
            return
        fi
    done
}

found=0
failed=0
for minor in $minors; do
    python=$(interpreter "$minor")
    if [ -z "$python" ]; then
        echo "Python 3.$minor: not on this machine (neither python3.$minor on PATH nor under $pyenv_root/versions)"
        continue
    fi
    found=$((found + 1))
    venv=$venvs/.venv-3.$minor
    log=$venv.log
    version=$("$python" -c 'import platform; print(platform.python_version())')
    if ! make --no-print-directory venv bytecode PYTHON="$python" VENV="$venv" >"$log" 2>&1; then
        echo "Python $version ($python): its virtualenv $venv could not be made; see $log"
        failed=$((failed + 1))
        continue
    fi
    started=$(date +%s)
    # shellcheck disable=SC2086 # the tests are words
    if "$venv/bin/python" -m pytest -q -p no:cacheprovider $tests >>"$log" 2>&1; then
        verdict=passed
    else
        verdict=FAILED
        failed=$((failed + 1))
    fi
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?)' "$log" | tail -1 | tr -d '=')
    echo "Python $version: $verdict ($summary, $(($(date +%s) - started)) s; the log is $log)"
    if [ "$verdict" = FAILED ]; then
        grep -E '^(FAILED|ERROR) ' "$log" | head -20
    fi
done
if [ "$found" = 0 ]; then
    echo "no Python newer than 3.11 found: nothing was run on one"
fi
[ "$failed" = 0 ]
