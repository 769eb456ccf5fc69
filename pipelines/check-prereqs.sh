#!/usr/bin/env bash
# `make check`: the tools and credentials a real deployment needs. Prints one line per check and
# fails if a required one is missing. Reads no secret value: only whether one is set.
# PROFILE=onprem (an existing cluster, no Scaleway): kubectl, helm, sops and the cluster's age key,
# its config and the shape of its SOPS file, as render-platform checks them.
set -euo pipefail
# VERSIONS_FILE: the pins (default: k8s/versions.env), for tests.
source "${VERSIONS_FILE:-$(dirname "$0")/../k8s/versions.env}"
missing=0
have() { command -v "$1" >/dev/null 2>&1; }
ok()   { printf '  ok       %s\n' "$*"; }
miss() { printf '  MISSING  %s\n' "$*"; missing=1; }
invalid() { printf '  INVALID  %s\n' "$*"; missing=1; }
opt()  { printf '  optional %s\n' "$*"; }

echo "tools:"
# Each missing or wrong client is one `make tools` away: it builds them at their pins.
tools_hint="make tools builds it"
# One line per tool, with the version it must have (k8s/versions.env).
minor() { grep -o 'v[0-9]*\.[0-9]*' | head -1 || true; }
# version_ge A B: A >= B (vX.Y.Z, as sort -V orders them).
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]; }
profile=${PROFILE:-edge}
if [[ "$profile" != edge ]]; then opt "talosctl (the $profile profile's platform layer does not use it)"
elif ! have talosctl; then miss "talosctl (not installed; $TALOS_VERSION's minor needed; $tools_hint)"
else
  got=$(talosctl version --client --short 2>/dev/null | minor)
  want=${TALOS_VERSION%.*}
  if [[ "$got" == "$want" ]]; then ok "talosctl $got (the cluster runs $TALOS_VERSION)"
  else miss "talosctl ${got:-?}: the cluster runs $TALOS_VERSION, talosctl must have the same minor ($want; $tools_hint)"; fi
fi
if [[ "$profile" != edge ]]; then :  # against the cluster's own version (check-onprem.sh)
elif ! have kubectl; then miss "kubectl (not installed; $tools_hint)"
else
  # kubectl's skew policy: within one minor of the API server.
  got=$(kubectl version --client 2>/dev/null | minor)
  want=$(minor <<<"$KUBERNETES_VERSION")
  if [[ -n "$got" ]] && (( ${got#v1.} - ${want#v1.} <= 1 && ${want#v1.} - ${got#v1.} <= 1 )); then
    ok "kubectl $got (Kubernetes $KUBERNETES_VERSION)"
  else miss "kubectl ${got:-?}: must be within one minor of Kubernetes $KUBERNETES_VERSION ($tools_hint)"; fi
fi
if ! have helm; then miss "helm (not installed; Helm $HELM_MAJOR_VERSION, $HELM_MIN_VERSION or newer; $tools_hint)"
else
  got=$(helm version --short 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*\.[0-9]*' | head -1 || true)
  if [[ -n "$got" && "${got%%.*}" != "v$HELM_MAJOR_VERSION" ]]; then
    miss "helm $got: only Helm $HELM_MAJOR_VERSION is supported ($HELM_MIN_VERSION or newer; Helm 4 renamed --atomic and changed --wait; $tools_hint)"
  elif [[ -n "$got" ]] && version_ge "$got" "$HELM_MIN_VERSION"; then ok "helm $got (Helm $HELM_MAJOR_VERSION, >= $HELM_MIN_VERSION)"
  else miss "helm ${got:-?}: Helm $HELM_MAJOR_VERSION, $HELM_MIN_VERSION or newer needed ($tools_hint)"; fi
  if helm diff version >/dev/null 2>&1; then ok "helm diff plugin (make diff-platform)"
  else opt "helm diff plugin (make diff-platform falls back to helm template | kubectl diff)"; fi
fi
# The cluster exists: what the platform layer of this profile needs, and nothing of Scaleway.
# shellcheck source=check-onprem.sh
if [[ "$profile" != edge ]]; then source "$(dirname "$0")/check-onprem.sh"; fi
if have curl; then ok "curl"; else miss "curl (make vendor)"; fi
# scw-infra decompresses and converts the control planes' Talos image before importing it
# (tools/scw-infra/src/apply/image_file.rs): a missing one stops apply-infra after the download.
if [[ "$profile" == edge ]]; then
  if have zstd; then ok "zstd (the Talos image import)"; else miss "zstd (the Talos image import: apt-get install zstd)"; fi
  if have qemu-img; then ok "qemu-img (the Talos image import)"; else miss "qemu-img (the Talos image import: apt-get install qemu-utils)"; fi
fi
if have kubeconform; then ok "kubeconform"; else opt "kubeconform (make check-manifests uses the project's own validator without it)"; fi
if have cargo; then ok "cargo"; else miss "cargo (builds the tools)"; fi
# Read whole first: grep -q leaving at its match would fail a pipeline under pipefail (SIGPIPE).
rust_targets=$(have rustup && rustup target list --installed 2>/dev/null || true)
if grep -qx wasm32-wasip1 <<<"$rust_targets"; then ok "rust target wasm32-wasip1"; else opt "rust target wasm32-wasip1 (to build the filter: rustup target add wasm32-wasip1)"; fi

echo "Scaleway credentials (environment, then the scw config file):"
config=${SCW_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/scw/config.yaml}
if [[ -n "${SCW_SECRET_KEY:-}" && -n "${SCW_ACCESS_KEY:-}" ]]; then ok "SCW_ACCESS_KEY and SCW_SECRET_KEY are set"
elif [[ -f "$config" ]]; then ok "scw config file $config"
else miss "no SCW_ACCESS_KEY/SCW_SECRET_KEY and no $config"; fi
if [[ -n "${SCW_DEFAULT_PROJECT_ID:-}" ]] || { [[ -f "$config" ]] && grep -q default_project_id "$config"; }; then ok "default project id"; else miss "SCW_DEFAULT_PROJECT_ID (or default_project_id in $config)"; fi

# The credentials as scw-infra itself resolves them (profile and access key; the secret key is
# never printed). `make check` builds the tools it runs; run alone, a tool not built is said.
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release}
scw_infra=$bin/scw-infra
built() { [[ -x "$bin/$1" ]] || { miss "$2: not checked, $bin/$1 is not built (make check builds it)"; false; }; }
# A tool's refusal without its name and the file it already names.
why() { local text=${1#*: error: }; printf '%s' "${text#"$2: "}"; }
if built scw-infra "the credentials scw-infra resolves"; then
  if resolved=$("$scw_infra" credentials 2>&1); then ok "scw-infra resolves credentials: $resolved"
  else miss "scw-infra cannot resolve credentials: $resolved"; fi
fi

echo "configuration:"
# The infra config as apply reads it (every field, the SSH key it names, the worker's schematic).
# Before the first apply the same run prints the platform inputs this config would give, which
# the edge config is rendered against below.
infra_config=${INFRA_CONFIG:-config/infra.json}
inputs=${INPUTS:-talos/_out/platform-inputs.json}
infra_inputs=$(mktemp)
trap 'rm -f "$infra_inputs"' EXIT
infra_ok=0
if [[ ! -f "$infra_config" ]]; then miss "$infra_config (cp config/infra.example.json $infra_config, then edit)"
elif built scw-infra "$infra_config"; then
  if refusal=$("$scw_infra" check-config --config "$infra_config" $([[ -f "$inputs" ]] || echo --platform-inputs) 2>&1 >"$infra_inputs"); then
    ok "$infra_config"; infra_ok=1
  else invalid "$infra_config: $(why "$refusal" "$infra_config")"; fi
fi

# The edge config as render-edge renders it: against the platform inputs the infra layer wrote,
# else those the infra config would give (documentation addresses for the servers), else the
# committed example's.
edge_config=${EDGE_CONFIG:-config/edge.json}
if [[ ! -f "$edge_config" ]]; then miss "$edge_config (cp config/edge.example.json $edge_config, then edit)"
elif built render-edge "$edge_config"; then
  placeholder=""
  if [[ ! -f "$inputs" ]]; then
    placeholder=$infra_inputs
    if (( infra_ok )); then
      inputs_said="the platform inputs $infra_config gives"
    else
      cp "$(dirname "$0")/../config/platform-inputs.example.json" "$placeholder"
      inputs_said="config/platform-inputs.example.json"
    fi
    inputs=$placeholder
  else inputs_said=$inputs; fi
  if refusal=$("$bin/render-edge" --inputs "$inputs" --config "$edge_config" 2>&1 >/dev/null); then
    ok "$edge_config (rendered with $inputs_said)"
  else
    refusal=$(why "$refusal" "$edge_config")
    [[ -z "$placeholder" ]] || refusal=${refusal//$placeholder/$inputs_said}
    invalid "$edge_config: $refusal"
  fi
fi

# The Talos images of the current pins, recorded on this machine (apply-infra refuses without).
# shellcheck source=talos-digests.sh
. "$(dirname "$0")/talos-digests.sh"
if [[ "$profile" == edge ]]; then
  unrecorded=()
  for image in control-plane worker; do
    [[ -n "$(recorded_sha256 "$image")" ]] || unrecorded+=("$image")
  done
  if ((${#unrecorded[@]} == 0)); then ok "the Talos $TALOS_VERSION images' sha256 recorded in $TALOS_DIGESTS"
  else miss "the Talos $TALOS_VERSION images' sha256 (${unrecorded[*]}) are not recorded in $TALOS_DIGESTS: make talos-image-digests"; fi
fi

# The platform config as render-platform reads it, and the vendored CRDs.
platform_config=${PLATFORM_CONFIG:-config/platform.json}
render=$bin/render-platform
if [[ ! -f "$platform_config" ]]; then miss "$platform_config (cp config/platform.example.json $platform_config, then edit)"
elif ! built render-platform "$platform_config"; then :
elif refusal=$("$render" --config "$platform_config" cilium 2>&1 >/dev/null); then ok "$platform_config"
else invalid "$platform_config: $(why "$refusal" "$platform_config")"; fi
vendor_dir=${VENDOR_DIR:-k8s/vendor}/gateway-api-$GATEWAY_API_VERSION
bad=0; pins=0
while IFS= read -r line; do
  pin=${line#*=}; file=${pin%%:*}; pins=$((pins + 1))
  [[ -f "$vendor_dir/$file" && "$(sha256sum "$vendor_dir/$file" | cut -d' ' -f1)" == "${pin#*:}" ]] || bad=$((bad + 1))
done < <(grep -E '^VENDOR_GATEWAY_API_[A-Z0-9_]+=' "${VERSIONS_FILE:-$(dirname "$0")/../k8s/versions.env}")
if (( bad == 0 && pins > 0 )); then ok "Gateway API $GATEWAY_API_VERSION CRDs vendored in $vendor_dir"
else miss "Gateway API $GATEWAY_API_VERSION CRDs: $bad of $pins files missing or not matching their pins in $vendor_dir (make vendor)"; fi
if (( missing )); then echo "make check: something is missing or invalid (see above)" >&2; exit 1; fi
echo "make check: ready"
