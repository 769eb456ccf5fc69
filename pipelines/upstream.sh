#!/usr/bin/env bash
# Builds the real upstream programs the tests run (Kubernetes control plane, etcd, etcdctl and
# etcdutl, kwok, talosctl, sops, age, helm, Prometheus and promtool, kube-state-metrics;
# external-dns's domain filter and the CrowdSec bouncer plugin behind small drivers of ours) from
# the Go module proxy, at the versions pinned in k8s/versions.env, and caches them by version
# outside the tree, so that only the first run builds. `make tools` installs the operator's
# clients from the same cache.
#
#   pipelines/upstream.sh [build [NAME...]]   build what is missing (of NAME... only, when given),
#                                             then print "name<TAB>path" per binary
#   pipelines/upstream.sh paths [NAME...]     print "name<TAB>path" per binary, building nothing
#   pipelines/upstream.sh install DIR NAME... build NAME... as build does, then link (or copy)
#                                             each into DIR and print "name<TAB>DIR/name"
#
# Each program is built from a small Go module of ours, k8s/upstream/<module>/, whose go.mod
# requires the pinned upstream module (and copies its replace directives) and whose go.sum is
# committed: the build downloads exactly what those hashes name, or fails.
#
# The cache is $EDGEPOP_UPSTREAM_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/edgepop/upstream;
# each module's binaries sit in <cache>/<module>/<version>/ beside a stamp of what they were built
# from (go.mod, go.sum, flags, Go version): a changed stamp rebuilds them. Go's own caches
# (GOMODCACHE, GOCACHE) are used as they are.
set -euo pipefail
mode=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'upstream: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=../k8s/versions.env
source "$root/k8s/versions.env"
cache=${EDGEPOP_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgepop/upstream}

# binary                   module      pinned upstream module       package                                 version command (offline)
binaries=(
  "kube-apiserver          kubernetes  k8s.io/kubernetes            k8s.io/kubernetes/cmd/kube-apiserver          --version"
  "kube-controller-manager kubernetes  k8s.io/kubernetes            k8s.io/kubernetes/cmd/kube-controller-manager --version"
  "kube-scheduler          kubernetes  k8s.io/kubernetes            k8s.io/kubernetes/cmd/kube-scheduler          --version"
  "kubectl                 kubernetes  k8s.io/kubernetes            k8s.io/kubernetes/cmd/kubectl                 version --client"
  "etcd                    etcd        go.etcd.io/etcd/server/v3    go.etcd.io/etcd/server/v3                     --version"
  "etcdctl                 etcdctl     go.etcd.io/etcd/etcdctl/v3   go.etcd.io/etcd/etcdctl/v3                    version"
  "etcdutl                 etcdutl     go.etcd.io/etcd/etcdutl/v3   go.etcd.io/etcd/etcdutl/v3                    version"
  "kwok                    kwok        sigs.k8s.io/kwok             sigs.k8s.io/kwok/cmd/kwok                     --version"
  "talosctl                talosctl    github.com/siderolabs/talos  github.com/siderolabs/talos/cmd/talosctl      version --client"
  "sops                    sops        github.com/getsops/sops/v3   github.com/getsops/sops/v3/cmd/sops           --version --disable-version-check"
  "age                     age         filippo.io/age               filippo.io/age/cmd/age                        --version"
  "age-keygen              age         filippo.io/age               filippo.io/age/cmd/age-keygen                 --version"
  "helm                    helm        helm.sh/helm/v3              helm.sh/helm/v3/cmd/helm                      version --short"
  "external-dns-filter     external-dns sigs.k8s.io/external-dns    edgepop.local/upstream/external-dns           version"
  "crowdsec-bouncer-once   crowdsec-bouncer github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin edgepop.local/upstream/crowdsec-bouncer version"
  "prometheus              prometheus  github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/prometheus --version"
  "promtool                prometheus  github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool   --version"
  "kube-state-metrics      kube-state-metrics k8s.io/kube-state-metrics/v2 k8s.io/kube-state-metrics/v2         version"
)

# The pin of each module in k8s/versions.env.
pin() {
  case $1 in
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    etcdctl | etcdutl) echo "$ETCD_CLIENTS_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    talosctl) echo "$TALOSCTL_VERSION" ;;
    sops) echo "$SOPS_VERSION" ;;
    age) echo "$AGE_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    external-dns) echo "$EXTERNAL_DNS_APP_VERSION" ;;
    crowdsec-bouncer) echo "$CROWDSEC_BOUNCER_PLUGIN_TEST_VERSION" ;;
    prometheus) echo "$PROMETHEUS_VERSION" ;;
    kube-state-metrics) echo "$KUBE_STATE_METRICS_VERSION" ;;
    *) die "no pin for module $1" ;;
  esac
}

# The build flags of each module, as its upstream release build sets them: static (CGO off),
# paths trimmed, symbols stripped; the tags and version variables of its own Makefile or script.
build_flags() {
  local module=$1 version=$2 ld=() tags=""
  case $module in
    kubernetes)
      # hack/lib/golang.sh and hack/lib/version.sh: the version lives in two packages.
      tags=selinux,notest,grpcnotrace
      local minor=${version#v*.} major=${version#v}
      minor=${minor%%.*} major=${major%%.*}
      local pkg
      for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        ld+=("-X $pkg.gitVersion=$version" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor")
      done
      ;;
    talosctl) tags=grpcnotrace ;; # Talos's Makefile, GO_BUILDTAGS_TALOSCTL
    prometheus)
      # .promu.yml at the tag: netgo, and the release's version variable. Not builtinassets: the
      # module holds no built web UI (the API the tests use needs none); remove_all_sd keeps only
      # the static, file and HTTP discoveries (README "Service discovery plugins").
      tags=netgo,remove_all_sd
      ld+=("-X github.com/prometheus/common/version.Version=$(released_version "$module" "$version")")
      ;;
    # Its Makefile at the tag (build-local): the release's version variable.
    kube-state-metrics) ld+=("-X github.com/prometheus/common/version.Version=$version") ;;
    age) ld+=("-X main.Version=$version") ;; # else age reports our module's version, not its own
    # Its Makefile at v0.21.0 (LDFLAGS): the version its config package reports.
    external-dns) ld+=("-X sigs.k8s.io/external-dns/pkg/apis/externaldns.Version=$version") ;;
    helm)
      # Helm's Makefile at v3.22.0 (LDFLAGS): the release's version with no metadata, and the
      # Kubernetes version its lint and chartutil assume, the client-go minor it is built with + 1.
      local client_go
      client_go=$(sed -nE 's/^[[:space:]]*k8s\.io\/client-go v0\.([0-9]+)\..*/\1/p' "$root/k8s/upstream/helm/go.mod")
      [[ -n $client_go ]] || die "k8s/upstream/helm/go.mod requires no k8s.io/client-go"
      local pkg=helm.sh/helm/v3
      ld+=("-X $pkg/internal/version.version=$version" "-X $pkg/internal/version.metadata="
        "-X $pkg/internal/version.gitTreeState=clean")
      for pkg in $pkg/pkg/lint/rules $pkg/pkg/chartutil; do
        ld+=("-X $pkg.k8sVersionMajor=1" "-X $pkg.k8sVersionMinor=$client_go")
      done
      ;;
  esac
  printf '%s\n' "-trimpath" "-tags=$tags" "-ldflags=-s -w ${ld[*]-}"
}

# The version a module's binaries report: Prometheus's library tag v0.3XX.Y is its release 3.XX.Y
# (scripts/get_module_version.sh at the tag); every other module reports its pin.
released_version() {
  local module=$1 version=$2
  if [[ $module == prometheus && $version =~ ^v0\.3([0-9]{2})\.([0-9]+)$ ]]; then
    echo "v3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
  else
    echo "$version"
  fi
}

# The binaries, or only those named (known_names refuses a name the list lacks).
known_names() {
  local wanted line
  for wanted in "$@"; do
    # A loop, not `printf | grep -q`: grep -q leaves at its first match, and under pipefail the
    # printf still writing then dies of SIGPIPE and fails the pipeline.
    for line in "${binaries[@]}"; do [[ $line == "$wanted "* ]] && continue 2; done
    die "no upstream program is named $wanted"
  done
}
list() {
  local line name
  for line in "${binaries[@]}"; do
    name=${line%% *}
    (($# == 0)) || [[ " $* " == *" $name "* ]] || continue
    printf '%s\n' "$line"
  done
}

# A module must build the pinned version: its go.mod is the only other place naming it, and the
# nested modules it replaces (Kubernetes's staging modules, Talos's machinery) must be of the
# same release.
check_module() {
  local module=$1 upstream=$2 version=$3 gomod=$root/k8s/upstream/$1/go.mod nested
  grep -qE "^(require)?[[:space:]]+$upstream $version( |\$)" "$gomod" ||
    die "k8s/upstream/$module/go.mod does not require $upstream $version (k8s/versions.env): update it, then run go mod tidy there"
  case $module in
    kubernetes) nested=$(grep -E "=> k8s\.io/[^ ]+ v" "$gomod" | grep -vE " v0\.${version#v1.}\$" || true) ;;
    *) nested=$(grep -E "=> $upstream/[^ ]+ v" "$gomod" | grep -vE " $version\$" || true) ;;
  esac
  [[ -z $nested ]] || die "k8s/upstream/$module/go.mod replaces a module of the release with another version than $version: $nested"
}

# kwok simulates nodes and pods by the Stage objects it is given: the ones kwokctl gives it by
# default (pkg/kwokctl/runtime/cluster.go: node initialisation, heartbeat with a lease, pod ready,
# complete and delete), read from the pinned kwok module itself.
kwok_stages=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)

shift $(($# > 0))
if [[ $mode == paths ]]; then
  known_names "$@"
  while read -r name module _ _ _; do
    printf '%s\t%s\n' "$name" "$cache/$module/$(pin "$module")/$name"
  done < <(list "$@")
  (($#)) || printf '%s\t%s\n' kwok-stages "$cache/kwok/$(pin kwok)/stages"
  exit 0
fi
if [[ $mode == install ]]; then
  (($# >= 2)) || die "usage: upstream.sh install DIR NAME..."
  dir=$1
  shift
  built=$("$0" build "$@") || exit 1
  mkdir -p "$dir"
  # A hard link costs no space; across filesystems, a copy. Replaced whole, never half-written.
  while IFS=$'\t' read -r name path; do
    if [[ ! "$dir/$name" -ef "$path" ]]; then
      ln -f "$path" "$dir/.$name.tmp" 2>/dev/null || cp "$path" "$dir/.$name.tmp"
      mv -f "$dir/.$name.tmp" "$dir/$name"
    fi
    printf '%s\t%s\n' "$name" "$dir/$name"
  done <<<"$built"
  exit 0
fi
[[ $mode == build ]] || die "usage: upstream.sh [build [NAME...]|paths [NAME...]|install DIR NAME...]"
known_names "$@"

command -v go >/dev/null || die "go is missing: install Go 1.26 or later (the tests that run the upstream programs skip meanwhile)"
# The Go the machine has, never one downloaded because a go.mod asks for a newer one.
export GOTOOLCHAIN=local CGO_ENABLED=0
go_version=$(go env GOVERSION)

mkdir -p "$cache"
# One build at a time per cache: a second run waits, then finds everything built.
exec 9>"$cache/.lock"
flock 9

# Per module: the stamp of what its binaries are built from; a different one empties the folder.
# The stamp is written before the first binary, and each binary appears only once built and
# checked, so an interrupted run leaves nothing half-made and the next one builds what is missing.
declare -A ready=()
while read -r name module upstream package version_args; do
  version=$(pin "$module")
  dir=$cache/$module/$version
  src=$root/k8s/upstream/$module
  mapfile -t flags < <(build_flags "$module" "$version")
  if [[ -z ${ready[$module]-} ]]; then
    check_module "$module" "$upstream" "$version"
    stamp=$(cat "$src/go.mod" "$src/go.sum" <(printf '%s\n' "${flags[@]}" "$go_version") | sha256sum | cut -d' ' -f1)
    if [[ ! -f $dir/.stamp || $(<"$dir/.stamp") != "$stamp" ]]; then
      [[ -d $dir ]] && log "$module $version was built from other sources: rebuilding"
      rm -rf "$dir"
      mkdir -p "$dir"
      echo "$stamp" >"$dir/.stamp"
    fi
    ready[$module]=1
  fi
  if [[ ! -x $dir/$name ]]; then
    log "building $name $version ($package)"
    start=$SECONDS
    (cd "$src" && go build -mod=readonly "${flags[@]}" -o "$dir/$name.tmp" "$package") ||
      die "building $name $version failed (k8s/upstream/$module)"
    # The binary must say the pinned version (without its leading v, as etcd and sops print it).
    # shellcheck disable=SC2086 # the version command is words
    said=$("$dir/$name.tmp" $version_args 2>&1) || die "$name $version_args failed: $said"
    released=$(released_version "$module" "$version")
    grep -qF "${released#v}" <<<"$said" || die "$name $version_args says '$said', not $released"
    mv "$dir/$name.tmp" "$dir/$name"
    log "built $name $version in $((SECONDS - start)) s"
  fi
  printf '%s\t%s\n' "$name" "$dir/$name"
done < <(list "$@")

(($#)) && exit 0
stages=$cache/kwok/$KWOK_VERSION/stages
if [[ ! -d $stages ]]; then
  kwok_dir=$(cd "$root/k8s/upstream/kwok" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok) ||
    die "cannot find the kwok module's files"
  mkdir -p "$stages.tmp"
  for stage in "${kwok_stages[@]}"; do
    cp "$kwok_dir/kustomize/stage/$stage" "$stages.tmp/"
  done
  chmod u+w "$stages.tmp"/*
  mv "$stages.tmp" "$stages"
fi
printf '%s\t%s\n' kwok-stages "$stages"
