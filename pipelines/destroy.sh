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
# KUBECONFIG (the cluster's, as the Makefile chose it).
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

kube=no
if [[ "$scope" == all ]]; then
  if [[ "$POWER" != running ]]; then
    log "the cluster $CLUSTER is $POWER: its Kubernetes objects go with its servers;" \
      "skipping destroy-edge and destroy-platform, going on to the infrastructure"
  elif [[ ! -f "${KUBECONFIG:-}" ]]; then
    log "no kubeconfig at '${KUBECONFIG:-}': the edge and platform layers cannot be reached;" \
      "skipping them, going on to the infrastructure"
  else
    kube=yes
  fi
fi
if (( RESOURCES == 0 )) && [[ "$kube" == no ]]; then
  log "nothing of cluster $CLUSTER in project $PROJECT to destroy"
  rm -f "$DESTROY_PLAN"
  exit 0
fi

what="the $RESOURCES Scaleway resources listed above, of cluster $CLUSTER in project $PROJECT"
[[ "$kube" == yes ]] && what="the edge layer, the platform layer and $what"
CONFIRM=${CONFIRM:-} "$(dirname "$0")/confirm.sh" "$what" "$CLUSTER"

if [[ "$kube" == yes ]]; then
  "${MAKE:?}" --no-print-directory destroy-edge CONFIRM=yes
  "$MAKE" --no-print-directory destroy-platform CONFIRM=yes
fi
if (( RESOURCES > 0 )); then
  "$BIN/scw-infra" destroy --config "$INFRA_CONFIG" --plan "$DESTROY_PLAN" --yes
fi
log "cluster $CLUSTER destroyed"
