#!/usr/bin/env bash
# The edge layer: server-side apply of what render-edge rendered, with a named field manager,
# pruning what the layer no longer renders, so a re-apply converges. kubectl refuses label-based
# --prune together with --server-side, so the prune goes through an ApplySet whose parent is the
# ConfigMap edge/edge-applyset: kubectl labels every object it applies as part of the set, and
# deletes the set's members that are no longer in the input.
#
#   pipelines/apply-edge.sh apply|dry-run|diff
#
# Environment (set by the Makefile): OBJECTS (the rendered YAML), NAMES (what render-edge --names
# printed for the same inputs), FIELD_MANAGER, OUT; GATEWAY_WAIT_SECONDS (default 60): how long
# to wait for istiod to accept the GatewayClass, and then the Gateway.
#
# The HMAC keys of the challenge filter are created here, at apply time, in a Secret: never
# rendered, never in git, never on a command line (kubectl reads them from a 0600 file).
set -euo pipefail

mode=${1:?usage: apply-edge.sh apply|dry-run|diff}
: "${OBJECTS:?}" "${NAMES:?}" "${FIELD_MANAGER:?}" "${OUT:?}"
log() { printf 'apply-edge: %s\n' "$*" >&2; }
[[ "$mode" =~ ^(apply|dry-run|diff)$ ]] || { log "unknown mode '$mode' (apply, dry-run or diff)"; exit 2; }
. "$(dirname "$0")/edge-names.sh"
read_edge_names "$NAMES" || exit 1
namespace=$EDGE_NAMESPACE
export KUBECTL_APPLYSET=true # ApplySet is behind this switch in kubectl 1.27 to 1.3x
applyset=(--applyset="$EDGE_APPLYSET_PARENT" --namespace="$namespace" --prune)

command -v kubectl >/dev/null || { log "kubectl is not installed (make tools builds it at its pin)"; exit 1; }
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || {
  log "no kubeconfig at '${KUBECONFIG:-}': run make apply-infra first, or set KUBECONFIG"; exit 1; }

filter_enabled() { [[ -n "${EDGE_WASM_PLUGIN:-}" ]]; }

# istiod answers for the GatewayClass, then for each Gateway of the class, by setting their
# Accepted condition for the generation it saw; a Gateway it does not accept is not programmed
# (no listener serves). Polled (bounded) rather than watched.
gateway_class=${EDGE_GATEWAY_CLASS:?$NAMES names no GatewayClass}
gateway=${EDGE_GATEWAY:?$NAMES names no Gateway}
accepted_wait=${GATEWAY_WAIT_SECONDS:-60}
[[ "$accepted_wait" =~ ^[0-9]+$ ]] || {
  log "GATEWAY_WAIT_SECONDS='$accepted_wait': a whole number of seconds (60, not 1m)"; exit 2; }
# wait_accepted LABEL KUBECTL_GET_ARGS...: waits until the object's Accepted condition is True
# for its current generation; else says what the controller answered, and where to look.
wait_accepted() {
  local label=$1 waited=0 answer status observed generation reason message
  shift
  local condition='{.status.conditions[?(@.type=="Accepted")]'
  while :; do
    # "<status>|<observedGeneration>|<generation>": an answer for an older spec does not count.
    answer=$(kubectl get "$@" -o jsonpath="$condition.status}|$condition.observedGeneration}|{.metadata.generation}" 2>/dev/null || true)
    IFS='|' read -r status observed generation <<< "$answer" || true
    if [[ "$status" == True && "$observed" == "$generation" ]]; then
      log "$label is Accepted"; return 0
    fi
    ((waited >= accepted_wait)) && break
    sleep 1; waited=$((waited + 1))
  done
  reason=$(kubectl get "$@" -o jsonpath="$condition.reason}" 2>/dev/null || true)
  message=$(kubectl get "$@" -o jsonpath="$condition.message}" 2>/dev/null || true)
  log "$label is not Accepted after ${accepted_wait}s" \
    "(status '${status:-none}' for generation '${observed:-none}' of '${generation:-none}'," \
    "reason '${reason:-none}', message '${message:-none}')."
  log "Status Unknown with reason Pending ('Waiting for controller', what the Gateway API CRDs set" \
    "by default), or no status at all, means no controller has answered: check that istiod runs" \
    "(kubectl -n istio-system get pods), that its controller name is the class's" \
    "spec.controllerName (istiod's PILOT_GATEWAY_API_CONTROLLER_NAME, istio.io/gateway-controller" \
    "by default), and istiod's log (kubectl -n istio-system logs deploy/istiod | grep -i gateway)."
  log "A status False names the cause in its reason and message (kubectl get $* -o yaml)."
  exit 1
}

# Creates the Secret holding the filter's keys if it does not exist. The key is generated into a
# 0600 file under $OUT (git-ignored) and read by kubectl from there.
ensure_hmac_secret() {
  local secret_name=${EDGE_HMAC_SECRET:-}
  [[ -n "$secret_name" ]] || { log "$NAMES names no HMAC Secret although the filter is on"; exit 1; }
  if kubectl -n "$namespace" get secret "$secret_name" >/dev/null 2>&1; then
    return 0
  fi
  local dir="$OUT/secrets"
  (umask 077; mkdir -p "$dir")
  local key_file="$dir/$secret_name.current"
  if [[ ! -s "$key_file" ]]; then
    (umask 077; head -c 48 /dev/urandom | base64 -w0 > "$key_file")
  fi
  chmod 600 "$key_file"
  log "creating Secret $namespace/$secret_name from $key_file (mode 0600, git-ignored)"
  kubectl -n "$namespace" create secret generic "$secret_name" \
    --from-file=current="$key_file" --dry-run=client -o yaml \
    | kubectl apply --server-side --field-manager="$FIELD_MANAGER" -f - >&2
}

# The scrape objects follow the cluster: a PodMonitor and a PrometheusRule only where the
# Prometheus Operator's API is served (the edge installs no operator), istiod's scrape
# annotations elsewhere. Checked before anything is applied, in every mode.
monitoring_api=monitoring.coreos.com/v1
# Read whole first: `kubectl api-versions | grep -q` fails under pipefail when grep leaves at its
# match while kubectl still writes (SIGPIPE), which would take a served API for a missing one.
served_apis=$(kubectl api-versions 2>/dev/null || true)
if grep -qxF "$monitoring_api" <<<"$served_apis"; then serves_monitoring=1; else serves_monitoring=; fi
if [[ -n "${EDGE_POD_MONITOR:-}" && -z "$serves_monitoring" ]]; then
  log "the edge config asks for a PodMonitor and a PrometheusRule (\"monitoring\": \"prometheus-operator\")," \
    "but the cluster serves no $monitoring_api: install the Prometheus Operator first, or set" \
    "\"monitoring\": \"annotations\" (the gateway's pods carry istiod's prometheus.io annotations)"
  exit 1
fi
if [[ -z "${EDGE_POD_MONITOR:-}" && -n "$serves_monitoring" ]]; then
  log "the cluster serves $monitoring_api: \"monitoring\": \"prometheus-operator\" in the edge" \
    "config renders a PodMonitor for the gateway and the edge's alerts as a PrometheusRule"
fi

# Before the first apply the namespace does not exist: the API server cannot place objects in it,
# even in a dry run, nor hold the ApplySet's parent. Everything would then be created, and there
# is nothing to prune: a client dry run lists it.
if [[ "$mode" != apply && -z "$(kubectl get namespace "$namespace" --ignore-not-found -o name)" ]]; then
  log "the namespace $namespace does not exist yet (no apply-edge so far): every object below would" \
    "be created, nothing pruned; the API server checks them at the first apply"
  kubectl apply --dry-run=client -f "$OBJECTS"
  exit 0
fi

case "$mode" in
  diff)
    # Each object as the apply would send it: labelled as a member of the set (kubectl adds that
    # label at apply time), so an object already applied shows no change for it.
    set_id=$(applyset_parent '{.metadata.labels.applyset\.kubernetes\.io/id}')
    labelled=$OBJECTS
    if [[ -n "$set_id" ]]; then
      labelled=$(mktemp --suffix=.json)
      trap 'rm -f "$labelled"' EXIT
      # JSON: kubectl writes several objects as YAML without the separators between them.
      kubectl label --local -f "$OBJECTS" -o json "$APPLYSET_MEMBER_LABEL=$set_id" > "$labelled"
    fi
    # kubectl diff exits 1 when there are differences: that is its answer, not a failure.
    kubectl diff --server-side --field-manager="$FIELD_MANAGER" -f "$labelled" || [[ $? -eq 1 ]]
    # What the apply would prune, which a diff of the rendered objects cannot show.
    kubectl apply --server-side --field-manager="$FIELD_MANAGER" --dry-run=server \
      "${applyset[@]}" -f "$OBJECTS" | { grep ' pruned ' || true; }
    ;;
  dry-run)
    kubectl apply --server-side --field-manager="$FIELD_MANAGER" --dry-run=server \
      "${applyset[@]}" -f "$OBJECTS"
    ;;
  apply)
    # The namespace first, because the Secret lives in it; the apply below then owns its labels.
    # (Every write goes through server-side apply with our field manager: create commands only
    # render, in dry-run.)
    kubectl create namespace "$namespace" --dry-run=client -o yaml \
      | kubectl apply --server-side --field-manager="$FIELD_MANAGER" -f - >&2
    if filter_enabled; then ensure_hmac_secret; fi
    kubectl apply --server-side --field-manager="$FIELD_MANAGER" \
      "${applyset[@]}" -f "$OBJECTS" >&2
    lists_configmap=${EDGE_LISTS_CONFIGMAP:-} lists_cronjob=${EDGE_LISTS_CRONJOB:-}
    # One first refresh, under one name: a Job started by hand escapes the CronJob's Forbid, so a
    # second apply while the lists are still empty must not start another beside it.
    first_refresh=$lists_cronjob-first
    if filter_enabled && [[ -z "$(kubectl -n "$namespace" get configmap "$lists_configmap" -o jsonpath='{.data}')" ]]; then
      if [[ -n "$(kubectl -n "$namespace" get job "$first_refresh" --ignore-not-found -o name)" ]]; then
        log "$lists_configmap is still empty; the first refresh $first_refresh has started already" \
          "(kubectl -n $namespace logs job/$first_refresh); the schedule refreshes it next"
      else
        log "$lists_configmap is empty: starting a first refresh now instead of waiting for the schedule"
        kubectl -n "$namespace" create job --from="cronjob/$lists_cronjob" "$first_refresh" \
          --dry-run=client -o yaml \
          | kubectl apply --server-side --field-manager="$FIELD_MANAGER" -f - >&2
      fi
    fi
    # Full resource names: Istio's own CRDs define a kind Gateway too (networking.istio.io), so
    # the short name can name either.
    wait_accepted "GatewayClass $gateway_class" gatewayclasses.gateway.networking.k8s.io "$gateway_class"
    wait_accepted "Gateway $namespace/$gateway" --namespace="$namespace" \
      gateways.gateway.networking.k8s.io "$gateway"
    ;;
esac
