#!/usr/bin/env bash
# make down and make up: the cluster's machines powered off and on in an order it survives.
#
#   pipelines/power.sh down   the worker first: shut down through Talos's API (talosctl shutdown,
#                             which cordons and drains the node, stops its services and halts
#                             it), then stopped at Scaleway (Elastic Metal stop); then each
#                             control plane the same way (shutdown --force: they run no
#                             workloads, and the API a drain goes through goes down with them),
#                             then powered off (Instance poweroff: a guest that halts itself is
#                             left in standby, which is still billed)
#   pipelines/power.sh up     the control planes first (etcd, the API server), then the worker
#
# A machine that is not running is not asked to shut down; one that is changing state is waited
# for by scw-infra. Environment (set by the Makefile): OUT, INFRA_CONFIG, BIN;
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
inventory=$OUT/inventory.json
[[ -f "$talosconfig" && -s "$inventory" ]] ||
  die "$talosconfig or $inventory is missing: the nodes cannot be shut down through Talos" \
    "(scw-infra power off --config $INFRA_CONFIG cuts the power without a shutdown)"
command -v talosctl >/dev/null || die "talosctl is not installed (make check lists what is needed)"
# The nodes' addresses, as scw-infra reads them from the inventory.
CONTROL_PLANE_ADDRESSES='' WORKER_ADDRESS=''
while IFS='=' read -r key value; do
  case $key in
    CONTROL_PLANE_ADDRESSES | WORKER_ADDRESS) printf -v "$key" '%s' "$value" ;;
  esac
done < <(scw names --inventory "$inventory")
[[ -n "$CONTROL_PLANE_ADDRESSES" ]] || die "$inventory lists no control plane address"
timeout=${TALOS_SHUTDOWN_TIMEOUT:-10m}
talos() { talosctl --talosconfig "$talosconfig" "$@"; }

state=$(scw state --nodes worker)
if [[ "$state" == running ]]; then
  [[ -n "$WORKER_ADDRESS" ]] || die "$inventory lists no worker address"
  log "shutting the worker $WORKER_ADDRESS down through Talos (cordon, drain, stop; at most $timeout)"
  talos --endpoints "$CONTROL_PLANE_ADDRESSES" --nodes "$WORKER_ADDRESS" shutdown --wait --timeout "$timeout"
fi
if [[ "$state" != absent ]]; then
  scw power off --nodes worker
fi

state=$(scw state --nodes controlplane)
if [[ "$state" == running ]]; then
  IFS=, read -ra control_planes <<<"$CONTROL_PLANE_ADDRESSES"
  for node in "${control_planes[@]}"; do
    log "shutting the control plane $node down through Talos (at most $timeout)"
    talos --endpoints "$node" --nodes "$node" shutdown --force --wait --timeout "$timeout"
  done
fi
if [[ "$state" != absent ]]; then
  scw power off --nodes controlplane
fi
