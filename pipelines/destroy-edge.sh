#!/usr/bin/env bash
# Deletes the edge layer: exactly what the ApplySet proves ours, and nothing else. What to
# delete is read from the cluster: the ApplySet apply-edge.sh applies with lists every kind it
# holds (the parent's contains-group-kinds annotation) and labels every member with its id, so
# nothing here re-types the kinds render-edge renders. The namespace (which takes the HMAC
# Secret and the certificates with it) goes last, and only when it is itself a member of the set.
# Without an ApplySet parent nothing is deleted: a namespace of that name is someone else's.
# The namespace and the set's parent are named by render-edge ($NAMES, what `render-edge
# --names` printed). The Makefile checks the cluster first; this script shows what goes, then
# asks (confirm.sh: CLUSTER names the cluster, CONFIRM=yes skips the question).
# DELETE_TIMEOUT (default 5m): how long each deletion may wait for its objects to be gone.
#
#   pipelines/destroy-edge.sh [delete]   shows what goes, asks, deletes, as above
#   pipelines/destroy-edge.sh list       shows what goes, and deletes nothing
set -euo pipefail
mode=${1:-delete}
[[ "$mode" == delete || "$mode" == list ]] || { echo "usage: destroy-edge.sh [delete|list]" >&2; exit 2; }
: "${NAMES:?}"
[[ "$mode" == list ]] || : "${CLUSTER:?CLUSTER must name the cluster, for the question}"
log() { printf 'destroy-edge: %s\n' "$*" >&2; }
command -v kubectl >/dev/null || { log "kubectl is not installed (make tools builds it at its pin)"; exit 1; }
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || { log "no kubeconfig at '${KUBECONFIG:-}'"; exit 1; }
. "$(dirname "$0")/edge-names.sh"
read_edge_names "$NAMES" || exit 1
namespace=$EDGE_NAMESPACE
member_label=$APPLYSET_MEMBER_LABEL
# kubectl delete --wait waits a week by default: an object whose finalizer nobody removes (its
# controller gone) would hang the teardown without a word.
timeout=${DELETE_TIMEOUT:-5m}
stuck() {
  log "$1 still there after $timeout: a finalizer that no controller removes? See: $2"
  exit 1
}

parent=$(applyset_parent \
  '{.metadata.labels.applyset\.kubernetes\.io/id}{"\t"}{.metadata.annotations.applyset\.kubernetes\.io/contains-group-kinds}')
IFS=$'\t' read -r id kinds <<< "$parent"
if [[ -z "$id" || -z "$kinds" ]]; then
  log "no ApplySet parent $namespace/$EDGE_APPLYSET_PARENT: nothing here is proven to be the edge layer's; nothing deleted"
  exit 0
fi
# The namespace goes last, on its own: the cluster-scoped members first, while it still exists.
kinds=$(tr ',' '\n' <<< "$kinds" | { grep -vx 'Namespace' || true; } | paste -sd, -)
owner=$(kubectl get namespace "$namespace" --ignore-not-found \
  -o jsonpath="{.metadata.labels.applyset\.kubernetes\.io/part-of}")
members=$(kubectl -n "$namespace" get "$kinds" -l "$member_label=$id" -o name | sort)
log "the ApplySet $id holds $(wc -l <<< "$members") objects, which destroy-edge deletes:"
sed 's/^/  /' <<< "$members" >&2
if [[ "$owner" == "$id" ]]; then
  log "then the namespace $namespace, with everything in it (the HMAC Secret, the certificates)"
fi
[[ "$mode" == delete ]] || exit 0
CONFIRM=${CONFIRM:-} "$(dirname "$0")/confirm.sh" "every edge object listed above, of the cluster $CLUSTER" "$CLUSTER"
log "deleting the members of the ApplySet $id: $kinds"
kubectl -n "$namespace" delete "$kinds" -l "$member_label=$id" --ignore-not-found --wait=true \
  --timeout="$timeout" ||
  stuck "members of the ApplySet $id are" "kubectl -n $namespace get $kinds -l $member_label=$id"
if [[ "$owner" == "$id" ]]; then
  kubectl delete namespace "$namespace" --ignore-not-found --wait=true --timeout="$timeout" ||
    stuck "the namespace $namespace is" "kubectl get namespace $namespace -o yaml (status.conditions)"
  log "edge layer deleted"
else
  log "the namespace $namespace is not a member of the ApplySet $id: kept"
fi
