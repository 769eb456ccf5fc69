#!/usr/bin/env bash
# `make check-manifests`: render the committed edge examples with render-edge (filter off:
# config/edge.example.json; filter on: config/edge-pow.example.json and the policy a site would
# deploy, config/edge-site.example.json; all with
# config/platform-inputs.example.json) into $MANIFESTS_DIR/*.yaml, then validate every object
# strictly against the upstream JSON schemas in $SCHEMAS_DIR (kubeconform layout, see its
# PROVENANCE.md). With FILE arguments, validates those files instead and renders nothing.
#
# The validator is kubeconform when it is on PATH (-strict -summary, with the two local
# -schema-location templates and no `default`, so nothing is fetched), otherwise the project's own
# $BIN/manifest-check, which looks schemas up the same way. MANIFEST_VALIDATOR=kubeconform or
# manifest-check forces one. A kind with no schema fails with both.
#
# Environment: SCHEMAS_DIR (default ../shared/schemas), BIN (default $CARGO_TARGET_DIR/release or
# target/release), MANIFESTS_DIR (default $CARGO_TARGET_DIR/manifests or target/manifests).
# Exit: 0 every object valid; 1 a render failed or an object is invalid; 2 no schema directory,
# no validator, or a missing input file.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
schemas=${SCHEMAS_DIR:-../shared/schemas}
bin=${BIN:-$target/release}
out=${MANIFESTS_DIR:-$target/manifests}
say() { echo "check-manifests: $*" >&2; }

if [[ ! -d "$schemas" ]]; then
  say "schema directory $schemas does not exist (set SCHEMAS_DIR; the upstream schemas live in shared/schemas beside the checkout)"
  exit 2
fi

files=()
if (( $# > 0 )); then
  for f in "$@"; do
    [[ -f "$f" ]] || { say "$f does not exist"; exit 2; }
    files+=("$f")
  done
else
  mkdir -p "$out"
  inputs=config/platform-inputs.example.json
  for pair in edge:config/edge.example.json edge-pow:config/edge-pow.example.json edge-site:config/edge-site.example.json; do
    name=${pair%%:*}
    config=${pair#*:}
    say "rendering $config with $inputs -> $out/$name.yaml"
    # Through a temporary file: a failed render never leaves a stale or truncated file to validate.
    "$bin/render-edge" --inputs "$inputs" --config "$config" > "$out/$name.yaml.tmp"
    mv "$out/$name.yaml.tmp" "$out/$name.yaml"
    files+=("$out/$name.yaml")
  done
fi

validator=${MANIFEST_VALIDATOR:-}
if [[ -z "$validator" ]]; then
  if command -v kubeconform >/dev/null 2>&1; then validator=kubeconform; else validator=manifest-check; fi
fi

case "$validator" in
  kubeconform)
    say "validating ${#files[@]} files with kubeconform against $schemas"
    # Single quotes: the {{ }} are kubeconform's templates, not shell.
    kubeconform -strict -summary \
      -schema-location "$schemas/"'{{ .ResourceKind }}{{ .KindSuffix }}.json' \
      -schema-location "$schemas/"'{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json' \
      "${files[@]}"
    ;;
  manifest-check)
    [[ -x "$bin/manifest-check" ]] || { say "$bin/manifest-check is missing (make $bin/manifest-check, or set BIN)"; exit 2; }
    say "validating ${#files[@]} files with manifest-check against $schemas"
    failed=0
    for f in "${files[@]}"; do
      # Prefix each report line with its file, as kubeconform does.
      status=0
      "$bin/manifest-check" --schemas "$schemas" "$f" | sed "s|^|$f: |" || status=$?
      if (( status != 0 )); then failed=1; fi
    done
    if (( failed )); then say "some objects are invalid (see above)"; exit 1; fi
    say "every object of ${#files[@]} files is valid"
    ;;
  *)
    say "MANIFEST_VALIDATOR must be kubeconform or manifest-check, not '$validator'"
    exit 2
    ;;
esac
