#!/usr/bin/env bash
# Rotates the challenge filter's HMAC key without logging anybody out: the current key becomes
# `previous` (still accepted for verification), a fresh key becomes `current`, and the gateway
# pods restart to pick both up (a Secret change does not reach a running container's env).
#
# The Secret, its namespace and the gateway's Deployment are named by render-edge ($NAMES, what
# `render-edge --names` printed for what apply-edge applied), so a custom `pow.secret_name` is
# rotated too.
# Keys travel only through 0600 files under $OUT/secrets (git-ignored) and kubectl's
# --from-file: never argv, never stdout.
set -euo pipefail
: "${OUT:?}" "${FIELD_MANAGER:?}" "${NAMES:?}"
log() { printf 'rotate-pow-secret: %s\n' "$*" >&2; }
command -v kubectl >/dev/null || { log "kubectl is not installed (make tools builds it at its pin)"; exit 1; }
. "$(dirname "$0")/edge-names.sh"
read_edge_names "$NAMES" || exit 1
namespace=$EDGE_NAMESPACE
secret=${EDGE_HMAC_SECRET:-}
[[ -n "$secret" ]] || { log "the filter is off ($NAMES names no HMAC Secret): nothing to rotate"; exit 1; }
gateway_deployment=${EDGE_GATEWAY_DEPLOYMENT:?$NAMES names no gateway Deployment}

dir="$OUT/secrets"
(umask 077; mkdir -p "$dir")
old="$dir/$secret.previous" new="$dir/$secret.current.next"
(umask 077
 kubectl -n "$namespace" get secret "$secret" -o jsonpath='{.data.current}' | base64 -d > "$old")
[[ -s "$old" ]] || { log "secret $namespace/$secret has no current key: run make apply-edge first"; rm -f "$old"; exit 1; }
(umask 077; head -c 48 /dev/urandom | base64 -w0 > "$new")

kubectl -n "$namespace" create secret generic "$secret" \
  --from-file=current="$new" --from-file=previous="$old" --dry-run=client -o yaml \
  | kubectl apply --server-side --force-conflicts --field-manager="$FIELD_MANAGER" -f - >&2
mv "$new" "$dir/$secret.current"
log "rotated $namespace/$secret: the old key stays accepted as previous until the next rotation"
kubectl -n "$namespace" rollout restart "deployment/$gateway_deployment" >&2
