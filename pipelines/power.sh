#!/usr/bin/env bash
# make down and make up: the cluster's machines powered off and on in an order it survives.
#
#   pipelines/power.sh down   the workers first: shut down through Talos's API (talosctl
#                             shutdown, which cordons and drains a lone worker, stops its
#                             services and halts it), then stopped at Scaleway (Elastic Metal
#                             stop); then each
#                             control plane the same way (shutdown --force: they run no
#                             workloads, and the API a drain goes through goes down with them),
#                             then powered off (Instance poweroff: a guest that halts itself is
#                             left in standby, which is still billed)
#   pipelines/power.sh up     the control planes first (etcd, the API server), then the worker
#
# Each machine that runs is shut down through Talos (at the public address Scaleway lists for
# it); one that is off is not asked, one that is changing state is waited for by scw-infra. Environment (set by the Makefile): OUT, INFRA_CONFIG, BIN;
# TALOS_SHUTDOWN_TIMEOUT (default 10m, per node).
set -euo pipefail
mode=${1:-}
[[ "$mode" == down || "$mode" == up ]] || { echo "usage: power.sh down|up" >&2; exit 2; }
: "${OUT:?}" "${INFRA_CONFIG:?}" "${BIN:?}"
log() { printf 'power: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
[[ -x "$BIN/scw-infra" ]] || die "$BIN/scw-infra is not built (make builds it)"
scw() { "$BIN/scw-infra" "$@" --config "$INFRA_CONFIG"; }

if [[ "$mode" == up ]]; then
  scw power on --nodes controlplane
  scw power on --nodes worker
  exit 0
fi

talosconfig=$OUT/talosconfig
[[ -f "$talosconfig" ]] ||
  die "$talosconfig is missing: the nodes cannot be shut down through Talos" \
    "(scw-infra power off --config $INFRA_CONFIG cuts the power without a shutdown)"
command -v talosctl >/dev/null || die "talosctl is not installed (make tools builds it at its pin)"
timeout=${TALOS_SHUTDOWN_TIMEOUT:-10m}
# shellcheck source=without-secrets.sh
. "$(dirname "$0")/without-secrets.sh"
talos() { without_secrets talosctl --talosconfig "$talosconfig" "$@"; }
# The public IPv4 of each server of $1 (controlplane or worker) that runs, as Scaleway lists the
# cluster's servers, into the array named $2: each is shut down through Talos before the power
# of them all is cut (a server off, or changing state, is not asked).
running() {
  local addresses
  addresses=$(scw state --nodes "$1" --running-addresses)
  local -n into=$2
  into=()
  [[ -z "$addresses" ]] || mapfile -t into <<<"$addresses"
}
running controlplane control_planes
running worker workers
# cut_power NODES RUNNING: powers NODES off; with none running, only when some exist (off ones
# are left as they are, and none at all is not an error).
cut_power() {
  if (( $2 > 0 )) || [[ "$(scw state --nodes "$1")" != absent ]]; then
    scw power off --nodes "$1"
  fi
}

# The worker is drained through the API of the control planes that run.
if (( ${#workers[@]} > 0 )); then
  (( ${#control_planes[@]} > 0 )) ||
    die "the worker ${workers[*]} runs but no control plane does: Talos's API cannot be reached to drain it"
  endpoints=$(IFS=,; echo "${control_planes[*]}")
fi
# One worker is drained (cordoned, its pods evicted) before it stops. Several are not: draining
# one would push its pods onto the next to go down, and the gateway's disruption budget refuses to
# evict a second gateway pod while the first one's replacement is Pending, which would hold the
# shutdown until its timeout. Their pods stop with the node, and start again with it.
no_drain=()
(( ${#workers[@]} > 1 )) && no_drain=(--force)
for node in "${workers[@]}"; do
  log "shutting the worker $node down through Talos (${no_drain[*]:+no drain, }stop; at most $timeout)"
  talos --endpoints "$endpoints" --nodes "$node" shutdown "${no_drain[@]}" --wait --timeout "$timeout"
done
cut_power worker "${#workers[@]}"

for node in "${control_planes[@]}"; do
  log "shutting the control plane $node down through Talos (at most $timeout)"
  talos --endpoints "$node" --nodes "$node" shutdown --force --wait --timeout "$timeout"
done
cut_power controlplane "${#control_planes[@]}"
