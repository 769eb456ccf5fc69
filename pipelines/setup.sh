#!/usr/bin/env bash
# Installs what `make demo`, `make test`, `make bench` or the images need and is missing, so that
# each works on a fresh machine; .ci/run runs `setup.sh test` too, so this file is the one list
# of what the project installs. Idempotent: what is present is left alone. System packages need
# root (apt-get); as another user the missing ones are named and the tests that need them skip,
# unless EDGEPOP_REQUIRE_ALL=1 (CI), where anything missing is a failure.
#
#   pipelines/setup.sh demo|test|bench|images
#
# demo is the Rust target of the filter; images adds what the lists image's static binaries
# need; test adds what the tests run for real; bench adds the baselines of the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: setup.sh demo|test|bench|images}
case "$what" in
  demo | images | test | bench) ;;
  *) echo "setup: unknown setup '$what' (demo, test, bench or images)" >&2; exit 2 ;;
esac
log() { printf 'setup: %s\n' "$*" >&2; }
# Something the setup needs is missing and cannot be installed here: a failure where everything
# is required (CI, and the images, which cannot be built without it), a notice otherwise.
missing() {
  if [[ "${EDGEPOP_REQUIRE_ALL:-}" == 1 || "$what" == images ]]; then
    log "$* (required)"; exit 1
  fi
  log "$*; the tests that need it skip meanwhile"
}

# The setups that include `scope` (bench includes test, test includes images; demo only itself).
wants() {
  case "$1" in
    demo) true ;;
    images) [[ "$what" == images || "$what" == test || "$what" == bench ]] ;;
    test) [[ "$what" == test || "$what" == bench ]] ;;
    bench) [[ "$what" == bench ]] ;;
  esac
}

rust_target() {
  # The list is read first: `rustup ... | grep -q` fails under pipefail when grep leaves at its
  # match while rustup still writes (SIGPIPE).
  local installed
  installed=$(rustup target list --installed 2>/dev/null || true)
  grep -qx "$1" <<<"$installed" && return
  log "adding the Rust target $1"
  rustup target add "$1"
}
# The filter is a wasm32-wasip1 module.
rust_target wasm32-wasip1
[[ "$what" == demo ]] && exit 0
# The lists image holds static binaries (x86_64-unknown-linux-musl).
rust_target x86_64-unknown-linux-musl

# The Debian packages, one per line: the setup that needs it, what shows it is there (a command
# on the PATH, or an absolute path; `a|b` for either), then the package(s).
packages="
images musl-gcc                              musl-tools       # ring's C code in the static lists binaries
test   /etc/ssl/certs/ca-certificates.crt    ca-certificates
test   python3                               python3          # independent oracles, the API stand-ins
test   curl                                  curl
test   openssl                               openssl          # hash-rate baseline, the Talos stand-in's certificates
test   /usr/sbin/sshd                        openssh-server   # the real sshd standing for the rescue system
test   ssh                                   openssh-client
test   zstd                                  zstd             # the rescue side of scw-rescue-flash; the Talos image import
test   setpriv                               util-linux       # the Talos node stand-in's etcd dies with it
test   qemu-img                              qemu-utils       # the Talos image import
test   pkg-config                            pkg-config       # ssh2 builds libssh2 against the system's OpenSSL
test   /usr/include/openssl/ssl.h            libssl-dev
test   chromium                              chromium         # the real challenge page in a browser
test   firefox-esr|firefox                   firefox-esr      # the page must work there too
test   npm                                   nodejs npm       # the browsers' drivers (playwright-core needs Node.js 20: the machine's, when it has one)
test   docker-registry                       docker-registry  # a real OCI registry on loopback
test   skopeo                                skopeo           # the registry's independent reader
bench  iprange                               iprange          # the list generation bench's baselines
bench  hyperfine                             hyperfine
bench  rclone                                rclone           # the image upload bench's baseline: a real S3 client
"
present() {
  local check checks
  IFS='|' read -r -a checks <<<"$1"
  for check in "${checks[@]}"; do
    if [[ "$check" == /* ]]; then [[ -e "$check" ]] && return 0
    else command -v "$check" >/dev/null && return 0; fi
  done
  return 1
}
need=()
while read -r scope check rest; do
  [[ -n "$scope" ]] || continue
  wants "$scope" && ! present "$check" || continue
  read -r -a names <<<"${rest%%#*}"
  need+=("${names[@]}")
done <<<"$packages"
if ((${#need[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    missing "missing ${need[*]} (apt-get install ${need[*]})"
  fi
fi
[[ "$what" == images ]] && exit 0

# Python packages: PyYAML reads the specs of the Scaleway API stand-in and the machine configs of
# the Talos API stand-in; grpcio-tools compiles Talos's own .proto files for the latter.
for module in yaml:pyyaml grpc_tools:grpcio-tools; do
  python3 -c "import ${module%%:*}" 2>/dev/null && continue
  log "installing ${module#*:}"
  python3 -m pip install --quiet "${module#*:}" || missing "${module#*:} could not be installed"
done

# npm packages, from their lockfiles: playwright-core and puppeteer-core drive the system's
# browsers (they download none); AWS's SigV4 test vectors for the S3 signer.
for dir in filter/browsers/chromium filter/browsers/firefox crates/scaleway/tests/sigv4-suite; do
  [[ -f $dir/package-lock.json && ! -d $dir/node_modules ]] || continue
  command -v npm >/dev/null || { missing "npm is missing for $dir"; continue; }
  log "npm ci in $dir"
  npm ci --prefix "$dir" --no-audit --no-fund >&2
done

# The real upstream programs the tests run (etcd, the Kubernetes control plane and kubectl, kwok,
# talosctl, sops, age) and helm: built with Go from the Go module proxy at the pins of
# k8s/versions.env and cached outside the tree by pipelines/upstream.sh, so only the first run
# builds, and `make tools` finds the operator's clients there. Go comes with the machine image:
# Debian's golang-go is older than their go.mod files want.
if wants test; then
  go_minor=$(go env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p')
  if ((${go_minor:-0} < 26)); then
    missing "Go 1.26 or later is missing (found $(go env GOVERSION 2>/dev/null || echo none)), so are the upstream programs"
  elif ! pipelines/upstream.sh build >&2; then
    missing "the upstream programs could not be built"
  fi
fi
