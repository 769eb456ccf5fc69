#!/usr/bin/env bash
# make test: every cargo test (all targets, then doc tests), shown as they run, and one closing
# line that sums them up ("tests: N passed, N failed"), because the last test binary cargo runs
# may well be one with no test and its "0 passed" is not the run's result.
set -euo pipefail
cargo=${CARGO:-cargo}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$cargo" test --workspace --all-targets 2>&1 | tee -a "$log" || status=$?
if [[ $status -eq 0 ]]; then
  "$cargo" test --workspace --doc 2>&1 | tee -a "$log" || status=$?
fi
awk '/^test result:/ { passed += $4; failed += $6 }
     END { printf "tests: %d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
