#!/usr/bin/env bash
# make lists: generate every list of a ListSources file into $OUT_DIR/<name>.json (PolicyList)
# and <name>.txt (one CIDR per line), each generator in its own process, like the CronJob.
# A list whose generator fails keeps its previous files; the run then exits 1 naming it.
# The previous <name>.txt is the baseline of the shrink check.
#   env: BIN (dir of the generators), SOURCES (ListSources JSON), OUT_DIR
set -euo pipefail
: "${BIN:?}" "${SOURCES:?}" "${OUT_DIR:?}"
mkdir -p "$OUT_DIR"

# One line per list: name, generator, then the generator's arguments (tab-separated).
plan=$(python3 - "$SOURCES" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s.get("kind") == "ListSources" and s.get("version") == 1, "not a ListSources v1 record"
for l in s["lists"]:
    args = [f"--list-name={l['name']}", f"--max-shrink-percent={s.get('max_shrink_percent', 50)}",
            f"--timeout={s.get('timeout_seconds', 120)}"]
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
  if "$BIN/$gen" "${prev[@]}" "${args[@]}" > "$OUT_DIR/$name.json.tmp"; then
    python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); sys.stdout.write("".join(n+"\n" for n in l["ipv4"]+l["ipv6"]))' \
      "$OUT_DIR/$name.json.tmp" > "$OUT_DIR/$name.txt.tmp"
    mv "$OUT_DIR/$name.json.tmp" "$OUT_DIR/$name.json"
    mv "$OUT_DIR/$name.txt.tmp" "$OUT_DIR/$name.txt"
    echo "lists: $name -> $OUT_DIR/$name.txt ($(wc -l < "$OUT_DIR/$name.txt") prefixes)" >&2
  else
    rm -f "$OUT_DIR/$name.json.tmp"
    failed+=("$name")
  fi
done <<< "$plan"

if ((${#failed[@]})); then
  echo "lists: failed, previous version kept: ${failed[*]}" >&2
  exit 1
fi
