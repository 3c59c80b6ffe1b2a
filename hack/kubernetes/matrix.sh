#!/usr/bin/env bash
# make test-matrix: the real-control-plane tier (tests/kubernetes) on every supported Kubernetes version, one
# version after the other, never stopping at the first that fails.
#
#   make test-matrix                                        # every version below, the whole tier
#   make test-matrix MATRIX_VERSIONS="1.34.4 1.38.0-beta.0"  # some versions
#   make test-matrix MATRIX_TESTS="tests/kubernetes/test_real_kubelet.py" PYTEST_ARGS="-k health"
#   make test-matrix MATRIX_TESTS=sensitive                 # the version-sensitive files only (below)
#
# Each version is built first (hack/kubernetes/build.sh: a no-op once built). Per version the pytest log and its
# JUnit XML go to $MATRIX_DIR (default build/matrix); at the end one line per version says what passed, failed and
# was skipped, and how long it took. The exit status is 1 when any version failed to build or had a failing test.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# The newest patch of each minor on the Go module proxy (`go list -m -versions k8s.io/kubernetes`, 2026-11-29),
# and the newest 1.38 pre-release there.
MATRIX_VERSIONS="${MATRIX_VERSIONS:-1.34.4 1.35.4 1.36.3 1.37.2 1.38.0-beta.0}"
MATRIX_TESTS="${MATRIX_TESTS:-tests/kubernetes}"
# The files whose subject changed between 1.34 and 1.38: the kubelet's plugin and health APIs, device taints and
# their rules and eviction, list attributes (a 1.36 gate), pod defaults, the counter layout of dynamic MIG (1.35),
# the scheduler's answer to allocation errors, per-node claim status authorization (1.36) and error wording.
if [ "$MATRIX_TESTS" = sensitive ]; then
  MATRIX_TESTS="$(printf 'tests/kubernetes/test_real_%s.py ' kubelet device_taints list_attributes pod_defaults mig \
    scheduling_errors privilege requests)"
fi
MATRIX_DIR="${MATRIX_DIR:-build/matrix}"
PY="${PY:-.venv/bin/python}"
mkdir -p "$MATRIX_DIR"

failed=0
for version in $MATRIX_VERSIONS; do
  version="${version#v}"
  log="$MATRIX_DIR/v$version.log"
  xml="$MATRIX_DIR/v$version.xml"
  rm -f "$log" "$xml"
  printf '[make test-matrix] Kubernetes v%s: building (a no-op once built)\n' "$version" >&2
  if ! K8S_VERSION="$version" hack/kubernetes/build.sh >"$log" 2>&1; then
    printf '[make test-matrix] Kubernetes v%s: the build failed, see %s\n' "$version" "$log" >&2
    failed=1
    continue
  fi
  printf '[make test-matrix] Kubernetes v%s: %s\n' "$version" "$MATRIX_TESTS" >&2
  # shellcheck disable=SC2086  # MATRIX_TESTS and PYTEST_ARGS are word lists
  K8S_VERSION="$version" "$PY" -m pytest $MATRIX_TESTS ${PYTEST_ARGS:-} --junitxml="$xml" 2>&1 | tee -a "$log" \
    | tail -n 1 >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
done

"$PY" - "$MATRIX_DIR" $MATRIX_VERSIONS <<'EOF'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

directory = Path(sys.argv[1])
print(f"\n{'Kubernetes':<16} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7} {'time':>8}")
for version in (v.removeprefix("v") for v in sys.argv[2:]):
    xml = directory / f"v{version}.xml"
    if not xml.exists():
        print(f"v{version:<15} not run: the build failed ({directory / f'v{version}.log'})")
        continue
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    count = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    minutes, seconds = divmod(round(float(suite.get("time", "0"))), 60)
    print(
        f"v{version:<15} {passed:>6} {count['failures']:>6} {count['errors']:>6} {count['skipped']:>7}"
        f" {minutes:>4}m{seconds:02}s"
    )
    for case in suite.iter("testcase"):
        for outcome in ("failure", "error", "skipped"):
            found = case.find(outcome)
            if found is not None:
                reason = (found.get("message") or "").splitlines()[0][:120] if found.get("message") else ""
                print(f"    {outcome:<8} {case.get('classname')}::{case.get('name')}  {reason}")
EOF
exit $failed
