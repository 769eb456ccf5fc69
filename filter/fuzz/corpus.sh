#!/usr/bin/env bash
# The committed corpus is one text file per target, corpus/<target>.hex: one input per line in
# lowercase hex, sorted. libFuzzer wants a directory of files; git does better with a file per
# target than with hundreds of tiny ones, and a diff then shows which inputs came and went.
#
#   filter/fuzz/corpus.sh unpack DIR   each target's inputs as files DIR/<target>/<sha1>
#   filter/fuzz/corpus.sh pack DIR     DIR/<target>/* back into corpus/<target>.hex (all of them)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: corpus.sh unpack|pack DIR"
cmd=${1:?$usage}
dir=${2:?$usage}

case "$cmd" in
  unpack)
    for bundle in "$here"/corpus/*.hex; do
      target=$(basename "$bundle" .hex)
      mkdir -p "$dir/$target"
      while IFS= read -r line; do
        tmp="$dir/$target/.input"
        printf '%b' "$(sed 's/../\\x&/g' <<<"$line")" >"$tmp"
        sum=$(sha1sum "$tmp")
        mv "$tmp" "$dir/$target/${sum%% *}"
      done <"$bundle"
    done
    ;;
  pack)
    for target_dir in "$dir"/*/; do
      target=$(basename "$target_dir")
      for input in "$target_dir"*; do
        [[ -f "$input" ]] || continue
        od -An -v -tx1 "$input" | tr -d ' \n'
        echo
      done | LC_ALL=C sort -u >"$here/corpus/$target.hex.tmp"
      mv "$here/corpus/$target.hex.tmp" "$here/corpus/$target.hex"
    done
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
