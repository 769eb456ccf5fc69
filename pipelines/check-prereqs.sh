#!/usr/bin/env bash
# `make check`: the tools and credentials a real deployment needs. Prints one line per check and
# fails if a required one is missing. Reads no secret value: only whether one is set.
set -euo pipefail
source "$(dirname "$0")/../k8s/versions.env"
missing=0
have() { command -v "$1" >/dev/null 2>&1; }
ok()   { printf '  ok       %s\n' "$*"; }
miss() { printf '  MISSING  %s\n' "$*"; missing=1; }
opt()  { printf '  optional %s\n' "$*"; }

echo "tools:"
for tool in kubectl helm talosctl curl; do
  if have "$tool"; then ok "$tool"; else miss "$tool"; fi
done
if have talosctl; then
  want=${TALOS_VERSION%.*}
  got=$(talosctl version --client --short 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*' | head -1 || true)
  [[ "$got" == "$want" ]] && ok "talosctl $got matches the cluster's $want" || miss "talosctl ${got:-?}: the cluster runs $TALOS_VERSION (same minor needed)"
fi
if have kubeconform; then ok "kubeconform"; else opt "kubeconform (make check-manifests uses the project's own validator without it)"; fi
if have cargo; then ok "cargo"; else miss "cargo (builds the tools)"; fi
if have rustup && rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then ok "rust target wasm32-wasip1"; else opt "rust target wasm32-wasip1 (to build the filter: rustup target add wasm32-wasip1)"; fi

echo "Scaleway credentials (environment, then the scw config file):"
config=${SCW_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/scw/config.yaml}
if [[ -n "${SCW_SECRET_KEY:-}" && -n "${SCW_ACCESS_KEY:-}" ]]; then ok "SCW_ACCESS_KEY and SCW_SECRET_KEY are set"
elif [[ -f "$config" ]]; then ok "scw config file $config"
else miss "no SCW_ACCESS_KEY/SCW_SECRET_KEY and no $config"; fi
if [[ -n "${SCW_DEFAULT_PROJECT_ID:-}" ]] || { [[ -f "$config" ]] && grep -q default_project_id "$config"; }; then ok "default project id"; else miss "SCW_DEFAULT_PROJECT_ID (or default_project_id in $config)"; fi

# >>> infra (issue 11): the credentials as scw-infra itself resolves them (profile and access key;
# the secret key is never printed). Needs the tool built: `make check` does not build it.
scw_infra=${BIN:-${CARGO_TARGET_DIR:-target}/release}/scw-infra
if [[ -x "$scw_infra" ]]; then
  if resolved=$("$scw_infra" credentials 2>&1); then ok "scw-infra resolves credentials: $resolved"
  else miss "scw-infra cannot resolve credentials: $resolved"; fi
else opt "scw-infra is not built: cargo build --release --bin scw-infra, then make check, to test the credentials it resolves"; fi
[[ -f "${INFRA_CONFIG:-config/infra.json}" ]] && ok "${INFRA_CONFIG:-config/infra.json}" || miss "${INFRA_CONFIG:-config/infra.json} (cp config/infra.example.json config/infra.json, then edit)"
# <<< infra

echo "configuration:"
for f in config/edge.json; do
  [[ -f "$f" ]] && ok "$f" || miss "$f (cp config/edge.example.json config/edge.json, then edit)"
done
if (( missing )); then echo "make check: something is missing (see above)" >&2; exit 1; fi
echo "make check: ready"
