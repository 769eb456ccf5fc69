#!/usr/bin/env bash
# The platform layer (layer 2): the Helm releases render-platform lists, in its order, with the
# host firewall right after Cilium and the Gateway API CRDs (the vendored bundle of `make vendor`,
# which cert-manager and istiod watch) applied just before cert-manager:
#   1. Cilium (the CNI: nothing else schedules before it)
#   2. the host firewall: Cilium's host policies (server-side apply, once Cilium's CRD is
#      established) and Talos's ingress firewall on the worker (talosctl patch machineconfig,
#      no reboot), both rendered by render-platform from the declared flows; whether they log or
#      drop is config/platform.json's cilium.policy_audit_mode
#   3. the Gateway API CRDs, 4. cert-manager, with its CRDs and Gateway API support
#   5. istio-base (Istio's CRDs), 6. istiod
#
#   platform.sh apply     helm upgrade --install --version <pin> --wait --atomic, per release;
#                         the CRDs by server-side apply. A second run changes nothing.
#   platform.sh diff      the dry-run twin: helm diff when the plugin is there, otherwise
#                         helm template | kubectl diff --server-side. Changes nothing.
#   platform.sh destroy   uninstall in the reverse order (the host policies go before Cilium; Talos's
#                         firewall stays in the worker's machine config, protecting it); the CRDs
#                         (and istio-base, whose templates are the Istio CRDs) stay unless
#                         DELETE_CRDS=yes. What a kept release leaves pointing at an uninstalled one
#                         goes: istio-base's validating webhook istiod-default-validator
#                         (failurePolicy Fail once istiod has patched it) would refuse every write
#                         of an Istio object, the lists refresh's included, while istiod is gone.
#
# Everything is checked before the first change: the tools, the values files, and the sha256 of
# every vendored CRD file against its pin in k8s/versions.env. A failing step stops the ones after
# it (helm --atomic rolls its own release back).
#
# Environment:
#   RENDERED_DIR    render-platform's output (--out-dir): releases.tsv, the releases in install
#                   order (name, namespace, chart, repository, version), one <release>.json each
#                   (the day-2 switches), host-firewall.json (the Cilium host policies),
#                   talos-firewall.worker.yaml and talos-firewall.tsv (where to patch it:
#                   endpoint, node, file)
#   TALOSCONFIG     the cluster's talosconfig (default: talos/_out/talosconfig)
#   VALUES_DIR      the committed values (default: values)
#   VENDOR_DIR      where `make vendor` put the bundle (default: k8s/vendor)
#   VERSIONS_FILE   the pins (default: k8s/versions.env)
#   FIELD_MANAGER   server-side apply field manager for the CRDs (default: edgepop-platform)
#   HELM_TIMEOUT    per release (default: 10m)
#   DELETE_CRDS     destroy only: yes also deletes the platform's CRDs (and every object of them)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
die() { echo "platform: $*" >&2; exit 1; }
say() { echo "platform: $*" >&2; }
[[ "$mode" == apply || "$mode" == diff || "$mode" == destroy ]] || die "usage: platform.sh apply|diff|destroy"

versions=${VERSIONS_FILE:-k8s/versions.env}
[[ -f "$versions" ]] || die "$versions does not exist"
# shellcheck source=../k8s/versions.env
source "$versions"
values_dir=${VALUES_DIR:-values}
vendor_dir=${VENDOR_DIR:-k8s/vendor}
rendered_dir=${RENDERED_DIR:-}
field_manager=${FIELD_MANAGER:-edgepop-platform}
timeout=${HELM_TIMEOUT:-10m}

command -v helm >/dev/null || die "helm is not installed (make check lists what is needed)"
command -v kubectl >/dev/null || die "kubectl is not installed (make check lists what is needed)"
# Helm 4 renamed --atomic and changed what --wait waits for: this script speaks Helm 3.
helm_version=$(helm version --short 2>/dev/null || true)
[[ "$helm_version" == "v${HELM_MAJOR_VERSION:?}."* ]] ||
  die "helm ${helm_version:-?} is not Helm $HELM_MAJOR_VERSION, the major version this layer is written for (make check)"

# The releases as render-platform lists them: "name namespace chart repository version" (tabs),
# in install order.
releases_file=${rendered_dir:-RENDERED_DIR}/releases.tsv
[[ -n "$rendered_dir" && -f "$releases_file" ]] ||
  die "$releases_file is missing: make writes it with render-platform --out-dir from config/platform.json"
releases=()
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] || releases+=("$line")
done < "$releases_file"
(( ${#releases[@]} > 0 )) || die "$releases_file lists no release"

# The vendored Gateway API files, each checked against its pin (in the order of the pins).
crd_dir="$vendor_dir/gateway-api-$GATEWAY_API_VERSION"
crd_files=()
check_crds() {
  local line pin file want got
  while IFS= read -r line; do
    pin=${line#*=}; file=${pin%%:*}; want=${pin#*:}
    [[ -f "$crd_dir/$file" ]] || die "$crd_dir/$file is missing: run make vendor"
    got=$(sha256sum "$crd_dir/$file" | cut -d' ' -f1)
    [[ "$got" == "$want" ]] || die "$crd_dir/$file: sha256 $got does not match the pin $want ($versions): nothing applied"
    crd_files+=("$crd_dir/$file")
  done < <(grep -E '^VENDOR_GATEWAY_API_[A-Z0-9_]+=' "$versions")
  (( ${#crd_files[@]} > 0 )) || die "no VENDOR_GATEWAY_API_* pin in $versions"
}

# The host firewall render-platform wrote, and talosctl to patch the worker with.
talosconfig=${TALOSCONFIG:-talos/_out/talosconfig}
host_policies=$rendered_dir/host-firewall.json
talos_list=$rendered_dir/talos-firewall.tsv
talos_patches=()
check_firewall() {
  local line endpoint node patch
  [[ -f "$host_policies" && -f "$talos_list" ]] ||
    die "$host_policies or $talos_list is missing: make renders them with render-platform --inputs"
  command -v talosctl >/dev/null || die "talosctl is not installed (make check lists what is needed)"
  [[ -f "$talosconfig" ]] || die "$talosconfig is missing: it is written by make apply-infra"
  while IFS=$'\t' read -r endpoint node patch; do
    [[ -z "$endpoint" || "$endpoint" == \#* ]] && continue
    [[ -f "$rendered_dir/$patch" ]] || die "$rendered_dir/$patch is missing"
    talos_patches+=("$endpoint"$'\t'"$node"$'\t'"$rendered_dir/$patch")
  done < "$talos_list"
  (( ${#talos_patches[@]} > 0 )) || die "$talos_list names no node to patch"
}

# talosctl patch machineconfig on each listed node, with the extra flags given (--mode, --dry-run).
patch_talos() {
  local entry endpoint node patch
  for entry in "${talos_patches[@]}"; do
    IFS=$'\t' read -r endpoint node patch <<<"$entry"
    talosctl --talosconfig "$talosconfig" --endpoints "$endpoint" --nodes "$node" \
      patch machineconfig --patch "@$patch" "$@" ||
      die "Talos's firewall was not patched on $node (through $endpoint)"
  done
}

# Every release's values files: the committed one and the rendered day-2 switches.
check_values() {
  local entry name
  for entry in "${releases[@]}"; do
    read -r name _ <<<"$entry"
    [[ -f "$values_dir/$name.yaml" ]] || die "$values_dir/$name.yaml is missing"
    [[ -f "$rendered_dir/$name.json" ]] ||
      die "$rendered_dir/$name.json is missing: make renders it from config/platform.json"
  done
}

# helm's values flags for a release: the committed file, then the rendered day-2 switches (helm
# merges the second over the first).
values_flags() { printf '%s\n' -f "$values_dir/$1.yaml" -f "$rendered_dir/$1.json"; }

crd_file_flags() { local f; for f in "${crd_files[@]}"; do printf '%s\n' -f "$f"; done; }

apply() {
  check_crds
  check_values
  check_firewall
  local entry name ns chart repo version flags
  mapfile -t crd_flags < <(crd_file_flags)
  for entry in "${releases[@]}"; do
    read -r name ns chart repo version <<<"$entry"
    if [[ "$name" == cert-manager ]]; then
      say "Gateway API CRDs $GATEWAY_API_VERSION (${#crd_files[@]} files, server-side apply)"
      kubectl apply --server-side --field-manager="$field_manager" "${crd_flags[@]}" ||
        die "the Gateway API CRDs were not applied: stopping before cert-manager"
      kubectl wait --for=condition=Established --timeout=60s "${crd_flags[@]}" ||
        die "the Gateway API CRDs are not Established: stopping before cert-manager"
    fi
    mapfile -t flags < <(values_flags "$name")
    say "$name: chart $chart $version in $ns (waits until ready, rolls back on failure)"
    helm upgrade --install "$name" "$chart" --repo "$repo" --version "$version" \
      --namespace "$ns" --create-namespace --wait --atomic --timeout "$timeout" "${flags[@]}" ||
      die "$name did not install: stopping (helm rolled it back)"
    if [[ "$name" == cilium ]]; then
      # The operator registers Cilium's CRDs as it starts.
      say "host firewall: Cilium host policies, then Talos's ingress firewall on the worker"
      kubectl wait --for=condition=Established --timeout=120s \
        crd/ciliumclusterwidenetworkpolicies.cilium.io ||
        die "Cilium's CiliumClusterwideNetworkPolicy CRD is not established: stopping"
      kubectl apply --server-side --field-manager="$field_manager" -f "$host_policies" ||
        die "the host policies were not applied: stopping"
      patch_talos --mode=no-reboot
    fi
  done
  local installed=""
  for entry in "${releases[@]}"; do
    read -r name ns chart repo version <<<"$entry"
    installed+="$name $version, "
  done
  say "done: ${installed}Gateway API CRDs $GATEWAY_API_VERSION"
}

diff_platform() {
  check_crds
  check_values
  check_firewall
  local entry name ns chart repo version flags rc use_plugin=no
  if helm diff version >/dev/null 2>&1; then use_plugin=yes; fi
  mapfile -t crd_flags < <(crd_file_flags)
  for entry in "${releases[@]}"; do
    read -r name ns chart repo version <<<"$entry"
    mapfile -t flags < <(values_flags "$name")
    if [[ "$name" == cert-manager ]]; then
      say "diff: Gateway API CRDs $GATEWAY_API_VERSION"
      rc=0; kubectl diff --server-side --field-manager="$field_manager" "${crd_flags[@]}" || rc=$?
      (( rc <= 1 )) || die "kubectl diff failed on the Gateway API CRDs"
    fi
    say "diff: $name ($chart $version)"
    if [[ "$use_plugin" == yes ]]; then
      helm diff upgrade "$name" "$chart" --repo "$repo" --version "$version" --namespace "$ns" \
        --allow-unreleased "${flags[@]}" || die "helm diff failed on $name"
    else
      # kubectl diff exits 1 when there are differences, more on an error; helm template's own
      # failure must not hide behind that 1.
      set +e
      helm template "$name" "$chart" --repo "$repo" --version "$version" --namespace "$ns" "${flags[@]}" |
        kubectl diff --server-side --field-manager=helm -f -
      local status=("${PIPESTATUS[@]}")
      set -e
      (( status[0] == 0 )) || die "helm template failed on $name"
      (( status[1] <= 1 )) || die "kubectl diff failed on $name"
    fi
    if [[ "$name" == cilium ]]; then
      say "diff: the host firewall (Cilium host policies, Talos's ingress firewall)"
      rc=0; kubectl diff --server-side --field-manager="$field_manager" -f "$host_policies" || rc=$?
      (( rc <= 1 )) || die "kubectl diff failed on the host policies"
      patch_talos --dry-run
    fi
  done
}

destroy() {
  local i entry name ns chart repo version
  for (( i = ${#releases[@]} - 1; i >= 0; i-- )); do
    read -r name ns chart repo version <<<"${releases[$i]}"
    if [[ "$name" == istio-base && "${DELETE_CRDS:-}" != yes ]]; then
      say "istio-base kept: its templates are the Istio CRDs (DELETE_CRDS=yes removes them)"
      # The base chart's webhook to istiod, labelled app=istiod and release=<its release>
      # (manifests/charts/base/templates/defaultrevision-validatingwebhookconfiguration.yaml,
      # Istio 1.30): istiod is gone, and a helm upgrade of istio-base makes it again.
      say "deleting istio-base's validating webhook to istiod (istiod-default-validator)"
      kubectl delete validatingwebhookconfiguration -l "app=istiod,release=$name" --ignore-not-found
      continue
    fi
    if ! helm status "$name" --namespace "$ns" >/dev/null 2>&1; then
      say "$name: not installed"
      continue
    fi
    if [[ "$name" == cilium && -f "$host_policies" ]]; then
      say "the host policies: deleting (Talos's firewall stays in the worker's machine config)"
      kubectl delete --ignore-not-found -f "$host_policies" || die "the host policies were not deleted: stopping"
    fi
    say "$name: uninstalling"
    helm uninstall "$name" --namespace "$ns" --wait --timeout "$timeout" || die "$name was not uninstalled: stopping"
  done
  if [[ "${DELETE_CRDS:-}" == yes ]]; then
    # Every CRD of the platform's API groups; deleting one deletes all its objects.
    mapfile -t crds < <(kubectl get crd -o name |
      grep -E '\.(gateway\.networking\.k8s\.io|cert-manager\.io|istio\.io|cilium\.io)$' || true)
    if (( ${#crds[@]} > 0 )); then
      say "deleting ${#crds[@]} CRDs (DELETE_CRDS=yes)"
      kubectl delete --wait "${crds[@]}"
    fi
  else
    say "CRDs kept (Gateway API, cert-manager, Istio, Cilium): DELETE_CRDS=yes removes them"
  fi
}

case "$mode" in
  apply) apply ;;
  diff) diff_platform ;;
  destroy) destroy ;;
esac
