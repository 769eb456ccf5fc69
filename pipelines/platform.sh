#!/usr/bin/env bash
# The platform layer (layer 2) of a cluster profile: the components render-platform lists in
# components.tsv, in its order, each installed as its kind says (render-platform --help and
# tools/render-platform/src/profile.rs hold the profiles; this script knows none of them):
#   helm        helm upgrade --install --version <pin> --wait --atomic, with the committed values
#               files, then the rendered one (the cluster's layer); a chart whose CRDs are in its
#               crds/ folder, which helm never upgrades, has them applied first from helm show
#               crds at the pin, as such a chart asks
#   crds        vendored CRD files, each checked against its sha256 pin, server-side applied,
#               then waited for until Established
#   namespaces  the rendered Namespaces, server-side applied
#   objects     the rendered objects, server-side applied once the CRDs they need are
#               Established, taking back any field edited by hand; then the named rollout
#   secrets     the cluster's SOPS file, decrypted by sops before anything is installed, turned
#               into Secrets by render-platform --secrets, server-side applied
#   talos       a machine-config patch (talosctl patch machineconfig, no reboot) on each node
#               <component>.tsv lists (endpoint, node, patch file): the edge's host firewall on
#               the worker; kept on destroy, where it goes on protecting the node
#
#   platform.sh apply     installs every component in order. A second run changes nothing, and
#                         brings back whatever was changed by hand.
#   platform.sh diff      the dry-run twin: helm diff when the plugin is there, otherwise
#                         helm template --dry-run=server | kubectl diff --server-side; kubectl
#                         diff for the rest.
#                         Changes nothing.
#   platform.sh destroy   removes in the reverse order: releases uninstalled, objects and Secrets
#                         deleted; the namespaces (they hold the volumes' claims), the CRDs and
#                         the releases whose templates are CRDs (istio-base, the snapshot
#                         controller) stay unless DELETE_CRDS=yes for the last two. What a kept release leaves pointing
#                         at an uninstalled one goes: istio-base's validating webhook
#                         istiod-default-validator (failurePolicy Fail once istiod has patched it)
#                         would refuse every write of an Istio object, the lists refresh's
#                         included, while istiod is gone. DELETE_CRDS=yes deletes the CRDs of
#                         the API groups the plan's components own, and no other.
#   platform.sh destroy-plan  says what destroy would do, component by component, changing
#                         nothing (make destroy-platform shows it before it asks): what a release
#                         takes with it beyond itself (the CNI, a storage driver), and the volume
#                         claims its chart made, which helm uninstall deletes, with what their
#                         volumes' reclaim policy does to the data
#   platform.sh crd-groups  prints those groups (what the destroy question names)
#
# Everything is checked before the first change: the tools, the values files, the sha256 of every
# vendored CRD file against its pin in k8s/versions.env, and the secrets, which are decrypted
# first: a missing age key or a file that does not decrypt stops the run before anything is
# installed. A failing step stops the ones after it (helm --atomic rolls its own release back).
#
# Secrets: sops writes the clear document only into a pipe to render-platform, whose Secrets go
# through another pipe to kubectl: never in a file, an argument or a log.
#
# Environment:
#   RENDERED_DIR    render-platform's output (--out-dir): components.tsv, and the rendered file
#                   of each component that has one (<component>.json)
#   RENDER_PLATFORM render-platform, for --secrets (default: target/release/render-platform)
#   VALUES_DIR      the folder the plan's committed values files are relative to (default: the
#                   repository)
#   VENDOR_DIR      where `make vendor` put the bundle (default: k8s/vendor)
#   VERSIONS_FILE   the pins (default: k8s/versions.env)
#   FIELD_MANAGER   server-side apply field manager (default: edgepop-platform)
#   HELM_TIMEOUT    per release, and per deletion of objects or CRDs (default: 10m)
#   DELETE_CRDS     destroy only: yes also deletes the platform's CRDs (and every object of them)
#   TALOSCONFIG     the cluster's talosconfig, for `talos` components (default:
#                   talos/_out/talosconfig)
#   SOPS_AGE_KEY_FILE (or sops's other ways to find an age key): the cluster's age key
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
die() { echo "platform: $*" >&2; exit 1; }
say() { echo "platform: $*" >&2; }
[[ "$mode" =~ ^(apply|diff|destroy|destroy-plan|crd-groups)$ ]] || die "usage: platform.sh apply|diff|destroy|destroy-plan|crd-groups"

versions=${VERSIONS_FILE:-k8s/versions.env}
[[ -f "$versions" ]] || die "$versions does not exist"
# shellcheck source=../k8s/versions.env
source "$versions"
values_dir=${VALUES_DIR:-}
vendor_dir=${VENDOR_DIR:-k8s/vendor}
rendered_dir=${RENDERED_DIR:-}
render_platform=${RENDER_PLATFORM:-target/release/render-platform}
field_manager=${FIELD_MANAGER:-edgepop-platform}
timeout=${HELM_TIMEOUT:-10m}

# The components as render-platform lists them, in install order: "name kind namespace source
# repository version list needs ready depends crd_groups crds_from uninstalling" (tabs; `-`
# for an empty field).
plan_file=${rendered_dir:-RENDERED_DIR}/components.tsv
[[ -n "$rendered_dir" && -f "$plan_file" ]] ||
  die "$plan_file is missing: make writes it with render-platform --out-dir from the profile's config"
components=()
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] || components+=("$line")
done < "$plan_file"
(( ${#components[@]} > 0 )) || die "$plan_file lists no component"

# Reads one plan line into the globals below.
component() {
  IFS=$'\t' read -r name kind ns source repo version list needs ready _depends crd_groups crds_from uninstalling <<<"$1"
  local field
  for field in ns source repo version list needs ready crd_groups crds_from uninstalling; do
    [[ "${!field}" != - ]] || printf -v "$field" '%s' ""
  done
}

# The API groups whose CRDs the plan's components own, one a line.
crd_groups() {
  local line
  for line in "${components[@]}"; do
    component "$line"
    [[ -z "$crd_groups" ]] || tr ',' '\n' <<<"$crd_groups"
  done | sort -u
}
# What the question names reads only the plan.
if [[ "$mode" == crd-groups ]]; then
  crd_groups | paste -sd' '
  exit 0
fi

command -v helm >/dev/null || die "helm is not installed (make tools builds it at its pin)"
command -v kubectl >/dev/null || die "kubectl is not installed (make tools builds it at its pin)"
# Helm 4 renamed --atomic and changed what --wait waits for: this script speaks Helm 3.
helm_version=$(helm version --short 2>/dev/null || true)
[[ "$helm_version" == "v${HELM_MAJOR_VERSION:?}."* ]] ||
  die "helm ${helm_version:-?} is not Helm $HELM_MAJOR_VERSION, the major version this layer is written for (make check)"

# The vendored CRD files of a `crds` component, each checked against its pin, in the order of
# the pins: crd_files[<component>] holds them, newline-separated.
declare -A crd_files=()
check_crds() {
  local prefix=$1 bundle=$2 line pin file want got dir files=""
  dir="$vendor_dir/$name-$bundle"
  while IFS= read -r line; do
    pin=${line#*=}; file=${pin%%:*}; want=${pin#*:}
    [[ -f "$dir/$file" ]] || die "$dir/$file is missing: run make vendor"
    got=$(sha256sum "$dir/$file" | cut -d' ' -f1)
    [[ "$got" == "$want" ]] || die "$dir/$file: sha256 $got does not match the pin $want ($versions): nothing applied"
    files+="$dir/$file"$'\n'
  done < <(grep -E "^${prefix}[A-Z0-9_]+=" "$versions")
  [[ -n "$files" ]] || die "no ${prefix}* pin in $versions"
  crd_files[$name]=$files
}

# `-f FILE` for each vendored file of the component.
crd_flags() {
  local f
  while IFS= read -r f; do [[ -z "$f" ]] || printf '%s\n' -f "$f"; done <<<"${crd_files[$1]}"
}

# The nodes a `talos` component patches: talos_patches[<component>] holds "endpoint node file"
# lines (tabs), from the rendered <component>.tsv.
talosconfig=${TALOSCONFIG:-talos/_out/talosconfig}
declare -A talos_patches=()
check_talos() {
  local line endpoint node patch patches="" list="$rendered_dir/$name.tsv"
  [[ -f "$list" ]] || die "$list is missing: make renders it with render-platform --inputs"
  command -v talosctl >/dev/null || die "talosctl is not installed (make tools builds it at its pin)"
  [[ -x "$render_platform" ]] || die "$render_platform is missing (RENDER_PLATFORM)"
  [[ -f "$talosconfig" ]] || die "$talosconfig is missing: it is written by make apply-infra"
  while IFS=$'\t' read -r endpoint node patch; do
    [[ -z "$endpoint" || "$endpoint" == \#* ]] && continue
    [[ -f "$rendered_dir/$patch" ]] || die "$rendered_dir/$patch is missing"
    patches+="$endpoint"$'\t'"$node"$'\t'"$rendered_dir/$patch"$'\n'
  done < "$list"
  [[ -n "$patches" ]] || die "$list names no node to patch"
  talos_patches[$name]=$patches
}

# shellcheck source=without-secrets.sh
. pipelines/without-secrets.sh

# talosctl patch machineconfig on each node of the component, with the extra flags given
# (--mode, --dry-run). talosctl talks to Talos only: it never gets the Scaleway secret key that
# make hands every recipe.
#
# The same call deletes the node's rules the render no longer has (a patch only adds or merges
# documents): render-platform reads the node's active config, which holds the cluster's secrets,
# from a pipe, and writes the delete documents, which hold none, into a file of their own.
patch_talos() {
  local entry endpoint node patch stale patches
  stale=$(mktemp) || die "$name: no temporary file for the rules to delete"
  while IFS= read -r entry; do
    [[ -n "$entry" ]] || continue
    IFS=$'\t' read -r endpoint node patch <<<"$entry"
    without_secrets talosctl --talosconfig "$talosconfig" --endpoints "$endpoint" --nodes "$node" \
      get machineconfig v1alpha1 -o json | "$render_platform" --stale-rules "$patch" >"$stale" || {
      rm -f "$stale"
      die "$name: $node was not patched (its config was not read through $endpoint)"
    }
    patches=(--patch "@$patch")
    [[ ! -s "$stale" ]] || patches+=(--patch "@$stale")
    without_secrets talosctl --talosconfig "$talosconfig" --endpoints "$endpoint" --nodes "$node" \
      patch machineconfig "${patches[@]}" "$@" || {
      rm -f "$stale"
      die "$name: $node was not patched (through $endpoint)"
    }
  done <<<"${talos_patches[$name]}"
  rm -f "$stale"
}

# helm's values flags for a release: the committed files, then the rendered cluster layer (helm
# merges each over the ones before).
values_flags() {
  local f
  IFS=, read -r -a files <<<"$list"
  for f in "${files[@]}"; do printf '%s\n' -f "${values_dir:+$values_dir/}$f"; done
  printf '%s\n' -f "$rendered_dir/$name.json"
}

# Everything a component needs, before the first change.
check_all() {
  local entry f
  for entry in "${components[@]}"; do
    component "$entry"
    case "$kind" in
      helm)
        IFS=, read -r -a files <<<"$list"
        for f in "${files[@]}"; do
          f=${values_dir:+$values_dir/}$f
          [[ -f "$f" ]] || die "$f is missing"
        done
        [[ -f "$rendered_dir/$name.json" ]] ||
          die "$rendered_dir/$name.json is missing: make renders it from the profile's config" ;;
      crds) check_crds "$source" "$version" ;;
      namespaces|objects|secrets)
        [[ -f "$rendered_dir/$name.json" ]] ||
          die "$rendered_dir/$name.json is missing: make renders it with render-platform from the profile's config (the edge's with --inputs)" ;;
      talos) check_talos ;;
      *) die "$plan_file: component $name has an unknown kind '$kind'" ;;
    esac
  done
}

# The Secrets of the `secrets` component just read, on stdout: sops decrypts the cluster's SOPS
# file into a pipe to render-platform. Its callers keep them in memory (decrypted in full before
# kubectl starts) and hand them to kubectl through a pipe: no file ever holds them, so nothing
# is left behind however the run ends (a SIGKILL included).
secrets_of() {
  sops --decrypt --output-type json "$source" | "$render_platform" --secrets "$rendered_dir/$name.json"
}

# The Secret `namespace/name` that an `objects` component lists, as render-platform makes it from
# the operator's environment (the etcd backup's Object Storage key), on stdout; nothing when none
# of its variables is set. Kept in memory and piped to kubectl, as the SOPS Secrets are.
environment_secret() {
  "$render_platform" --environment-secret "$1"
}

# An `objects` component's environment Secrets, before anything is installed: each is made from
# the environment (half a key stops the run) or already in the cluster.
check_environment_secrets() {
  local ref refs
  IFS=, read -r -a refs <<<"$list"
  for ref in "${refs[@]}"; do
    [[ -x "$render_platform" ]] || die "$render_platform is missing (RENDER_PLATFORM)"
    [[ -n "$(environment_secret "$ref")" ]] && continue
    [[ -n "$(kubectl get secret -n "${ref%%/*}" "${ref#*/}" --ignore-not-found -o name)" ]] ||
      die "$name needs the Secret $ref, which is not in the cluster and which no environment variable makes (render-platform --help names them, under --environment-secret): nothing installed"
  done
}

# Every `secrets` component decrypted once before anything is installed, into /dev/null: a
# missing age key or a file that does not decrypt stops the run before the first change.
check_secrets() {
  local entry
  for entry in "${components[@]}"; do
    component "$entry"
    if [[ "$kind" == objects && -n "$list" ]]; then check_environment_secrets; fi
    [[ "$kind" == secrets ]] || continue
    [[ -f "$source" ]] || die "$source is missing: the cluster's SOPS file (the config's \"secrets\")"
    command -v sops >/dev/null || die "sops is not installed (make tools builds it at its pin)"
    [[ -x "$render_platform" ]] || die "$render_platform is missing (RENDER_PLATFORM)"
    say "$name: decrypting $source (sops, age)"
    secrets_of >/dev/null ||
      die "$source did not decrypt into the Secrets render-platform expects (is SOPS_AGE_KEY_FILE the cluster's age key?): nothing installed"
  done
}

# Server-side apply of a file; a field changed by hand (another field manager) is taken back.
apply_file() {
  kubectl apply --server-side --force-conflicts --field-manager="$field_manager" -f "$1"
}

# The CRDs an `objects` component needs, Established. They may not exist yet when the release
# that brings them is ready: an operator registers its own once it runs (Cilium's), so their
# creation is waited for first (--for=create comes before the condition, kubectl >= 1.31).
wait_for_crds() {
  local crd
  IFS=, read -r -a crds <<<"$needs"
  for crd in "${crds[@]}"; do
    kubectl wait --for=create --for=condition=Established --timeout=120s "crd/$crd" ||
      die "$name needs the CRD $crd, which is not Established: stopping (is the component that brings it running?)"
  done
}

apply() {
  check_all
  check_secrets
  local entry flags chart_crds secrets ref refs installed=""
  for entry in "${components[@]}"; do
    component "$entry"
    case "$kind" in
      helm)
        if [[ "$crds_from" == folder ]]; then
          say "$name: the CRDs of chart $source $version (helm show crds, server-side apply)"
          chart_crds=$(helm show crds "$source" --repo "$repo" --version "$version") ||
            die "helm show crds failed on $name: stopping"
          printf '%s\n' "$chart_crds" |
            kubectl apply --server-side --force-conflicts --field-manager="$field_manager" -f - ||
            die "the CRDs of $name were not applied: stopping"
        fi
        mapfile -t flags < <(values_flags)
        say "$name: chart $source $version in $ns (waits until ready, rolls back on failure)"
        helm upgrade --install "$name" "$source" --repo "$repo" --version "$version" \
          --namespace "$ns" --create-namespace --wait --atomic --timeout "$timeout" "${flags[@]}" ||
          die "$name did not install: stopping (helm rolled it back)"
        installed+="$name $version, " ;;
      crds)
        mapfile -t flags < <(crd_flags "$name")
        say "$name: CRDs $version ($(( ${#flags[@]} / 2 )) files, server-side apply)"
        kubectl apply --server-side --field-manager="$field_manager" "${flags[@]}" ||
          die "the $name CRDs were not applied: stopping"
        kubectl wait --for=condition=Established --timeout=60s "${flags[@]}" ||
          die "the $name CRDs are not Established: stopping"
        installed+="$name CRDs $version, " ;;
      namespaces|objects)
        [[ -z "$needs" ]] || wait_for_crds
        say "$name: $kind (server-side apply)"
        apply_file "$rendered_dir/$name.json" || die "$name was not applied: stopping"
        IFS=, read -r -a refs <<<"$list"
        for ref in "${refs[@]}"; do
          secrets=$(environment_secret "$ref") || die "$name: the Secret $ref was not made: stopping"
          if [[ -n "$secrets" ]]; then
            say "$name: the Secret $ref, from the environment (server-side apply)"
            printf '%s\n' "$secrets" | apply_file - || die "$name: the Secret $ref was not applied: stopping"
          else
            say "$name: the Secret $ref stays as it is in the cluster (no environment variable makes it)"
          fi
          secrets=""
        done
        if [[ -n "$ready" ]]; then
          kubectl -n "$ns" rollout status "$ready" --timeout="$timeout" ||
            die "$name: $ready did not roll out: stopping"
        fi
        installed+="$name, " ;;
      secrets)
        say "$name: ${list//,/, } (server-side apply)"
        secrets=$(secrets_of) || die "$source did not decrypt: stopping"
        printf '%s\n' "$secrets" | apply_file - || die "$name were not applied: stopping"
        secrets=""
        installed+="$name, " ;;
      talos)
        say "$name: talosctl patch machineconfig (no reboot)"
        patch_talos --mode=no-reboot
        installed+="$name, " ;;
    esac
  done
  say "done: ${installed%, }"
}

diff_platform() {
  check_all
  check_secrets
  local entry flags rc chart_crds secrets ref refs use_plugin=no
  if helm diff version >/dev/null 2>&1; then use_plugin=yes; fi
  for entry in "${components[@]}"; do
    component "$entry"
    case "$kind" in
      crds)
        mapfile -t flags < <(crd_flags "$name")
        say "diff: $name CRDs $version"
        rc=0; kubectl diff --server-side --field-manager="$field_manager" "${flags[@]}" || rc=$?
        (( rc <= 1 )) || die "kubectl diff failed on the $name CRDs" ;;
      namespaces|objects)
        say "diff: $name"
        rc=0; kubectl diff --server-side --force-conflicts --field-manager="$field_manager" -f "$rendered_dir/$name.json" || rc=$?
        (( rc <= 1 )) || die "kubectl diff failed on $name"
        # The environment Secrets: what the apply would do with each, never their values.
        IFS=, read -r -a refs <<<"$list"
        for ref in "${refs[@]}"; do
          if [[ -n "$(environment_secret "$ref")" ]]; then
            say "diff: $name: the Secret $ref would be applied from the environment (values not shown)"
          else
            say "diff: $name: the Secret $ref stays as it is in the cluster (no environment variable makes it)"
          fi
        done ;;
      secrets)
        say "diff: $name"
        # kubectl diff masks the values of Secrets.
        secrets=$(secrets_of) || die "$source did not decrypt: nothing compared"
        rc=0; printf '%s\n' "$secrets" | kubectl diff --server-side --force-conflicts --field-manager="$field_manager" -f - || rc=$?
        secrets=""
        (( rc <= 1 )) || die "kubectl diff failed on $name" ;;
      talos)
        say "diff: $name (talosctl --dry-run)"
        patch_talos --dry-run ;;
      helm)
        if [[ "$crds_from" == folder ]]; then
          say "diff: the CRDs of $name ($source $version)"
          chart_crds=$(helm show crds "$source" --repo "$repo" --version "$version") ||
            die "helm show crds failed on $name"
          rc=0; printf '%s\n' "$chart_crds" | kubectl diff --server-side --force-conflicts --field-manager="$field_manager" -f - || rc=$?
          (( rc <= 1 )) || die "kubectl diff failed on the CRDs of $name"
        fi
        mapfile -t flags < <(values_flags)
        say "diff: $name ($source $version)"
        if [[ "$use_plugin" == yes ]]; then
          helm diff upgrade "$name" "$source" --repo "$repo" --version "$version" --namespace "$ns" \
            --allow-unreleased "${flags[@]}" || die "helm diff failed on $name"
        else
          # kubectl diff exits 1 when there are differences, more on an error; helm template's own
          # failure must not hide behind that 1. --dry-run=server lets a chart's `lookup` read
          # what it made before, as an upgrade does (helm v3.22.0 pkg/action/install.go, lines
          # 256-258): CrowdSec's keeps its LAPI secrets so (templates/_helpers.tpl, lines 4-15, at
          # crowdsec-0.24.0), where a client-side template would show them all changed.
          set +e
          helm template "$name" "$source" --repo "$repo" --version "$version" --namespace "$ns" --dry-run=server "${flags[@]}" |
            kubectl diff --server-side --field-manager=helm -f -
          local status=("${PIPESTATUS[@]}")
          set -e
          (( status[0] == 0 )) || die "helm template failed on $name"
          (( status[1] <= 1 )) || die "kubectl diff failed on $name"
        fi ;;
    esac
  done
}

# The volume claims helm made for the release `name` in its namespace (helm annotates everything
# it makes with meta.helm.sh/release-name: helm v3.22.0 pkg/action/validate.go, lines 140-160),
# which helm uninstall deletes with the release unless they are annotated
# helm.sh/resource-policy: keep (pkg/action/resource_policy.go, lines 26-46), each with what its
# volume's reclaim policy does to the data: "; its volume claims ns/a (...), ..." or nothing.
release_claims() {
  local claims volumes claim release keep volume policy said=()
  local -A reclaim=()
  if ! claims=$(kubectl get pvc -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.annotations.meta\.helm\.sh/release-name}|{.metadata.annotations.helm\.sh/resource-policy}|{.spec.volumeName}{"\n"}{end}' 2>&1); then
    printf '; its volume claims cannot be listed (%s)' "${claims%%$'\n'*}"; return
  fi
  volumes=$(kubectl get pv -o jsonpath='{range .items[*]}{.metadata.name}|{.spec.persistentVolumeReclaimPolicy}{"\n"}{end}' 2>/dev/null) || volumes=""
  while IFS='|' read -r volume policy; do [[ -z "$volume" ]] || reclaim[$volume]=$policy; done <<<"$volumes"
  while IFS='|' read -r claim release keep volume; do
    [[ -n "$claim" && "$release" == "$name" ]] || continue
    policy=${reclaim[$volume]:-}
    if [[ "$keep" == keep ]]; then said+=("$ns/$claim (kept: helm.sh/resource-policy keep)"); continue; fi
    case "$policy" in
      Delete) said+=("$ns/$claim (reclaim policy Delete: its data goes)") ;;
      "") said+=("$ns/$claim (no volume bound)") ;;
      *) said+=("$ns/$claim (reclaim policy $policy: its volume stays)") ;;
    esac
  done <<<"$claims"
  if (( ${#said[@]} > 0 )); then
    local text
    printf -v text '%s, ' "${said[@]}"
    printf '; its volume claims %s' "${text%, }"
  fi
}

# A release kept by destroy: its templates are CRDs, which uninstalling deletes.
kept_release() {
  [[ "$crds_from" == templates && "${DELETE_CRDS:-}" != yes ]]
}

# What destroy does to the component just read, said and done; with "plan", only said (the
# cluster read, nothing changed).
destroy_one() {
  local plan=$1 secret
  case "$kind" in
    helm)
      # helm uninstall would delete the CRDs the release's templates render, and every object
      # of them (VolumeSnapshots, Istio's policies): such a release stays.
      if kept_release; then
        say "$name kept: its templates are CRDs (${crd_groups//,/, }), which uninstalling deletes (DELETE_CRDS=yes removes them)"
        if [[ -z "$plan" && "$name" == istio-base ]]; then
          # The base chart's webhook to istiod, labelled app=istiod and release=<its release>
          # (manifests/charts/base/templates/defaultrevision-validatingwebhookconfiguration.yaml,
          # Istio 1.30): istiod is gone, and a helm upgrade of istio-base makes it again.
          say "deleting istio-base's validating webhook to istiod (istiod-default-validator)"
          kubectl delete validatingwebhookconfiguration -l "app=istiod,release=$name" --ignore-not-found
        fi
        return
      fi
      if [[ -n "$plan" ]]; then
        say "$name: the helm release in $ns and what its chart made$(release_claims)${uninstalling:+; $uninstalling}"
        return
      fi
      if ! helm status "$name" --namespace "$ns" >/dev/null 2>&1; then
        say "$name: not installed"
        return
      fi
      say "$name: uninstalling"
      helm uninstall "$name" --namespace "$ns" --wait --timeout "$timeout" || die "$name was not uninstalled: stopping" ;;
    objects)
      if [[ -n "$plan" ]]; then say "$name: its objects ($rendered_dir/$name.json)"; return; fi
      # Without their CRDs (the release that brought them is gone) there is nothing to delete.
      local crd gone=""
      IFS=, read -r -a crds <<<"$needs"
      for crd in "${crds[@]}"; do kubectl get crd "$crd" >/dev/null 2>&1 || gone=$crd; done
      if [[ -n "$gone" ]]; then
        say "$name: nothing to delete (the CRD $gone is gone)"
        return
      fi
      say "$name: deleting its objects"
      kubectl delete --ignore-not-found --wait --timeout="$timeout" -f "$rendered_dir/$name.json" ||
        die "$name was not deleted within $timeout (a finalizer that no controller removes?): stopping" ;;
    secrets)
      if [[ -n "$plan" ]]; then say "$name: the Secrets ${list//,/, }"; return; fi
      IFS=, read -r -a secrets <<<"$list"
      for secret in "${secrets[@]}"; do
        say "$name: deleting $secret"
        kubectl delete secret --ignore-not-found -n "${secret%%/*}" "${secret#*/}" ||
          die "$secret was not deleted: stopping"
      done ;;
    namespaces)
      say "$name kept: kubectl delete namespace would delete everything in them, whoever's, volume claims included" ;;
    talos)
      say "$name kept: it stays in the nodes' machine config, protecting them" ;;
    crds) ;;
  esac
}

# destroy [plan]: every component in the reverse order, then the CRDs when DELETE_CRDS=yes.
destroy() {
  local plan=${1:-} i
  [[ -z "$plan" ]] || say "destroy-platform does, in this order:"
  for (( i = ${#components[@]} - 1; i >= 0; i-- )); do
    component "${components[$i]}"
    destroy_one "$plan"
  done
  if [[ "${DELETE_CRDS:-}" != yes ]]; then
    say "CRDs kept: DELETE_CRDS=yes removes them"
    return
  fi
  # Every CRD of the API groups this profile's components own, and no other (another
  # profile's, or another team's); deleting one deletes all its objects.
  local -A owned=()
  local group crd
  for group in $(crd_groups); do owned[$group]=1; done
  if [[ -n "$plan" ]]; then
    say "every CRD of ${!owned[*]}, with every object of them (DELETE_CRDS=yes)"
    return
  fi
  crds=()
  while IFS= read -r crd; do
    group=${crd#*/}; group=${group#*.}
    [[ -z "$crd" || -z "${owned[$group]:-}" ]] || crds+=("$crd")
  done < <(kubectl get crd -o name)
  if (( ${#crds[@]} > 0 )); then
    say "deleting ${#crds[@]} CRDs of ${!owned[*]} (DELETE_CRDS=yes)"
    kubectl delete --wait --timeout="$timeout" "${crds[@]}" ||
      die "the CRDs were not deleted within $timeout (objects of them held by finalizers?): stopping"
  fi
}

case "$mode" in
  apply) apply ;;
  diff) diff_platform ;;
  destroy) destroy ;;
  destroy-plan) destroy plan ;;
esac
