#!/usr/bin/env bash
# What to look at after each layer (seed 000, "Verifier chaque etape").
set -euo pipefail
command -v kubectl >/dev/null || { echo "cluster-status: kubectl is not installed" >&2; exit 1; }
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || {
  echo "cluster-status: no kubeconfig at '${KUBECONFIG:-}': run make apply-infra first" >&2; exit 1; }
section() { printf '\n== %s\n' "$*"; }
section "nodes";                 kubectl get nodes -o wide
section "platform";              kubectl -n kube-system get ds cilium || true
                                 kubectl -n istio-system get pods || true
                                 kubectl -n cert-manager get pods || true
section "gateways and routes";   kubectl get gateway,httproute -A || true
section "certificates";          kubectl get certificate -A || true
section "filter";                kubectl -n edge get wasmplugin,cronjob || true
section "pods not Running";      kubectl get pods -A --field-selector=status.phase!=Running,status.phase!=Succeeded
