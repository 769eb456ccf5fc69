#!/usr/bin/env bash
# Asks before a destructive step: names what goes (WHAT, with its cluster) and goes on only when
# the person at the terminal types the cluster's name (CLUSTER). CONFIRM=yes, which a target
# that already asked passes to the ones it runs, skips the question; without a terminal the
# step is refused.
#
#   pipelines/confirm.sh WHAT CLUSTER
set -euo pipefail
what=${1:?usage: confirm.sh WHAT CLUSTER} cluster=${2:?usage: confirm.sh WHAT CLUSTER}
[[ "${CONFIRM:-}" == yes ]] && exit 0
if [[ ! -t 0 ]]; then
  echo "refusing to destroy $what without a terminal: set CONFIRM=yes" >&2
  exit 1
fi
read -r -p "Destroy $what? Type the cluster name ($cluster) to go on: " typed
[[ "$typed" == "$cluster" ]] || { echo "nothing destroyed" >&2; exit 1; }
