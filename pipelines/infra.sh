#!/usr/bin/env bash
# Layer 1, Talos half: machine configs from talos/patches/, the Talos images, the node pipeline,
# the etcd bootstrap, and the outputs the next layers read.
#
#   pipelines/infra.sh configs     secrets once (kept), then controlplane.yaml, worker.yaml (the
#                                  workers' template), worker-<name>.yaml for each worker and
#                                  talosconfig, each node's checked by talosctl validate
#   pipelines/infra.sh image       the worker's Talos image from the Image Factory, checked
#                                  against its pin (the control planes' is scw-infra's to import)
#   pipelines/infra.sh digests     download both images once, record their sha256 in
#                                  $TALOS_DIGESTS (make talos-image-digests) and keep both files
#                                  in $OUT for the apply
#   pipelines/infra.sh plan        the dry-run twin of the nodes step's scw-infra apply: the plan
#                                  it would run (a JSON line a step), nothing changed
#   pipelines/infra.sh nodes       scw-infra apply | scw-rescue-flash | talos-apply-insecure
#                                  | scw-rescue-flash --tag-proven | scw-infra clear-user-data
#   pipelines/infra.sh bootstrap   etcd on the first control plane, unless the cluster runs it
#                                  (SNAPSHOT=FILE: recovered from that snapshot, for
#                                  control planes all lost and made again)
#   pipelines/infra.sh outputs     talos/_out/kubeconfig (0600) and talos/_out/platform-inputs.json
#   pipelines/infra.sh apply       its preconditions checked (apply_preconditions), then configs,
#                                  image, nodes, bootstrap, outputs, in this order
#   pipelines/infra.sh upgrade-plan  the dry-run twin of upgrade: talos-lifecycle's plan (a JSON
#                                  line a step), nothing changed
#   pipelines/infra.sh upgrade     every node to TALOS_VERSION (make upgrade-talos): configs
#                                  regenerated and validated, talos-lifecycle upgrade, then the
#                                  worker's upgrade recorded on its server
#   pipelines/infra.sh upgrade-k8s-plan  the dry-run twin of upgrade-k8s
#   pipelines/infra.sh upgrade-k8s Kubernetes to KUBERNETES_VERSION (make upgrade-k8s):
#                                  talos-lifecycle upgrade-k8s, then the configs regenerated
#   pipelines/infra.sh replace-plan  the dry-run twin of replace: the member's removal planned
#                                  behind its gate, the Instance's destroy plan, the steps after
#   pipelines/infra.sh add-worker-plan  the dry-run twin of add-worker
#   pipelines/infra.sh add-worker  the worker NODE, newly listed under workers in the config,
#                                  ordered, flashed and configured (apply's steps); its DNS
#                                  records come once the edge runs on it (make add-worker)
#   pipelines/infra.sh remove-worker-plan  the dry-run twin of remove-worker
#   pipelines/infra.sh remove-worker  the worker NODE, taken out of workers in the config: its
#                                  records out of DNS, a wait of their TTL, drained, its Node
#                                  deleted, its server destroyed (make remove-worker)
#   pipelines/infra.sh replace     the control plane NODE made again (make replace-control-plane):
#                                  its etcd member out (FAILED=yes: through another control
#                                  plane), its Node deleted, its Instance and root volume
#                                  destroyed, apply's steps, then a wait until etcd and every node
#                                  are healthy
#
# Environment (set by the Makefile): OUT, INFRA_CONFIG, BIN; VERSIONS_FILE (default
# k8s/versions.env: TALOS_VERSION, KUBERNETES_VERSION and the Image Factory pins), TALOS_DIGESTS
# (default config/talos-image-digests.env: the images' sha256, recorded there), PATCHES
# (default talos/patches), REFLASH=yes (let scw-rescue-flash write over a worker that runs
# another image: it wipes the node), WORKER_CERT_FINGERPRINT (the worker's maintenance
# certificate fingerprint, read on its console: pins the first contact), SNAPSHOT and
# SKIP_HASH_CHECK=yes (the bootstrap recovers etcd from that snapshot), BOOTSTRAP_TRIES and
# BOOTSTRAP_INTERVAL (how long the bootstrap waits for booting control planes: 90 times 10 s),
# TALOS_API_PORT (where every node's Talos API answers: 50000 unless a tunnel says otherwise).
# Everything generated is under $OUT
# (git-ignored); what holds a secret (secrets bundle, machine configs, talosconfig, kubeconfig)
# is mode 0600. The config and the records are read and written by the tools only (scw-infra
# names, talos-patches, platform-inputs, apply --previous): this script keeps the values they
# print, and moves files. Only scw-infra and scw-rescue-flash get the Scaleway secret key.
set -euo pipefail

step=${1:?usage: infra.sh configs|image|digests|plan|nodes|bootstrap|outputs|apply|upgrade-plan|upgrade|upgrade-k8s-plan|upgrade-k8s|replace-plan|replace|add-worker-plan|add-worker|remove-worker-plan|remove-worker}
: "${OUT:?}" "${INFRA_CONFIG:?}"
PATCHES=${PATCHES:-talos/patches}
VERSIONS_FILE=${VERSIONS_FILE:-$(dirname "$0")/../k8s/versions.env}
# shellcheck source=../k8s/versions.env
source "$VERSIONS_FILE"
log() { printf 'infra: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -f "$INFRA_CONFIG" ]] || die "$INFRA_CONFIG is missing: cp config/infra.example.json $INFRA_CONFIG, then edit it"

need_tool() { [[ -x "${BIN:?}/$1" ]] || die "$BIN/$1 is not built (make apply-infra builds it)"; }

# shellcheck source=without-secrets.sh
. "$(dirname "$0")/without-secrets.sh"
# shellcheck source=talos-digests.sh
. "$(dirname "$0")/talos-digests.sh"
talos() { without_secrets talosctl "$@"; }
# A node's Talos API: its address at TALOS_API_PORT (50000, apid's port, unless a tunnel says
# otherwise), as talos-lifecycle reaches it in the day-2 steps that run these ones too.
endpoint() { printf '%s:%s' "$1" "${TALOS_API_PORT:-50000}"; }

# The values this script needs, as scw-infra reads them from the config (and, with --inventory
# FILE, from the inventory): CLUSTER_NAME, CLUSTER_ENDPOINT, WORKER_NAMES (comma separated),
# WORKER_SCHEMATIC, WORKER_INSTALLER_IMAGE, CONTROL_PLANE_INSTALLER_IMAGE, SSH_PRIVATE_KEY,
# DNS_TTL, FIRST_CONTROL_PLANE, CONTROL_PLANE_ADDRESSES (comma separated). A bad config stops
# here, with scw-infra's message.
read_names() {
  need_tool scw-infra
  local pairs key value
  pairs=$("$BIN/scw-infra" names --config "$INFRA_CONFIG" "$@")
  while IFS='=' read -r key value; do
    case $key in
      CLUSTER_NAME | CLUSTER_ENDPOINT | WORKER_NAMES | WORKER_SCHEMATIC | WORKER_INSTALLER_IMAGE | \
        CONTROL_PLANE_INSTALLER_IMAGE | SSH_PRIVATE_KEY | DNS_TTL | FIRST_CONTROL_PLANE | \
        CONTROL_PLANE_ADDRESSES)
        printf -v "$key" '%s' "$value" ;;
    esac
  done <<<"$pairs"
}

secrets=$OUT/secrets.yaml
talosconfig=$OUT/talosconfig
inventory=$OUT/inventory.json

# talosctl must have the cluster's minor: Talos supports its client within the same minor only.
need_talosctl() {
  command -v talosctl >/dev/null || die "talosctl is not installed (the cluster runs $TALOS_VERSION: make tools builds a ${TALOS_VERSION%.*}.x)"
  local client
  client=$(talos version --client --short 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*' | head -1 || true)
  [[ "$client" == "${TALOS_VERSION%.*}" ]] \
    || die "talosctl ${client:-of unknown version} is installed, the cluster runs $TALOS_VERSION: Talos supports a talosctl of the same minor only (${TALOS_VERSION%.*}.x)"
}

# Everything `apply` needs that is known before it writes anything, checked before it writes
# anything (a refusal leaves $OUT as it was): the config valid (scw-infra reads it), the node
# tools built, a talosctl of the cluster's minor, both images' digests recorded in
# $TALOS_DIGESTS.
apply_preconditions() {
  local tool
  for tool in scw-infra scw-rescue-flash talos-apply-insecure; do need_tool "$tool"; done
  read_names
  need_talosctl
  pinned_sha256 control-plane >/dev/null
  pinned_sha256 worker >/dev/null
  need_snapshot "${SNAPSHOT:-}"
}

# SNAPSHOT, when given, names a file (checked before the apply writes anything, and again by the
# bootstrap step run on its own).
need_snapshot() {
  [[ -z "$1" || -f "$1" ]] || die "SNAPSHOT: $1 is not a file (a snapshot make etcd-snapshot wrote)"
}

# Whether the file $1 must be made again: missing or empty, or not newer than every other
# argument (its inputs).
out_of_date() {
  local out=$1 input
  shift
  [[ -s "$out" ]] || return 0
  for input in "$@"; do [[ "$out" -nt "$input" ]] || return 0; done
  return 1
}

configs() {
  read_names
  need_talosctl
  (umask 077; mkdir -p "$OUT/patches")
  if [[ ! -s "$secrets" ]]; then
    # The cluster's CAs, tokens and keys: made once and kept, or every config would belong to a
    # different cluster. talosctl refuses to overwrite it without --force, which is never given.
    log "generating the secrets bundle $secrets (mode 0600, kept across runs)"
    (umask 077; talos gen secrets -o "$secrets" >&2)
  fi
  chmod 600 "$secrets"
  # The patches, with the config's values filled in by scw-infra (each value checked where it
  # enters; no program is built from them here). It prints `<gen config flag><TAB><file>` for
  # the shared ones, then `--each-worker=<name><TAB><file>` for each worker's own.
  local listing flag rendered args=() inputs=("$secrets" "$INFRA_CONFIG") each_worker=() each_patch=()
  listing=$("$BIN/scw-infra" talos-patches --config "$INFRA_CONFIG" --patches "$PATCHES" --out-dir "$OUT/patches")
  while IFS=$'\t' read -r flag rendered; do
    if [[ "$flag" == --each-worker=* ]]; then
      each_worker+=("${flag#--each-worker=}")
      each_patch+=("$rendered")
    else
      args+=("$flag" "@$rendered")
      inputs+=("$rendered")
    fi
  done <<<"$listing"
  # Regenerated only when an input changed (a rendered patch is rewritten only when its content
  # changes), so the digests talos-apply-insecure records stay the same across runs.
  # The pins gen config takes are kept beside the configs: a bump of another pin changes nothing.
  # worker.yaml is the workers' common template: each worker's own config is made from it below.
  local outputs=("$OUT/controlplane.yaml" "$OUT/worker.yaml" "$talosconfig") stale=0 f
  local stamp=$OUT/configs.pins pins="TALOS_VERSION=$TALOS_VERSION KUBERNETES_VERSION=$KUBERNETES_VERSION"
  [[ "$(cat "$stamp" 2>/dev/null)" == "$pins" ]] || stale=1
  for f in "${outputs[@]}"; do
    if out_of_date "$f" "${inputs[@]}"; then stale=1; fi
  done
  if (( stale )); then
    log "generating the machine configs of $CLUSTER_NAME ($CLUSTER_ENDPOINT) for Talos $TALOS_VERSION, Kubernetes $KUBERNETES_VERSION in $OUT"
    # --talos-version: the config contract of the nodes, not of the talosctl that runs this.
    # --kubernetes-version: k8s/versions.env is the one declaration of the cluster's Kubernetes.
    # --install-image: a record of the installer the control planes' upgrades run (the Image
    # Factory's Scaleway installer of their schematic at TALOS_VERSION; gen config would name
    # the release's metal installer of its own version); the worker's patch replaces it with its
    # own. Talos reads machine.install.image only to install a machine that is not installed
    # yet; `talosctl upgrade` installs what its --image says (make upgrade-talos passes these).
    (umask 077; talos gen config "$CLUSTER_NAME" "$CLUSTER_ENDPOINT" --with-secrets "$secrets" \
      --talos-version "$TALOS_VERSION" --kubernetes-version "$KUBERNETES_VERSION" \
      --install-image "$CONTROL_PLANE_INSTALLER_IMAGE" \
      "${args[@]}" --output "$OUT" --force >&2)
    printf '%s\n' "$pins" > "$stamp"
  else
    log "machine configs are up to date"
  fi
  chmod 600 "${outputs[@]}"
  # As the nodes will check them: the control planes are Scaleway Instances (cloud), the workers
  # bare metal; a warning is an error.
  talos validate --config "$OUT/controlplane.yaml" --mode cloud --strict >&2 \
    || die "$OUT/controlplane.yaml: refused by talosctl validate (mode cloud)"
  local workers worker
  IFS=, read -ra workers <<<"$WORKER_NAMES"
  for worker in "${workers[@]}"; do
    worker_config "$worker"
  done
  # A worker no longer in the config: its config (which holds the cluster's secrets) goes too.
  for f in "$OUT"/worker-*.yaml; do
    [[ -e "$f" ]] || continue
    worker=${f##*/worker-}
    worker=${worker%.yaml}
    if [[ " ${workers[*]} " != *" $worker "* ]]; then
      log "removing $f: $worker is no longer a worker of $INFRA_CONFIG"
      rm -f "$f"
    fi
  done
}

# The machine config of the worker $1, worker-$1.yaml: the common template worker.yaml with the
# worker's own patches (the arrays each_worker and each_patch of configs), made again only when
# one of them changed, then validated as its node will (metal, strictly).
worker_config() {
  local name=$1 config=$OUT/worker-$1.yaml files=() args=() i
  for i in "${!each_worker[@]}"; do
    if [[ "${each_worker[$i]}" == "$name" ]]; then
      files+=("${each_patch[$i]}")
      args+=(--patch "@${each_patch[$i]}")
    fi
  done
  if out_of_date "$config" "$OUT/worker.yaml" "${files[@]}"; then
    log "making $config: worker.yaml with $name's own patches"
    (umask 077; talos machineconfig patch "$OUT/worker.yaml" "${args[@]}" --output "$config.part" >&2)
    mv "$config.part" "$config"
  fi
  chmod 600 "$config"
  talos validate --config "$config" --mode metal --strict >&2 \
    || die "$config: refused by talosctl validate (mode metal)"
}

# A recorded sha256, or a stop saying how to record it.
pinned_sha256() {
  local value
  value=$(recorded_sha256 "$1")
  [[ -n "$value" ]] \
    || die "$TALOS_DIGESTS records no sha256 of the $1 image $(image_key "$1"): record the Image Factory's images of Talos $TALOS_VERSION once with make talos-image-digests"
  printf '%s' "$value"
}

control_plane_image_url() { image_url control-plane; }
worker_image_url() { image_url worker; }

# One request to the Image Factory: curl with the arguments after $1, which says what it is for.
# A factory that was not reached (curl failed: no such name, no route, refused, TLS, timeout;
# curl's own message is on stderr) is told apart from one that answered with an error status.
factory_request() {
  local what=$1 status rc=0 host=${TALOS_FACTORY_URL#*://}
  shift
  host=${host%%/*}
  status=$(without_secrets curl -sS --globoff --retry 3 --write-out '%{http_code}' "$@") || rc=$?
  (( rc == 0 )) || die "could not reach $host for $what (curl exit $rc, its message above): check the name and this machine's network"
  [[ "$status" == 2?? ]] || die "the Image Factory at $host answered HTTP $status to $what"
}

# Registers the worker's schematic with the Image Factory (idempotent: its id is the digest of
# its content), which serves images of known schematics only.
register_schematic() {
  "$BIN/scw-infra" talos-schematic --config "$INFRA_CONFIG" > "$OUT/metal-schematic.yaml"
  factory_request "the worker's schematic $WORKER_SCHEMATIC ($OUT/metal-schematic.yaml)" \
    -X POST -H 'Content-Type: application/yaml' --data-binary "@$OUT/metal-schematic.yaml" \
    -o /dev/null "$TALOS_FACTORY_URL/schematics"
}

# Downloads $1 to $2 (atomically) and prints its sha256.
download() {
  # In a subshell: its stop leaves this function to remove the partial file.
  (factory_request "the download of $1" -L -o "$2.part" "$1") || { rm -f "$2.part"; exit 1; }
  sha256sum "$2.part" | cut -d' ' -f1
}

worker_image_file() {
  printf '%s/talos-%s-%s-metal-amd64.raw.zst' "$OUT" "$TALOS_VERSION" "${WORKER_SCHEMATIC:0:12}"
}

# The control planes' image as the digests step downloaded it: scw-infra imports it from there
# (when it holds the pinned sha256) instead of downloading it a second time.
control_plane_image_file() {
  printf '%s/talos-%s-%s-scaleway-amd64.raw.zst' "$OUT" "$TALOS_VERSION" "${TALOS_CONTROL_PLANE_SCHEMATIC:0:12}"
}

# The worker's disk image, downloaded once and checked against its pin; prints its path (the
# names read first).
image() {
  local want file got
  want=$(pinned_sha256 worker)
  file=$(worker_image_file)
  if [[ -s "$file" ]] && [[ "$(sha256sum "$file" | cut -d' ' -f1)" == "$want" ]]; then echo "$file"; return; fi
  mkdir -p "$OUT"
  register_schematic
  log "downloading metal-amd64.raw.zst of Talos $TALOS_VERSION, schematic $WORKER_SCHEMATIC"
  got=$(download "$(worker_image_url)" "$file")
  if [[ "$got" != "$want" ]]; then
    rm -f "$file.part"
    die "$(worker_image_url): sha256 $got, $TALOS_DIGESTS records $want: refused"
  fi
  mv "$file.part" "$file"
  echo "$file"
}

# Trust on first download, over https from the Image Factory: records both images' sha256 in
# $TALOS_DIGESTS (replacing their earlier lines, keeping other versions') and prints the lines.
digests() {
  read_names
  mkdir -p "$OUT"
  register_schematic
  local worker control_plane lines
  log "downloading both images of Talos $TALOS_VERSION to record their digests"
  worker=$(download "$(worker_image_url)" "$(worker_image_file)")
  mv "$(worker_image_file).part" "$(worker_image_file)"
  control_plane=$(download "$(control_plane_image_url)" "$(control_plane_image_file)")
  mv "$(control_plane_image_file).part" "$(control_plane_image_file)"
  lines=$(printf '%s=%s\n%s=%s' "$(control_plane_image_key)" "$control_plane" "$(worker_image_key)" "$worker")
  mkdir -p "$(dirname "$TALOS_DIGESTS")"
  {
    echo "# The sha256 of the Talos images, <TALOS_VERSION>/<schematic>/<file>=<sha256>: recorded by"
    echo "# make talos-image-digests over https from the Image Factory (trust on first download)."
    if [[ -f "$TALOS_DIGESTS" ]]; then
      grep -v '^#' "$TALOS_DIGESTS" | grep -vF -e "$(control_plane_image_key)=" -e "$(worker_image_key)=" || true
    fi
    printf '%s\n' "$lines"
  } >"$TALOS_DIGESTS.tmp"
  chmod 644 "$TALOS_DIGESTS.tmp"
  mv "$TALOS_DIGESTS.tmp" "$TALOS_DIGESTS"
  log "recorded both images of Talos $TALOS_VERSION in $TALOS_DIGESTS"
  printf '%s\n' "$lines"
}

nodes() {
  local tool metal control_plane_sha256
  for tool in scw-infra scw-rescue-flash talos-apply-insecure; do need_tool "$tool"; done
  [[ -s "$talosconfig" ]] || die "$talosconfig is missing: run the configs step (make apply-infra) first"
  control_plane_sha256=$(pinned_sha256 control-plane)
  read_names
  metal=$(image)
  local reflash=() pins=()
  [[ "${REFLASH:-}" == yes ]] && reflash=(--reflash)
  # The worker's certificate fingerprint, read on its console, pins the first contact instead of
  # trusting it (talos-apply-insecure --cert-fingerprint).
  [[ -n "${WORKER_CERT_FINGERPRINT:-}" ]] && pins=(--cert-fingerprint "$WORKER_CERT_FINGERPRINT")
  # scw-infra finds the nodes again from Scaleway (importing the control planes' image when it is
  # missing; giving each new control plane its config as user data, which Talos's Scaleway
  # platform reads at boot, so it never opens maintenance mode) and carries over, by server id,
  # what the later steps recorded in the last inventory, so a re-run skips it; it records each
  # worker's install_disk, which scw-rescue-flash writes, and talos-apply-insecure gives each
  # worker its own worker-<name>.yaml. Each tool reads the inventory and writes it back enriched; the file is replaced only when the whole pipe
  # succeeded. A failing tool still writes what it did (inventory.partial): the next run keeps
  # that aside as inventory.unfinished and carries it over first, so what a failed run flashed or
  # configured is not done again. The worker's flashed tag is written last, once
  # talos-apply-insecure has proved the node ours.
  if [[ -s "$inventory.partial" ]]; then
    mv "$inventory.partial" "$inventory.unfinished"
  fi
  "$BIN/scw-infra" apply --config "$INFRA_CONFIG" --talos-version "$TALOS_VERSION" \
      --previous "$inventory.unfinished" --previous "$inventory" \
      --talos-image-url "$(control_plane_image_url)" --talos-image-sha256 "$control_plane_sha256" \
      --talos-image-file "$(control_plane_image_file)" \
      --control-plane-config "$OUT/controlplane.yaml" \
    | "$BIN/scw-rescue-flash" --image "$metal" --ssh-key "$SSH_PRIVATE_KEY" \
        --installer-image "$WORKER_INSTALLER_IMAGE" --talosconfig "$talosconfig" "${reflash[@]}" \
    | without_secrets "$BIN/talos-apply-insecure" --config-dir "$OUT" --talosconfig "$talosconfig" \
        --port "${TALOS_API_PORT:-50000}" "${pins[@]}" \
    | "$BIN/scw-rescue-flash" --tag-proven \
    | "$BIN/scw-infra" clear-user-data --config "$INFRA_CONFIG" \
    > "$inventory.partial"
  mv "$inventory.partial" "$inventory"
  rm -f "$inventory.unfinished"
}

# The plan of the nodes step's scw-infra apply, with the same pins and config (those there are:
# an unrecorded image digest or configs not generated yet are said, and left out).
plan() {
  need_tool scw-infra
  local args=() control_plane_sha256
  control_plane_sha256=$(recorded_sha256 control-plane)
  if [[ -n "$control_plane_sha256" ]]; then
    args+=(--talos-image-url "$(control_plane_image_url)" --talos-image-sha256 "$control_plane_sha256")
  else
    log "the control-plane image $(control_plane_image_key) is not recorded in $TALOS_DIGESTS (make talos-image-digests): the plan cannot import the control planes' image"
  fi
  if [[ -s "$OUT/controlplane.yaml" ]]; then
    args+=(--control-plane-config "$OUT/controlplane.yaml")
  else
    log "$OUT/controlplane.yaml is not generated yet (the configs step): the plan gives no control plane its user data"
  fi
  "$BIN/scw-infra" apply --dry-run --config "$INFRA_CONFIG" --talos-version "$TALOS_VERSION" "${args[@]}"
  if [[ -n "${SNAPSHOT:-}" ]]; then
    log "then: etcd recovered from $SNAPSHOT on the first control plane (talosctl bootstrap --recover-from), if no control plane runs etcd or holds its data; otherwise the apply stops there"
  fi
}

need_inventory() {
  [[ -s "$inventory" ]] || die "$inventory is missing: run the nodes step (make apply-infra) first"
}

# Whether etcd runs on the control plane at $1: prints `true` or `false`, or fails when the node
# does not answer. Talos keeps a Service resource per service; etcd's is not running until it is
# bootstrapped or has joined (internal/app/machined/pkg/system/services/etcd.go).
etcd_running() {
  local out
  if out=$(talos --talosconfig "$talosconfig" --endpoints "$(endpoint "$1")" --nodes "$1" \
      get services etcd --output jsonpath='{.spec.running}' 2>&1); then
    [[ "$out" == *true* ]] && echo true || echo false
  elif [[ "$out" == *NotFound* ]]; then
    echo false
  else
    printf '%s\n' "$out" >&2
    return 1
  fi
}

# Whether etcd is bootstrapped is asked of the cluster, never of a file left on this machine
# (which would outlive a destroyed cluster): if a control plane runs etcd, it is. When every
# control plane answers and none runs it, the first one is bootstrapped; Talos answers
# FailedPrecondition until it is ready ("bootstrap is not available yet", "time is not in sync
# yet": v1alpha1_server.go Bootstrap), so that is retried, within a bound.
# With a snapshot ($1, make apply-infra SNAPSHOT=FILE), the first one is given that etcd
# instead of a new empty one (`bootstrap --recover-from`, Talos's disaster recovery): the
# control planes were all lost and made again. One that runs etcd already, or holds etcd data,
# fails the step: that cluster is not new, and make etcd-restore recovers one that lost its
# quorum.
bootstrap() {
  local snapshot=${1:-}
  need_inventory
  read_names --inventory "$inventory"
  need_talosctl
  local tries=${BOOTSTRAP_TRIES:-90} interval=${BOOTSTRAP_INTERVAL:-10} try ip state output silent
  local -a control_planes recover=()
  IFS=, read -ra control_planes <<<"$CONTROL_PLANE_ADDRESSES"
  need_snapshot "$snapshot"
  if [[ -n "$snapshot" ]]; then
    recover=(--recover-from "$snapshot")
    if [[ "${SKIP_HASH_CHECK:-}" == yes ]]; then recover+=(--recover-skip-hash-check); fi
  fi
  for ((try = 1; try <= tries; try++)); do
    silent=()
    for ip in "${control_planes[@]}"; do
      if ! state=$(etcd_running "$ip"); then silent+=("$ip"); continue; fi
      if [[ "$state" == true && -n "$snapshot" ]]; then
        die "etcd runs on $ip: SNAPSHOT is for control planes that run no etcd (all lost and made again); nothing was recovered. A cluster that lost its quorum: make etcd-restore SNAPSHOT=$snapshot"
      fi
      if [[ "$state" == true ]]; then log "etcd runs on $ip: the cluster is bootstrapped"; return; fi
    done
    if (( ${#silent[@]} )); then
      log "waiting for the control planes to answer (${silent[*]}) ($try/$tries)"
    elif output=$(talos --talosconfig "$talosconfig" --endpoints "$(endpoint "$FIRST_CONTROL_PLANE")" \
        --nodes "$FIRST_CONTROL_PLANE" bootstrap "${recover[@]}" 2>&1); then
      if [[ -n "$snapshot" ]]; then
        printf '%s\n' "$output" >&2
        log "recovered etcd on $FIRST_CONTROL_PLANE from $snapshot; the other control planes join it"
      else
        log "bootstrapped etcd on $FIRST_CONTROL_PLANE"
      fi
      return
    elif [[ "$output" == *AlreadyExists* && -n "$snapshot" ]]; then
      printf '%s\n' "$output" >&2
      die "$FIRST_CONTROL_PLANE holds etcd data already: nothing was recovered. A cluster that lost its quorum: make etcd-restore SNAPSHOT=$snapshot"
    elif [[ "$output" == *AlreadyExists* ]]; then
      # Its etcd data is there already: it was bootstrapped, and etcd is starting.
      log "etcd was already bootstrapped on $FIRST_CONTROL_PLANE"
      return
    elif [[ "$output" == *FailedPrecondition* ]]; then
      log "$FIRST_CONTROL_PLANE is not ready to bootstrap yet ($try/$tries): ${output##*desc = }"
    else
      printf '%s\n' "$output" >&2
      die "bootstrap on $FIRST_CONTROL_PLANE failed"
    fi
    (( try < tries )) && sleep "$interval"
  done
  if (( ${#silent[@]} )); then
    die "the control planes ${silent[*]} did not answer after $tries tries ${interval}s apart: etcd is not bootstrapped"
  fi
  die "$FIRST_CONTROL_PLANE was still not ready to bootstrap after $tries tries ${interval}s apart: ${output:-}"
}

outputs() {
  need_inventory
  read_names --inventory "$inventory"
  need_talosctl
  local ip=$FIRST_CONTROL_PLANE endpoints=() address
  (umask 077; talos --talosconfig "$talosconfig" --endpoints "$(endpoint "$ip")" --nodes "$ip" \
    kubeconfig "$OUT/kubeconfig" --merge=false --force >&2)
  chmod 600 "$OUT/kubeconfig"
  # gen config leaves the talosconfig no endpoint: an operator's `talosctl --nodes <address>`
  # goes through the control planes' Talos APIs, which forward a worker's calls (and alone
  # serve the kubeconfig a drain fetches from its endpoint).
  for address in ${CONTROL_PLANE_ADDRESSES//,/ }; do endpoints+=("$(endpoint "$address")"); done
  (umask 077; talos --talosconfig "$talosconfig" config endpoint "${endpoints[@]}" >&2)
  chmod 600 "$talosconfig"
  "$BIN/scw-infra" platform-inputs --config "$INFRA_CONFIG" --inventory "$inventory" \
    > "$OUT/platform-inputs.json.tmp"
  mv "$OUT/platform-inputs.json.tmp" "$OUT/platform-inputs.json"
  log "wrote $OUT/kubeconfig (0600) and $OUT/platform-inputs.json; $talosconfig names the control planes as its endpoints"
}

# The Talos upgrade (make upgrade-talos, and upgrade-plan its dry-run twin). talos-lifecycle
# takes every node to TALOS_VERSION with the installers scw-infra computes from the pins (the
# Scaleway one for the control planes, the worker's metal one), behind its gates, and skips the
# nodes already there (a run cut short resumes where it stopped). The configs are regenerated
# and validated first (a new node's user data; a schema the new version refuses stops here,
# before any node changes). Then the worker's upgrade is recorded on its server
# (scw-rescue-flash --tag-upgraded): apply-infra with the new pins takes it as running the new
# image, neither refused nor written again.
# What both upgrades need: the tool, the names, a talosctl of the cluster's minor, the
# inventory; sets `lifecycle`, talos-lifecycle with the cluster's files, to which the action and
# its arguments are added.
upgrade_preconditions() {
  need_tool talos-lifecycle
  read_names
  need_talosctl
  [[ -s "$inventory" ]] || die "$inventory is missing: it is written by make apply-infra (layer 1)"
  lifecycle=("$BIN/talos-lifecycle" --talosconfig "$talosconfig"
    --kubeconfig "${KUBECONFIG:-$OUT/kubeconfig}" --talos-port "${TALOS_API_PORT:-50000}")
}

upgrade_talos() {
  local lifecycle
  upgrade_preconditions
  lifecycle+=(upgrade --to "$TALOS_VERSION" --control-plane-installer "$CONTROL_PLANE_INSTALLER_IMAGE"
    --worker-installer "$WORKER_INSTALLER_IMAGE" --out-dir "${ETCD_SNAPSHOTS:-$OUT/etcd}")
  if [[ $1 == plan ]]; then
    without_secrets "${lifecycle[@]}" --dry-run <"$inventory"
    log "then: the worker's upgrade recorded on its server (its tag edgepop-image-upgraded=$WORKER_INSTALLER_IMAGE), so that apply-infra takes it as running Talos $TALOS_VERSION; the machine configs are regenerated for Talos $TALOS_VERSION before any node changes"
    return
  fi
  need_tool scw-rescue-flash
  configs
  without_secrets "${lifecycle[@]}" <"$inventory"
  "$BIN/scw-rescue-flash" --tag-upgraded "$WORKER_INSTALLER_IMAGE" <"$inventory" >/dev/null
}

# The Kubernetes upgrade (make upgrade-k8s, and upgrade-k8s-plan its dry-run twin):
# talos-lifecycle checks the path from the lowest kubelet or static pod and the support of the nodes' Talos,
# takes a snapshot and runs talosctl upgrade-k8s behind its gate. talosctl edits the configs on
# the nodes; the generated ones (a new node's user data) are regenerated at the pin afterwards,
# not before: a node made from them meanwhile would run a kubelet newer than the API servers.
upgrade_kubernetes() {
  local lifecycle
  upgrade_preconditions
  lifecycle+=(upgrade-k8s --to "$KUBERNETES_VERSION" --out-dir "${ETCD_SNAPSHOTS:-$OUT/etcd}")
  if [[ $1 == plan ]]; then
    without_secrets "${lifecycle[@]}" --dry-run <"$inventory"
    log "then: the machine configs regenerated for Kubernetes $KUBERNETES_VERSION"
    return
  fi
  without_secrets "${lifecycle[@]}" <"$inventory"
  configs
}

# Replacing a control plane (make replace-control-plane NODE=..., and replace-plan its dry-run
# twin). Every step's plan is shown before the one question: talos-lifecycle's removal plan,
# behind its gate (every other member healthy), and scw-infra's destroy plan of that Instance
# alone, written to a file and carried out only while it still matches. The flexible IP, the DNS
# records and the secrets stay, so apply's steps make the machine again under the same name and
# address, and Talos's own join replaces the member.
replace_control_plane() {
  local lifecycle remove kubeconfig=${KUBECONFIG:-$OUT/kubeconfig}
  [[ -n "${NODE:-}" ]] || die "name the control plane to replace: NODE=<cluster>-cp-N"
  upgrade_preconditions
  apply_preconditions
  command -v kubectl >/dev/null || die "kubectl is not installed (make tools builds it at its pin)"
  remove=("${lifecycle[@]}" remove-member --node "$NODE" --out-dir "${ETCD_SNAPSHOTS:-$OUT/etcd}")
  [[ "${FAILED:-}" != yes ]] || remove+=(--failed)
  local destroy_plan=$OUT/replace-$NODE.destroy-plan.json
  log "1. $NODE's etcd member taken out, after a snapshot:"
  without_secrets "${remove[@]}" --dry-run <"$inventory"
  log "2. kubectl delete node $NODE"
  log "3. $NODE's Instance and the root volume it leaves destroyed:"
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --node "$NODE" --plan-out "$destroy_plan" >/dev/null
  log "4. apply-infra's steps: $NODE made again under its name and flexible IP, its machine config as user data"
  log "5. a wait until etcd lists one healthy voter a control plane and every node is Ready"
  if [[ $1 == plan ]]; then
    rm -f "$destroy_plan"
    return
  fi
  CONFIRM=${CONFIRM:-} "$(dirname "$0")/confirm.sh" \
    "the control plane $NODE of cluster $CLUSTER_NAME: its etcd member, its Kubernetes node, its Instance and root volume (then made again)" \
    "$CLUSTER_NAME"
  without_secrets "${remove[@]}" <"$inventory"
  without_secrets kubectl --kubeconfig "$kubeconfig" delete node "$NODE" --ignore-not-found
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --node "$NODE" --plan "$destroy_plan" --yes
  rm -f "$destroy_plan"
  configs
  nodes
  bootstrap
  outputs
  without_secrets "${lifecycle[@]}" await-healthy <"$inventory"
  log "$NODE replaced"
}

# NODE is (add) or is not (remove) among the config's workers, or the step stops saying what to
# change in the config first.
need_worker_named() {
  local listed=no worker workers
  [[ -n "${NODE:-}" ]] || die "name the worker: NODE=<worker name>"
  read_names
  IFS=, read -ra workers <<<"$WORKER_NAMES"
  for worker in "${workers[@]}"; do [[ "$worker" == "$NODE" ]] && listed=yes; done
  if [[ $1 == listed && $listed == no ]]; then
    die "$NODE is not under workers in $INFRA_CONFIG: add it there first ({\"name\": \"$NODE\", \"offer\": ..., \"install_disk\": ...})"
  fi
  if [[ $1 == unlisted && $listed == yes ]]; then
    die "$NODE is still under workers in $INFRA_CONFIG: take it out of the config first (apply would order it again)"
  fi
}

# Adding a worker (make add-worker NODE=..., and add-worker-plan its dry-run twin): apply's own
# steps, which order, flash and configure the workers the config lists and have no server yet.
# The new worker gets no DNS record yet (scw-infra names a worker of a running edge once an
# earlier inventory records it proved ours): the Makefile runs apply-infra again once the
# platform and the edge run on it.
add_worker() {
  need_worker_named listed
  if [[ $1 == plan ]]; then
    plan
    log "then: $NODE flashed and configured; then apply-platform (the host firewall lets it in) and apply-edge (one more gateway replica), a wait until it is Ready, and apply-infra again, which gives it its share of the edge names' records"
    return
  fi
  apply_preconditions
  configs
  nodes
  outputs
  log "$NODE is configured; the platform and the edge follow (make add-worker runs them)"
}

# Removing a worker (make remove-worker NODE=..., and remove-worker-plan its dry-run twin), once
# the config no longer lists it. Its traffic goes first: apply's steps take its address out of
# the edge names' records (the control planes' firewall still lets it in), then a wait of the
# records' TTL while resolvers forget it, then the drain (the gateway's disruption budget keeps
# the others serving), the Node deleted, and its server destroyed as the plan shown said.
remove_worker() {
  local kubeconfig=${KUBECONFIG:-$OUT/kubeconfig} wait
  need_worker_named unlisted
  need_inventory
  # What the run needs is checked before anything is shown or asked.
  [[ $1 == plan ]] || apply_preconditions
  command -v kubectl >/dev/null || die "kubectl is not installed (make tools builds it at its pin)"
  local destroy_plan=$OUT/remove-$NODE.destroy-plan.json
  wait=${DNS_WAIT:-$DNS_TTL}
  log "1. the edge names' records point at the other workers only (apply's steps; its plan: make dry-run-infra)"
  log "2. a wait of ${wait}s, the records' TTL, while resolvers forget $NODE"
  log "3. kubectl drain $NODE: cordoned, its pods evicted (within ${DRAIN_TIMEOUT:-10m})"
  log "4. kubectl delete node $NODE"
  log "5. its Elastic Metal server deleted:"
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --node "$NODE" --plan-out "$destroy_plan" >/dev/null
  log "6. then apply-platform and apply-edge: the host firewall and the gateway follow the workers left (make remove-worker runs them)"
  if [[ $1 == plan ]]; then
    rm -f "$destroy_plan"
    return
  fi
  CONFIRM=${CONFIRM:-} "$(dirname "$0")/confirm.sh" \
    "the worker $NODE of cluster $CLUSTER_NAME: its share of the edge's traffic, its pods (drained to the other workers), its Kubernetes node and its Elastic Metal server" \
    "$CLUSTER_NAME"
  configs
  nodes
  outputs
  log "waiting ${wait}s for resolvers to forget $NODE's address"
  sleep "$wait"
  if without_secrets kubectl --kubeconfig "$kubeconfig" get node "$NODE" >/dev/null 2>&1; then
    without_secrets kubectl --kubeconfig "$kubeconfig" drain "$NODE" --ignore-daemonsets \
      --delete-emptydir-data --timeout "${DRAIN_TIMEOUT:-10m}" >&2
  fi
  without_secrets kubectl --kubeconfig "$kubeconfig" delete node "$NODE" --ignore-not-found >&2
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --node "$NODE" --plan "$destroy_plan" --yes >&2
  rm -f "$destroy_plan"
  log "$NODE removed"
}

case "$step" in
  configs) configs ;;
  image) read_names; image >/dev/null ;;
  digests) digests ;;
  plan) plan ;;
  nodes) nodes ;;
  bootstrap) bootstrap "${SNAPSHOT:-}" ;;
  outputs) outputs ;;
  apply) apply_preconditions; configs; nodes; bootstrap "${SNAPSHOT:-}"; outputs ;;
  upgrade-plan) upgrade_talos plan ;;
  upgrade) upgrade_talos run ;;
  upgrade-k8s-plan) upgrade_kubernetes plan ;;
  upgrade-k8s) upgrade_kubernetes run ;;
  replace-plan) replace_control_plane plan ;;
  replace) replace_control_plane run ;;
  add-worker-plan) add_worker plan ;;
  add-worker) add_worker run ;;
  remove-worker-plan) remove_worker plan ;;
  remove-worker) remove_worker run ;;
  *) die "unknown step '$step' (configs|image|digests|plan|nodes|bootstrap|outputs|apply|upgrade-plan|upgrade|upgrade-k8s-plan|upgrade-k8s|replace-plan|replace|add-worker-plan|add-worker|remove-worker-plan|remove-worker)" ;;
esac
