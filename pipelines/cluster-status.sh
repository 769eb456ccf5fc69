#!/usr/bin/env bash
# `make cluster-status`: one table of what the layers put on the cluster, to check each step of a
# deployment: nodes, Cilium, cert-manager, Istio, the Gateway API CRDs, Gateways,
# Certificates and the filter's WasmPlugin. Exits 0 when every row is ok, 1 otherwise (2 when
# the cluster cannot be asked).
#
#   COMPONENT    NAME                                   STATE     DETAIL
#   node         edge-worker-1                          ok        Ready, kubelet v1.36.0
#   cilium       kube-system/ds/cilium                  ok        4/4 ready
#   ...
set -euo pipefail
here=$(dirname "$0")
source "${VERSIONS_FILE:-$here/../k8s/versions.env}"
command -v kubectl >/dev/null || { echo "cluster-status: kubectl is not installed" >&2; exit 2; }
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || {
  echo "cluster-status: no kubeconfig at '${KUBECONFIG:-}': run make apply-infra first" >&2; exit 2; }
kubectl get --raw /readyz >/dev/null 2>&1 || {
  echo "cluster-status: the API server does not answer (make up powers the cluster on)" >&2; exit 2; }

not_ok=0
row() {
  printf '%-12s %-46s %-9s %s\n' "$1" "$2" "$3" "$4"
  [[ "$3" == ok ]] || not_ok=$((not_ok + 1))
}
row COMPONENT NAME STATE DETAIL
not_ok=0
# Fields are separated by '|': a tab is whitespace to read, which would merge empty fields.
sep='|'

# Nodes: Ready condition, cordon, kubelet version.
while IFS="$sep" read -r name ready unschedulable kubelet; do
  [[ -n "$name" ]] || continue
  state=ok; detail="Ready, kubelet $kubelet"
  [[ "$ready" == True ]] || { state=NOT-READY; detail="Ready=${ready:-unknown}, kubelet $kubelet"; }
  if [[ "$unschedulable" == true ]]; then detail+=", cordoned"; [[ "$state" != ok ]] || state=CORDONED; fi
  row node "$name" "$state" "$detail"
done < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}|{.status.conditions[?(@.type=="Ready")].status}|{.spec.unschedulable}|{.status.nodeInfo.kubeletVersion}{"\n"}{end}')

# Workloads: ready / wanted. ds = DaemonSet, deploy = Deployment.
workload() {
  local component=$1 ns=$2 kind=$3 name=$4 counts ready want
  local path='{.status.readyReplicas}/{.spec.replicas}'
  [[ "$kind" == ds ]] && path='{.status.numberReady}/{.status.desiredNumberScheduled}'
  if ! counts=$(kubectl -n "$ns" get "$kind" "$name" -o jsonpath="$path" 2>/dev/null); then
    row "$component" "$ns/$kind/$name" ABSENT "not installed"; return
  fi
  ready=${counts%/*}; want=${counts#*/}
  if [[ -n "$want" && "$want" != 0 && "${ready:-0}" == "$want" ]]; then row "$component" "$ns/$kind/$name" ok "$counts ready"
  else row "$component" "$ns/$kind/$name" DEGRADED "${ready:-0}/${want:-?} ready"; fi
}
workload cilium kube-system ds cilium
workload cilium kube-system deploy cilium-operator
workload cilium kube-system deploy hubble-relay
workload cert-manager cert-manager deploy cert-manager
workload cert-manager cert-manager deploy cert-manager-webhook
workload cert-manager cert-manager deploy cert-manager-cainjector
workload istio istio-system deploy istiod

# The Gateway API CRDs of the pins: Established, and the bundle version they carry.
while IFS= read -r line; do
  file=${line#*=}; file=${file%%:*}                      # gateway.networking.k8s.io_gateways.yaml
  crd=${file%.yaml}; crd="${crd#*_}.${crd%%_*}"          # gateways.gateway.networking.k8s.io
  if ! got=$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}|{.metadata.annotations.gateway\.networking\.k8s\.io/bundle-version}' 2>/dev/null); then
    row gateway-api "$crd" ABSENT "make apply-platform installs $GATEWAY_API_VERSION"; continue
  fi
  established=${got%%"$sep"*}; bundle=${got#*"$sep"}
  if [[ "$established" != True ]]; then row gateway-api "$crd" PENDING "not Established"
  elif [[ "$bundle" != "$GATEWAY_API_VERSION" ]]; then row gateway-api "$crd" DRIFT "bundle ${bundle:-?}, pinned $GATEWAY_API_VERSION"
  else row gateway-api "$crd" ok "$bundle"; fi
done < <(grep -E '^VENDOR_GATEWAY_API_[A-Z0-9_]+=' "${VERSIONS_FILE:-$here/../k8s/versions.env}")

# Objects of the edge layer, by their status conditions. `kind` absent: its CRD is not there.
objects() {
  local component=$1 kind=$2 condition=$3 extra=$4 out name status detail found=0
  if ! out=$(kubectl get "$kind" -A -o jsonpath="{range .items[*]}{.metadata.namespace}/{.metadata.name}|{.status.conditions[?(@.type==\"$condition\")].status}|$extra{\"\n\"}{end}" 2>/dev/null); then
    row "$component" "$kind" ABSENT "its CRD is not installed"; return
  fi
  while IFS="$sep" read -r name status detail; do
    [[ -n "$name" ]] || continue
    found=1
    if [[ "$condition" == - || "$status" == True ]]; then row "$component" "$name" ok "$detail"
    else row "$component" "$name" NOT-"${condition^^}" "$condition=${status:-unknown} $detail"; fi
  done <<<"$out"
  (( found )) || row "$component" "$kind" NONE "no object yet (make apply-edge)"
}
objects gateway gateways.gateway.networking.k8s.io Programmed '{.status.addresses[*].value}'
objects certificate certificates.cert-manager.io Ready 'expires {.status.notAfter}'
objects filter wasmplugins.extensions.istio.io - '{.spec.url}'

if (( not_ok )); then echo "cluster-status: $not_ok row(s) not ok" >&2; exit 1; fi
