#!/usr/bin/env bash
# Layer 1, Talos half: machine configs from talos/patches/, the worker's disk image, the node
# pipeline, the one etcd bootstrap, and the outputs the next layers read.
#
#   pipelines/infra.sh configs     secrets once (kept), then controlplane.yaml, worker.yaml, talosconfig
#   pipelines/infra.sh image       the Talos metal image for the worker, checked against its release
#   pipelines/infra.sh nodes       scw-infra apply | scw-rescue-flash | talos-apply-insecure
#   pipelines/infra.sh bootstrap   etcd on the first control plane, once
#   pipelines/infra.sh outputs     talos/_out/kubeconfig (0600) and talos/_out/platform-inputs.json
#   pipelines/infra.sh apply       all of the above, in this order
#
# Environment (set by the Makefile): OUT, INFRA_CONFIG, BIN, TALOS_VERSION, TALOS_RELEASE_URL;
# PATCHES (default talos/patches). Everything generated is under $OUT (git-ignored); what holds a
# secret (secrets bundle, machine configs, talosconfig, kubeconfig) is mode 0600. The config and
# the records are read and written by the tools only (scw-infra names, platform-inputs, apply
# --previous): this script keeps the values they print, and moves files.
set -euo pipefail

step=${1:?usage: infra.sh configs|image|nodes|bootstrap|outputs|apply}
: "${OUT:?}" "${INFRA_CONFIG:?}"
PATCHES=${PATCHES:-talos/patches}
log() { printf 'infra: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -f "$INFRA_CONFIG" ]] || die "$INFRA_CONFIG is missing: cp config/infra.example.json $INFRA_CONFIG, then edit it"

need_tool() { [[ -x "${BIN:?}/$1" ]] || die "$BIN/$1 is not built (make apply-infra builds it)"; }

# The values this script needs, as scw-infra reads them from the config (and, with --inventory
# FILE, from the inventory): CLUSTER_NAME, CLUSTER_ENDPOINT, API_HOST, INSTALL_DISK,
# SSH_PRIVATE_KEY, FIRST_CONTROL_PLANE. A bad config stops here, with scw-infra's message.
read_names() {
  need_tool scw-infra
  local pairs key value
  pairs=$("$BIN/scw-infra" names --config "$INFRA_CONFIG" "$@")
  while IFS='=' read -r key value; do
    case $key in
      CLUSTER_NAME | CLUSTER_ENDPOINT | API_HOST | INSTALL_DISK | SSH_PRIVATE_KEY | FIRST_CONTROL_PLANE)
        printf -v "$key" '%s' "$value" ;;
    esac
  done <<<"$pairs"
}

secrets=$OUT/secrets.yaml
talosconfig=$OUT/talosconfig
inventory=$OUT/inventory.json

need_talosctl() { command -v talosctl >/dev/null || die "talosctl is not installed (same minor as ${TALOS_VERSION:-the cluster})"; }

configs() {
  need_talosctl
  read_names
  (umask 077; mkdir -p "$OUT/patches")
  if [[ ! -s "$secrets" ]]; then
    # The cluster's CAs, tokens and keys: made once and kept, or every config would belong to a
    # different cluster. talosctl refuses to overwrite it without --force, which is never given.
    log "generating the secrets bundle $secrets (mode 0600, kept across runs)"
    (umask 077; talosctl gen secrets -o "$secrets" >&2)
  fi
  chmod 600 "$secrets"
  # The patches, with the host of cluster_endpoint and the worker's disk filled in.
  local args=() patch name rendered changed=0
  for patch in "$PATCHES"/[0-9]*.yaml; do
    name=$(basename "$patch")
    rendered=$OUT/patches/$name
    sed -e "s|\${API_HOSTNAME}|$API_HOST|g" -e "s|\${INSTALL_DISK}|$INSTALL_DISK|g" "$patch" > "$rendered.tmp"
    if ! cmp -s "$rendered.tmp" "$rendered"; then mv "$rendered.tmp" "$rendered"; changed=1; else rm "$rendered.tmp"; fi
    grep -q '\${' "$rendered" && die "$patch: a placeholder is left in $rendered"
    case "$name" in
      *.controlplane.yaml) args+=(--config-patch-control-plane "@$rendered") ;;
      *.worker.yaml) args+=(--config-patch-worker "@$rendered") ;;
      *) args+=(--config-patch "@$rendered") ;;
    esac
  done
  # Regenerated only when an input changed, so the digests talos-apply-insecure records stay
  # the same across runs.
  local outputs=("$OUT/controlplane.yaml" "$OUT/worker.yaml" "$talosconfig") stale=$changed f
  for f in "${outputs[@]}"; do
    [[ -s "$f" && "$f" -nt "$secrets" && "$f" -nt "$INFRA_CONFIG" ]] || stale=1
  done
  if (( stale )); then
    log "generating the machine configs of $CLUSTER_NAME ($CLUSTER_ENDPOINT) in $OUT"
    # Kubernetes is Talos's own default for this version: no --kubernetes-version.
    (umask 077; talosctl gen config "$CLUSTER_NAME" "$CLUSTER_ENDPOINT" --with-secrets "$secrets" \
      "${args[@]}" --output "$OUT" --force >&2)
  else
    log "machine configs are up to date"
  fi
  chmod 600 "${outputs[@]}"
}

image() {
  : "${TALOS_VERSION:?}" "${TALOS_RELEASE_URL:?}"
  local file=$OUT/talos-$TALOS_VERSION-metal-amd64.raw.zst
  if [[ -s "$file" ]]; then echo "$file"; return; fi
  mkdir -p "$OUT"
  log "downloading metal-amd64.raw.zst of Talos $TALOS_VERSION"
  curl -fsSL --retry 3 -o "$OUT/sha256sum.txt.part" "$TALOS_RELEASE_URL/sha256sum.txt"
  curl -fSL --retry 3 -o "$file.part" "$TALOS_RELEASE_URL/metal-amd64.raw.zst"
  local want got
  want=$(awk '$2 == "metal-amd64.raw.zst" || $2 == "*metal-amd64.raw.zst" {print $1}' "$OUT/sha256sum.txt.part")
  got=$(sha256sum "$file.part" | cut -d' ' -f1)
  rm -f "$OUT/sha256sum.txt.part"
  [[ -n "$want" ]] || { rm -f "$file.part"; die "sha256sum.txt of $TALOS_VERSION lists no metal-amd64.raw.zst"; }
  [[ "$got" == "$want" ]] || { rm -f "$file.part"; die "metal-amd64.raw.zst: sha256 $got, the release says $want: refused"; }
  mv "$file.part" "$file"
  echo "$file"
}

nodes() {
  : "${TALOS_VERSION:?}"
  local tool metal
  for tool in scw-infra scw-rescue-flash talos-apply-insecure; do need_tool "$tool"; done
  metal=$(image)
  read_names
  # scw-infra finds the nodes again from Scaleway and carries over, by server id, what the later
  # steps recorded in the last inventory (image flashed, config applied), so a re-run skips it.
  # Each tool reads the inventory and writes it back enriched; the file is replaced only when the
  # whole pipe succeeded (a failing tool still writes what it did, kept as inventory.partial).
  "$BIN/scw-infra" apply --config "$INFRA_CONFIG" --talos-version "$TALOS_VERSION" \
      --previous "$inventory" \
    | "$BIN/scw-rescue-flash" --image "$metal" --disk "$INSTALL_DISK" --ssh-key "$SSH_PRIVATE_KEY" \
    | "$BIN/talos-apply-insecure" --config-dir "$OUT" \
    > "$inventory.partial"
  mv "$inventory.partial" "$inventory"
}

need_inventory() {
  [[ -s "$inventory" ]] || die "$inventory is missing: run the nodes step (make apply-infra) first"
}

bootstrap() {
  need_talosctl
  local marker=$OUT/bootstrapped ip
  if [[ -f "$marker" ]]; then log "etcd already bootstrapped ($(cat "$marker"))"; return; fi
  need_inventory
  read_names --inventory "$inventory"
  ip=$FIRST_CONTROL_PLANE
  log "bootstrapping etcd on $ip"
  local output
  if output=$(talosctl --talosconfig "$talosconfig" --endpoints "$ip" --nodes "$ip" bootstrap 2>&1); then
    :
  elif grep -q 'AlreadyExists' <<<"$output"; then
    # Talos refuses a second bootstrap: etcd is already there, which is what we want.
    log "etcd was already bootstrapped on $ip"
  else
    printf '%s\n' "$output" >&2
    die "bootstrap on $ip failed"
  fi
  echo "$ip" > "$marker"
}

outputs() {
  need_talosctl
  need_inventory
  read_names --inventory "$inventory"
  local ip=$FIRST_CONTROL_PLANE
  (umask 077; talosctl --talosconfig "$talosconfig" --endpoints "$ip" --nodes "$ip" \
    kubeconfig "$OUT/kubeconfig" --merge=false --force >&2)
  chmod 600 "$OUT/kubeconfig"
  "$BIN/scw-infra" platform-inputs --config "$INFRA_CONFIG" --inventory "$inventory" \
    > "$OUT/platform-inputs.json.tmp"
  mv "$OUT/platform-inputs.json.tmp" "$OUT/platform-inputs.json"
  log "wrote $OUT/kubeconfig (0600) and $OUT/platform-inputs.json"
}

case "$step" in
  configs) configs ;;
  image) image >/dev/null ;;
  nodes) nodes ;;
  bootstrap) bootstrap ;;
  outputs) outputs ;;
  apply) configs; nodes; bootstrap; outputs ;;
  *) die "unknown step '$step' (configs|image|nodes|bootstrap|outputs|apply)" ;;
esac
