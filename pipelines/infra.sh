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
# secret (secrets bundle, machine configs, talosconfig, kubeconfig) is mode 0600.
set -euo pipefail

step=${1:?usage: infra.sh configs|image|nodes|bootstrap|outputs|apply}
: "${OUT:?}" "${INFRA_CONFIG:?}"
PATCHES=${PATCHES:-talos/patches}
log() { printf 'infra: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -f "$INFRA_CONFIG" ]] || die "$INFRA_CONFIG is missing: cp config/infra.example.json $INFRA_CONFIG, then edit it"
command -v python3 >/dev/null || die "python3 is needed to read $INFRA_CONFIG"

# One field of the infra config (dotted path), or the default; `~/` is the caller's home.
field() {
  python3 - "$INFRA_CONFIG" "$1" "${2-}" <<'PY'
import json, os, sys
path, dotted, default = sys.argv[1], sys.argv[2], sys.argv[3]
value = json.load(open(path))
for key in dotted.split("."):
    value = value.get(key) if isinstance(value, dict) else None
if value is None:
    if default == "":
        sys.exit(f"{path}: field `{dotted}` is missing")
    value = default
print(os.path.expanduser(value) if isinstance(value, str) else value)
PY
}

secrets=$OUT/secrets.yaml
talosconfig=$OUT/talosconfig
inventory=$OUT/inventory.json

need_talosctl() { command -v talosctl >/dev/null || die "talosctl is not installed (same minor as ${TALOS_VERSION:-the cluster})"; }

configs() {
  need_talosctl
  local cluster_name endpoint host disk
  cluster_name=$(field cluster_name)
  endpoint=$(field cluster_endpoint)
  host=${endpoint#https://}; host=${host%%/*}; host=${host%:*}
  [[ "$endpoint" == https://* && -n "$host" ]] || die "$INFRA_CONFIG: field \`cluster_endpoint\`: '$endpoint' is not https://<host>:<port>"
  disk=$(field worker.install_disk /dev/sda)
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
    sed -e "s|\${API_HOSTNAME}|$host|g" -e "s|\${INSTALL_DISK}|$disk|g" "$patch" > "$rendered.tmp"
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
    log "generating the machine configs of $cluster_name ($endpoint) in $OUT"
    # Kubernetes is Talos's own default for this version: no --kubernetes-version.
    (umask 077; talosctl gen config "$cluster_name" "$endpoint" --with-secrets "$secrets" \
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

# scw-infra finds the nodes again from Scaleway; what the later steps did to them (image flashed,
# config applied) is carried over from the last inventory, by server id, so a re-run skips it.
keep_steps() {
  python3 -c '
import json, os, sys
fresh = json.load(sys.stdin)
if os.path.exists(sys.argv[1]):
    old = {n["id"]: n.get("steps", {}) for n in json.load(open(sys.argv[1]))["nodes"]}
    for node in fresh["nodes"]:
        node["steps"] = {**old.get(node["id"], {}), **node.get("steps", {})}
json.dump(fresh, sys.stdout)
' "$inventory"
}

nodes() {
  : "${BIN:?}" "${TALOS_VERSION:?}"
  local tool
  for tool in scw-infra scw-rescue-flash talos-apply-insecure; do
    [[ -x "$BIN/$tool" ]] || die "$BIN/$tool is not built (make apply-infra builds it; scw-infra comes from the infra branch)"
  done
  local metal disk key
  metal=$(image)
  disk=$(field worker.install_disk /dev/sda)
  key=$(field ssh_private_key_path "$HOME/.ssh/id_ed25519")
  # Each tool reads the inventory and writes it back enriched; the file is replaced only when the
  # whole pipe succeeded (a failing tool still writes what it did, kept as inventory.partial).
  "$BIN/scw-infra" apply --config "$INFRA_CONFIG" --talos-version "$TALOS_VERSION" \
    | keep_steps \
    | "$BIN/scw-rescue-flash" --image "$metal" --disk "$disk" --ssh-key "$key" \
    | "$BIN/talos-apply-insecure" --config-dir "$OUT" \
    > "$inventory.partial"
  mv "$inventory.partial" "$inventory"
}

# The first control plane's public address, from the inventory.
first_control_plane() {
  [[ -s "$inventory" ]] || die "$inventory is missing: run the nodes step (make apply-infra) first"
  python3 - "$inventory" <<'PY'
import json, sys
nodes = [n for n in json.load(open(sys.argv[1]))["nodes"] if n["role"] == "controlplane"]
if not nodes or not nodes[0].get("public_ipv4"):
    sys.exit(f"{sys.argv[1]}: no control plane with a public_ipv4")
print(nodes[0]["public_ipv4"])
PY
}

bootstrap() {
  need_talosctl
  local marker=$OUT/bootstrapped ip
  if [[ -f "$marker" ]]; then log "etcd already bootstrapped ($(cat "$marker"))"; return; fi
  ip=$(first_control_plane)
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
  local ip
  ip=$(first_control_plane)
  (umask 077; talosctl --talosconfig "$talosconfig" --endpoints "$ip" --nodes "$ip" \
    kubeconfig "$OUT/kubeconfig" --merge=false --force >&2)
  chmod 600 "$OUT/kubeconfig"
  python3 - "$inventory" "$INFRA_CONFIG" "$OUT/platform-inputs.json.tmp" <<'PY'
import json, sys
inventory, infra = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
workers = [n for n in inventory["nodes"] if n["role"] == "worker" and n["kind"] == "elastic-metal"]
if not workers or not workers[0].get("public_ipv4"):
    sys.exit(f"{sys.argv[1]}: no Elastic Metal worker with a public_ipv4")
if "dns_zone" not in infra:
    sys.exit(f"{sys.argv[2]}: field `dns_zone` is missing")
record = {
    "kind": "PlatformInputs", "version": 1,
    "cluster_name": inventory["cluster_name"],
    "cluster_endpoint": inventory["cluster_endpoint"],
    "dns_zone": infra["dns_zone"],
    "edge_node_name": workers[0]["name"],
    "edge_public_ipv4": workers[0]["public_ipv4"],
}
with open(sys.argv[3], "w") as f:
    json.dump(record, f, indent=2)
    f.write("\n")
PY
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
