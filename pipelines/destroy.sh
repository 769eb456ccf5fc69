#!/usr/bin/env bash
# make destroy and make destroy-infra: scw-infra's destroy plan shown, one question that names
# the cluster and the project, then exactly that plan carried out (scw-infra refuses it if it no
# longer lists what exists).
#
#   pipelines/destroy.sh all     first the edge and platform layers, when the cluster runs; a
#                                cluster powered off or gone is said so, and those layers are
#                                skipped (their objects go with its servers); then the infra
#   pipelines/destroy.sh infra   the Scaleway resources only
#
# Environment (set by the Makefile): OUT, INFRA_CONFIG, BIN, DESTROY_PLAN (the plan file),
# CONFIRM (yes: do not ask), MAKE (all: the make that destroys the edge and platform layers),
# KUBECONFIG (the cluster's, as the Makefile chose it), EDGE_CONFIG and PLATFORM_CONFIG (all:
# a layer whose config is missing was never applied from here, and is skipped, said so, before
# the question rather than failing after it).
set -euo pipefail
scope=${1:-}
[[ "$scope" == all || "$scope" == infra ]] || { echo "usage: destroy.sh all|infra" >&2; exit 2; }
: "${OUT:?}" "${INFRA_CONFIG:?}" "${BIN:?}" "${DESTROY_PLAN:?}"
log() { printf 'destroy: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
[[ -x "$BIN/scw-infra" ]] || die "$BIN/scw-infra is not built (make builds it)"

# The plan: scw-infra writes it, shows it on stderr, and says whose it is on stdout.
mkdir -p "$(dirname "$DESTROY_PLAN")"
pairs=$("$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --plan-out "$DESTROY_PLAN")
CLUSTER='' PROJECT='' RESOURCES='' POWER=''
while IFS='=' read -r key value; do
  case $key in
    CLUSTER | PROJECT | RESOURCES | POWER) printf -v "$key" '%s' "$value" ;;
  esac
done <<<"$pairs"
[[ -n "$CLUSTER" && -n "$PROJECT" && "$RESOURCES" =~ ^[0-9]+$ && -n "$POWER" ]] ||
  die "scw-infra destroy --plan-out did not say whose plan it is: $pairs"

# The Kubernetes layers destroyed first, in this order: those that can be reached.
layers=()
if [[ "$scope" == all ]]; then
  if [[ "$POWER" != running ]]; then
    log "the cluster $CLUSTER is $POWER: its Kubernetes objects go with its servers;" \
      "skipping destroy-edge and destroy-platform, going on to the infrastructure"
  elif [[ ! -f "${KUBECONFIG:-}" ]]; then
    log "no kubeconfig at '${KUBECONFIG:-}': the edge and platform layers cannot be reached;" \
      "skipping them, going on to the infrastructure"
  else
    declare -A configs=([edge]=${EDGE_CONFIG:?} [platform]=${PLATFORM_CONFIG:?})
    for layer in edge platform; do
      config=${configs[$layer]}
      if [[ -f "$config" ]]; then
        layers+=("$layer")
      else
        log "no $layer config at '$config': the $layer layer was never applied from here;" \
          "skipping destroy-$layer (its objects go with the servers)"
      fi
    done
  fi
fi
if (( RESOURCES == 0 && ${#layers[@]} == 0 )); then
  log "nothing of cluster $CLUSTER in project $PROJECT to destroy"
  rm -f "$DESTROY_PLAN"
  exit 0
fi

what="the $RESOURCES Scaleway resources listed above, of cluster $CLUSTER in project $PROJECT"
if (( ${#layers[@]} > 0 )); then
  printf -v named 'the %s layer, ' "${layers[@]}"
  what="${named%, } and $what"
fi
CONFIRM=${CONFIRM:-} "$(dirname "$0")/confirm.sh" "$what" "$CLUSTER"

for layer in "${layers[@]}"; do
  "${MAKE:?}" --no-print-directory "destroy-$layer" CONFIRM=yes
done
if (( RESOURCES > 0 )); then
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --plan "$DESTROY_PLAN" --yes
fi
log "cluster $CLUSTER destroyed"
