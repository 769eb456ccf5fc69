#!/usr/bin/env bash
# make bench-lists: lists-gen-asn on the full real IPv4 dataset (ip-location-db, 412k rows,
# gzip) for ten hosting ASNs, against `awk | iprange` and Python's ipaddress, in the same run.
# The three outputs must be identical; the goal is at most a quarter of the wall time of awk + iprange.
#   env: BIN (dir of lists-gen-asn), SHARED (../shared), RUNS (hyperfine runs, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

SHARED=${SHARED:-${EDGEPOP_SHARED:-../shared}}
DATA=$SHARED/fixtures/asn/ip-location-db/asn-ipv4_2026-06-17.csv.gz
ASNS="16276 24940 14061 12876 16509 396982 8075 63949 20473 13335"
RUNS=${RUNS:-5}
GEN=${BIN:?BIN must name the directory of lists-gen-asn}/lists-gen-asn
ORACLE=tools/lists-gen-asn/tests/oracle.py

for tool in iprange hyperfine python3 awk zcat; do
  command -v "$tool" >/dev/null || { echo "bench-lists: $tool is missing (apt-get install iprange hyperfine)" >&2; exit 1; }
done
[[ -f $DATA ]] || { echo "bench-lists: $DATA is missing" >&2; exit 1; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
asn_args=$(printf -- '--asn=%s ' $ASNS)
asn_csv=$(tr ' ' ',' <<<"$ASNS")
# awk keeps the rows of the ASNs (field 3) as first-last ranges; iprange merges them into CIDRs.
awk_prog='BEGIN { n = split(asns, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 } ($3 in want) { print $1 "-" $2 }'

rust_cmd="$GEN $asn_args -o text $DATA > $OUT/rust.txt 2>/dev/null"
awk_cmd="zcat $DATA | awk -F, -v asns='$ASNS' '$awk_prog' | iprange > $OUT/iprange.txt"
py_cmd="python3 $ORACLE ip-location-db $asn_csv $DATA > $OUT/python.txt"

hyperfine --style basic --runs "$RUNS" --warmup 1 --export-csv "$OUT/times.csv" \
  -n lists-gen-asn "$rust_cmd" -n 'awk | iprange' "$awk_cmd" -n 'python ipaddress' "$py_cmd" >&2
# iprange prints a single address without /32: normalise before comparing.
sed -E '/\//! s/$/\/32/' "$OUT/iprange.txt" > "$OUT/iprange-cidr.txt"
cmp -s "$OUT/rust.txt" "$OUT/iprange-cidr.txt" || { echo "bench-lists: lists-gen-asn and iprange differ" >&2; diff "$OUT/rust.txt" "$OUT/iprange-cidr.txt" | head >&2; exit 1; }
cmp -s "$OUT/rust.txt" "$OUT/python.txt" || { echo "bench-lists: lists-gen-asn and Python differ" >&2; exit 1; }
echo "outputs identical: $(wc -l < "$OUT/rust.txt") prefixes"
# hyperfine's CSV: a header naming the columns (command, mean, min, user, system... in seconds),
# then one row per command; the names hold no comma.
awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  {
    mean[$col["command"]] = $col["mean"]
    printf "%-18s mean %8.1f ms  (min %.1f, user %.1f, sys %.1f)\n", $col["command"], $col["mean"] * 1000,
      $col["min"] * 1000, $col["user"] * 1000, $col["system"] * 1000
  }
  END {
    ratio = mean["lists-gen-asn"] / mean["awk | iprange"]
    printf "lists-gen-asn / (awk | iprange) = %.2f (goal <= 0.25): %s\n", ratio, ratio <= 0.25 ? "met" : "NOT met"
  }' "$OUT/times.csv"
