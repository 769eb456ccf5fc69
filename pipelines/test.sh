#!/usr/bin/env bash
# make test: every cargo test (libraries, integration tests, and the benches as quick smoke
# runs; not the one-line mains, whose [[bin]] says test = false; then doc tests), shown as they run, and one closing
# line that sums them up ("tests: N passed, N failed, N skipped"), because the last test binary
# cargo runs may well be one with no test and its "0 passed" is not the run's result. Skipped
# counts the tests that returned early for a missing tool (testkit::skip_or_fail prints
# `SKIPPED <test>: ...` on stderr; cargo's own line counts them as passed, so they are taken
# out of the passed) and the tests cargo ignored (#[ignore]).
set -euo pipefail
cargo=${CARGO:-cargo}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$cargo" test --workspace --lib --tests --benches 2>&1 | tee -a "$log" || status=$?
if [[ $status -eq 0 ]]; then
  "$cargo" test --workspace --doc 2>&1 | tee -a "$log" || status=$?
fi
awk '/^test result:/ { passed += $4; failed += $6; ignored += $8 }
     /(^|\.\.\. )SKIPPED / { skipped += 1 }  # after "test x ... " when tests run one at a time
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed - skipped, failed, skipped + ignored }' "$log"
exit "$status"
