#!/usr/bin/env bash
# `make vendor`: fetch the pinned Gateway API CRD files named in k8s/versions.env
# (VENDOR_GATEWAY_API_*=<file>:<sha256>, in file order), check each sha256, and write
#   $VENDOR_DIR/gateway-api-$GATEWAY_API_VERSION/<file>   the upstream files, byte for byte
#   $VENDOR_DIR/gateway-api-$GATEWAY_API_VERSION.yaml     their concatenation, for the platform layer
# laid out like the upstream standard-install.yaml (and ../shared/crds/gateway-api-*-standard.yaml):
# each file introduced by `---` and a `# <path>` comment.
#
# All or nothing: every file is downloaded into a temporary folder beside the destination and
# verified first; only when all match are the folder and the bundle moved into place. On a download
# error or a mismatch the script exits 1 and leaves what was there before (already verified) as it
# was, with no partial or unverified file.
#
# Environment (for tests and mirrors):
#   VENDOR_BASE_URL  where the files are fetched from (default: GATEWAY_API_BASE_URL of versions.env)
#   VENDOR_DIR       output folder (default: k8s/vendor, git-ignored)
#   VERSIONS_FILE    the pins (default: k8s/versions.env)
set -euo pipefail
cd "$(dirname "$0")/.."

versions=${VERSIONS_FILE:-k8s/versions.env}
die() { echo "vendor: $*" >&2; exit 1; }
[[ -f "$versions" ]] || die "$versions does not exist"
# shellcheck source=../k8s/versions.env
source "$versions"
: "${GATEWAY_API_VERSION:?vendor: GATEWAY_API_VERSION is not set in $versions}"
: "${GATEWAY_API_BASE_URL:?vendor: GATEWAY_API_BASE_URL is not set in $versions}"
command -v curl >/dev/null || die "curl is missing"
command -v sha256sum >/dev/null || die "sha256sum (coreutils) is missing"

base_url=${VENDOR_BASE_URL:-$GATEWAY_API_BASE_URL}
base_url=${base_url%/}
vendor_dir=${VENDOR_DIR:-k8s/vendor}
name=gateway-api-$GATEWAY_API_VERSION
# The path each file has in the upstream repository (config/crd/standard/...), for the bundle's
# comments; taken from the pinned URL so that a mirror gives the same bundle.
repo_path=${GATEWAY_API_BASE_URL#*/gateway-api/"$GATEWAY_API_VERSION"/}

# The pins, in the order of the versions file (sourcing loses the order).
pins=()
while IFS= read -r line; do
  pins+=("${line#*=}")
done < <(grep -E '^VENDOR_GATEWAY_API_[A-Z0-9_]+=' "$versions")
(( ${#pins[@]} > 0 )) || die "no VENDOR_GATEWAY_API_* pin in $versions"

mkdir -p "$vendor_dir"
work=$(mktemp -d "$vendor_dir/.$name.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
mkdir "$work/$name"

bundle="$work/$name.yaml"
{
  echo "# Gateway API $GATEWAY_API_VERSION standard channel CRDs, vendored by pipelines/vendor.sh"
  echo "# Source: $GATEWAY_API_BASE_URL (pins: $versions)"
} > "$bundle"

for pin in "${pins[@]}"; do
  file=${pin%%:*}
  want=${pin#*:}
  [[ "$file" =~ ^[A-Za-z0-9._-]+\.yaml$ ]] || die "bad file name in pin '$pin' ($versions)"
  [[ "$want" =~ ^[0-9a-f]{64}$ ]] || die "bad sha256 in pin '$pin' ($versions)"
  url="$base_url/$file"
  echo "vendor: fetching $url" >&2
  curl --fail --silent --show-error --location --proto '=https,http' \
    --connect-timeout 20 --max-time 300 --retry 3 \
    --output "$work/download" "$url" || die "$url: download failed"
  got=$(sha256sum "$work/download" | cut -d' ' -f1)
  [[ "$got" == "$want" ]] || die "$file: sha256 $got does not match the pin $want ($versions): nothing was changed"
  mv "$work/download" "$work/$name/$file"
  { echo '---'; echo '#'; echo "# $repo_path/$file"; echo '#'; cat "$work/$name/$file"; } >> "$bundle"
done

# Every file is verified: replace the previous copy (folder first, then the bundle).
if [[ -e "$vendor_dir/$name" ]]; then
  mv "$vendor_dir/$name" "$work/previous"
fi
mv "$work/$name" "$vendor_dir/$name"
mv "$bundle" "$vendor_dir/$name.yaml"
echo "vendor: ${#pins[@]} files verified; $vendor_dir/$name.yaml" >&2
