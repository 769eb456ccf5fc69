#!/usr/bin/env bash
# Deletes every object of the edge layer: what render-edge labelled, then the namespace (which
# takes the HMAC Secret and the certificates with it). The Makefile asks for confirmation first.
set -euo pipefail
log() { printf 'destroy-edge: %s\n' "$*" >&2; }
command -v kubectl >/dev/null || { log "kubectl is not installed"; exit 1; }
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || { log "no kubeconfig at '${KUBECONFIG:-}'"; exit 1; }

selector=app.kubernetes.io/managed-by=render-edge
kinds=wasmplugins.extensions.istio.io,cronjobs.batch,httproutes.gateway.networking.k8s.io,gateways.gateway.networking.k8s.io,deployments.apps,services,configmaps,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,serviceaccounts
kubectl -n edge delete "$kinds" -l "$selector" --ignore-not-found --wait=true
kubectl delete clusterissuers.cert-manager.io,gatewayclasses.gateway.networking.k8s.io -l "$selector" --ignore-not-found
kubectl delete namespace edge --ignore-not-found --wait=true
log "edge layer deleted"
