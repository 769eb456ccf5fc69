#!/usr/bin/env bash
# make lists: generate every list of a ListSources file into $OUT_DIR/<name>.txt, one CIDR per
# line (the generators' `-o text`: the form the CronJob publishes, owned by pop-common), each
# generator in its own process, like the CronJob. A list whose generator fails keeps its
# previous file; the run then exits 1 naming it. The previous <name>.txt is the baseline of the
# shrink check.
#   env: BIN (dir of the generators), SOURCES (ListSources JSON), OUT_DIR
set -euo pipefail
: "${BIN:?}" "${SOURCES:?}" "${OUT_DIR:?}"
mkdir -p "$OUT_DIR"

# One line per list: name, generator, then the generator's arguments (tab-separated). Only what
# the file says is passed on: a setting it leaves out takes the generators' default, which is
# the record's own (pop-common's DEFAULT_MAX_SHRINK_PERCENT, DEFAULT_TIMEOUT_SECONDS). The names
# and the rest are checked by the generators (the filter's list-name rule).
plan=$(python3 - "$SOURCES" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s.get("kind") == "ListSources" and s.get("version") == 1, "not a ListSources v1 record"
common = []
if "max_shrink_percent" in s:
    common.append(f"--max-shrink-percent={s['max_shrink_percent']}")
if "timeout_seconds" in s:
    common.append(f"--timeout={s['timeout_seconds']}")
for l in s["lists"]:
    args = [f"--list-name={l['name']}", *common]
    args += [f"--asn={a}" for a in l.get("asns", [])]
    if l.get("format"):
        args.append(f"--format={l['format']}")
    print("\t".join([l["name"], "lists-gen-" + l["generator"], *args, "--", *l["sources"]]))
PY
)

failed=()
while IFS=$'\t' read -r -a row; do
  name=${row[0]} gen=${row[1]} args=("${row[@]:2}")
  prev=()
  [[ -s $OUT_DIR/$name.txt ]] && prev=("--previous=$OUT_DIR/$name.txt")
  if "$BIN/$gen" -o text "${prev[@]}" "${args[@]}" > "$OUT_DIR/$name.txt.tmp"; then
    mv "$OUT_DIR/$name.txt.tmp" "$OUT_DIR/$name.txt"
    echo "lists: $name -> $OUT_DIR/$name.txt ($(wc -l < "$OUT_DIR/$name.txt") prefixes)" >&2
  else
    rm -f "$OUT_DIR/$name.txt.tmp"
    failed+=("$name")
  fi
done <<< "$plan"

if ((${#failed[@]})); then
  echo "lists: failed, previous version kept: ${failed[*]}" >&2
  exit 1
fi
