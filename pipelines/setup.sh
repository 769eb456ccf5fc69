#!/usr/bin/env bash
# Installs what `make demo` or `make test` needs and is missing, so that both work on a fresh
# machine. Idempotent: what is present is left alone. System packages need root (apt-get); as
# another user the missing ones are named and the tests that need them skip (or fail under CI).
#
#   pipelines/setup.sh demo|test|bench|images
set -euo pipefail
what=${1:?usage: setup.sh demo|test|bench|images}
log() { printf 'setup: %s\n' "$*" >&2; }

# The filter is a wasm32-wasip1 module.
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then
  log "adding the Rust target wasm32-wasip1"
  rustup target add wasm32-wasip1
fi
[[ "$what" == demo ]] && exit 0

# The lists image holds static binaries: the musl target, and musl-gcc for ring's C code.
if [[ "$what" == images || "$what" == test ]]; then
  if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    log "adding the Rust target x86_64-unknown-linux-musl"
    rustup target add x86_64-unknown-linux-musl
  fi
fi
if [[ "$what" == images ]]; then
  if ! command -v musl-gcc >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      log "installing musl-tools"
      export DEBIAN_FRONTEND=noninteractive
      apt-get -o DPkg::Lock::Timeout=600 update -qq
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends musl-tools >/dev/null
    else
      log "musl-gcc is missing: apt-get install musl-tools"; exit 1
    fi
  fi
  exit 0
fi

# Test tools: python3 (oracle, stand-ins) with PyYAML, chromium (the real page in a browser),
# Firefox ESR (the page must work there too), Node.js for playwright-core, kubectl (the edge
# pipeline against the API stand-in), curl.
need=()
command -v python3 >/dev/null || need+=(python3)
command -v chromium >/dev/null || need+=(chromium)
command -v firefox-esr >/dev/null || command -v firefox >/dev/null || need+=(firefox-esr)
command -v curl >/dev/null || need+=(curl)
command -v openssl >/dev/null || need+=(openssl)
# The real sshd standing for the rescue system (scw-rescue-flash's tests), and its client.
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
command -v zstd >/dev/null || need+=(zstd)
# ssh2 (scw-rescue-flash) builds libssh2 against the system's OpenSSL.
pkg-config --exists openssl 2>/dev/null || need+=(libssl-dev pkg-config)
command -v npm >/dev/null || need+=(nodejs npm)
# The images' tests: a real registry (CNCF distribution), skopeo as the independent reader, and
# musl-gcc for the static lists binaries.
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v skopeo >/dev/null || need+=(skopeo)
command -v musl-gcc >/dev/null || need+=(musl-tools)
if [[ "$what" == bench ]]; then
  # The baselines of the list generation bench.
  command -v iprange >/dev/null || need+=(iprange)
  command -v hyperfine >/dev/null || need+=(hyperfine)
fi
if ((${#need[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends ca-certificates "${need[@]}" >/dev/null
  else
    log "missing ${need[*]}: install them (apt-get install ${need[*]}); the tests that need them skip meanwhile"
  fi
fi
if ! python3 -c 'import yaml' 2>/dev/null; then
  log "installing PyYAML"
  python3 -m pip install --quiet pyyaml || log "PyYAML could not be installed: the API stand-in tests skip"
fi
if ! python3 -c 'import grpc, grpc_tools' 2>/dev/null; then
  log "installing grpcio-tools (the Talos API stand-in compiles Talos's .proto files with it)"
  python3 -m pip install --quiet grpcio-tools || log "grpcio-tools could not be installed: the talos-apply-insecure tests skip"
fi
if ! command -v kubectl >/dev/null; then
  log "kubectl is missing: the edge pipeline tests skip (install kubectl to run them)"
fi
# >>> infra (issue 11): AWS's SigV4 test vectors (npm), and zstd + qemu-img for the Talos image
# import (Debian zstd, qemu-utils).
if command -v npm >/dev/null && [[ ! -d tools/scw-infra/tests/sigv4-suite/node_modules ]]; then
  log "npm ci in tools/scw-infra/tests/sigv4-suite"
  npm ci --prefix tools/scw-infra/tests/sigv4-suite --no-audit --no-fund >&2
fi
infra_need=()
command -v zstd >/dev/null || infra_need+=(zstd)
command -v qemu-img >/dev/null || infra_need+=(qemu-utils)
if ((${#infra_need[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing ${infra_need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${infra_need[@]}" >/dev/null
  else
    log "missing ${infra_need[*]}: the Talos image import test skips meanwhile"
  fi
fi
# <<< infra
# playwright-core drives the system's browsers; its own browser downloads are never used.
for dir in filter/browsers/chromium filter/browsers/firefox; do
  if command -v npm >/dev/null && [[ -f $dir/package-lock.json && ! -d $dir/node_modules ]]; then
    log "npm ci in $dir"
    npm ci --prefix "$dir" --no-audit --no-fund >&2
  fi
done
# The real upstream programs the tests run (etcd, the Kubernetes control plane and kubectl, kwok,
# talosctl, sops, age), built with Go from the Go module proxy at the pins of k8s/versions.env and
# cached outside the tree: only the first run builds. The paths go to stderr.
if [[ $what != test ]]; then
  exit 0
elif command -v go >/dev/null; then
  if ! "$(dirname "$0")/upstream.sh" build >&2; then
    [[ ${EDGEPOP_REQUIRE_ALL:-} == 1 ]] && exit 1
    log "the upstream programs could not be built: the tests that run them skip meanwhile"
  fi
else
  log "go is missing: install Go 1.26 or later to build the upstream programs (the tests that run them skip meanwhile)"
fi
