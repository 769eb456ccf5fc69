# shellcheck shell=bash
# Sourced by infra.sh and check-prereqs.sh, after k8s/versions.env: where the Talos images' sha256
# are recorded and under which key. They live in $TALOS_DIGESTS (default
# config/talos-image-digests.env, untracked: the operator's trust on first download), one line
# each, `<TALOS_VERSION>/<schematic>/<file>=<sha256>`, so a Talos or schematic bump leaves the new
# images unrecorded until make talos-image-digests records them too. WORKER_SCHEMATIC is the
# worker's (scw-infra names; by default the pinned TALOS_WORKER_SCHEMATIC, the only one it
# accepts).
TALOS_DIGESTS=${TALOS_DIGESTS:-config/talos-image-digests.env}
control_plane_image_key() { printf '%s/%s/scaleway-amd64.raw.zst' "$TALOS_VERSION" "$TALOS_CONTROL_PLANE_SCHEMATIC"; }
worker_image_key() { printf '%s/%s/metal-amd64.raw.zst' "$TALOS_VERSION" "${WORKER_SCHEMATIC:-$TALOS_WORKER_SCHEMATIC}"; }
# image_key control-plane|worker
image_key() { "${1//-/_}_image_key"; }
image_url() {
  local key
  key=$(image_key "$1")
  printf '%s/image/%s/%s/%s' "$TALOS_FACTORY_URL" "$(cut -d/ -f2 <<<"$key")" "$TALOS_VERSION" "${key##*/}"
}

# The recorded sha256 of the control-plane or worker image, or nothing.
recorded_sha256() {
  local key
  key=$(image_key "$1")
  [[ -f "$TALOS_DIGESTS" ]] || return 0
  awk -F= -v key="$key" '$1 == key && length($2) == 64 && $2 !~ /[^0-9a-f]/ { sha = $2 } END { if (sha) print sha }' "$TALOS_DIGESTS"
}
