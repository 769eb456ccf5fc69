# shellcheck shell=bash
# The part of `make check` for a profile other than edge: an existing cluster, which runs its own
# Kubernetes and owes nothing to Scaleway. Sourced by check-prereqs.sh after its helm line (it
# uses that script's ok, miss, opt, have, minor and $profile), it prints the rest of the tools,
# then the secrets and configuration, and exits.
#
#   kubectl   within one minor of the cluster's own API server, asked through the kubeconfig
#             once kubeconfig-guard has found it points at the config's cluster_endpoint; when
#             it cannot be asked, the skew is said to be unchecked, not missing
#   sops      installed
#   age key   sops decrypts the SOPS file with it (into /dev/null); when it cannot, the
#             recipients the file is encrypted to are named beside those of the key
#   config    render-platform renders it, its SOPS file's shape included
#   cluster   when the kubeconfig answers: what already runs as CNI and service proxy, which
#             this profile replaces with the helm release `cilium` (kubeProxyReplacement)
#
# Reads no secret value and prints none: the clear document goes to /dev/null, and only public
# recipients (age-keygen -y) are compared. KUBECONFIG: the one make names (on-prem, the one given
# on its command line). CLUSTER: the cluster of clusters/ the config must be (make CLUSTER=NAME).

platform_config=${PLATFORM_CONFIG:-config/$profile.json}
render=${BIN:-target/release}/render-platform
guard=${BIN:-target/release}/kubeconfig-guard
# A prerequisite this check cannot see from here: said, not counted.
by_hand() { printf '  by hand  %s\n' "$*"; }
# The names the render shares (status.env, KEY=value a line), read with bash alone.
declare -A names=()
name_of() { printf '%s' "${names[$1]:-}"; }
answering=""
joined() { local text; text=$(printf '%s, ' "$@"); printf '%s' "${text%, }"; }

# The config first (quietly): the cluster's endpoint and SOPS file come from its render.
config_state=absent config_why=""
render_names() { "$render" --profile "$profile" --config "$platform_config" ${CLUSTER:+--cluster "$CLUSTER"} --print-names; }
if [[ ! -f "$platform_config" ]]; then config_state=absent
elif [[ ! -x "$render" ]]; then config_state=unbuilt
elif names_text=$(render_names 2>/dev/null); then
  config_state=ok
  while IFS='=' read -r key value; do [[ -n "$key" ]] && names[$key]=$value; done <<<"$names_text"
else
  config_state=invalid; config_why=$(render_names 2>&1 >/dev/null || true)
  config_why=${config_why#render-platform: error: }; config_why=${config_why#"$platform_config: "}
fi

if have sops; then ok "sops (decrypts the cluster's secrets at apply time; pinned for the tests: SOPS_VERSION $SOPS_VERSION)"
else miss "sops (not installed: it decrypts the cluster's secrets at apply time; $tools_hint)"; fi

# kubectl's skew policy: within one minor of the API server, here the cluster's own.
skew_unchecked() { opt "kubectl $1: its skew against the cluster cannot be checked yet: $2"; }
if ! have kubectl; then miss "kubectl (not installed; $tools_hint)"
else
  got=$(kubectl version --client 2>/dev/null | minor)
  endpoint=""
  [[ "$config_state" == ok ]] && endpoint=$(name_of CLUSTER_ENDPOINT)
  if [[ -z "$endpoint" ]]; then skew_unchecked "${got:-?}" "it needs the endpoint of $platform_config, which does not render yet (below)"
  elif [[ -z "${KUBECONFIG:-}" || ! -f "$KUBECONFIG" ]]; then
    skew_unchecked "${got:-?}" "no kubeconfig at '${KUBECONFIG:-}' (make check PROFILE=$profile KUBECONFIG=FILE)"
  elif [[ ! -x "$guard" ]]; then skew_unchecked "${got:-?}" "kubeconfig-guard is not built (it checks that $KUBECONFIG is this cluster's)"
  elif ! refusal=$("$guard" --kubeconfig "$KUBECONFIG" --endpoint "$endpoint" --cluster-name "$(name_of CLUSTER_NAME)" 2>&1 >/dev/null); then
    skew_unchecked "${got:-?}" "${refusal#kubeconfig-guard: error: }"
  else
    server=""
    while IFS= read -r line; do [[ "$line" == "Server Version: "* ]] && server=${line#Server Version: }; done \
      < <(kubectl --request-timeout=5s version 2>/dev/null || true)
    want=$(minor <<<"$server")
    [[ -z "$want" ]] || answering=yes
    if [[ -z "$want" ]]; then skew_unchecked "${got:-?}" "the API server at $endpoint does not answer ($KUBECONFIG)"
    elif [[ -n "$got" ]] && (( ${got#v1.} - ${want#v1.} <= 1 && ${want#v1.} - ${got#v1.} <= 1 )); then
      ok "kubectl $got (the cluster at $endpoint runs Kubernetes $server)"
    else miss "kubectl ${got:-?}: must be within one minor of the cluster's Kubernetes $server (at $endpoint)"; fi
  fi
fi

echo "secrets and configuration:"
# Where sops finds age keys (sops age/keysource.go, loadIdentities: every one of these it finds).
age_keys=${XDG_CONFIG_HOME:-$HOME/.config}/sops/age/keys.txt
key_sources=()
if [[ -n "${SOPS_AGE_KEY_FILE:-}" ]]; then key_sources+=("SOPS_AGE_KEY_FILE ($SOPS_AGE_KEY_FILE)"); fi
if [[ -n "${SOPS_AGE_KEY:-}" ]]; then key_sources+=(SOPS_AGE_KEY); fi
if [[ -n "${SOPS_AGE_KEY_CMD:-}" ]]; then key_sources+=(SOPS_AGE_KEY_CMD); fi
if [[ -f "$age_keys" ]]; then key_sources+=("$age_keys"); fi
key_text=$(joined "${key_sources[@]}")
# The public recipients of the keys sops would use (age-keygen -y; else the comments age-keygen
# writes in a key file). The key itself goes through stdin, never an argument.
key_recipients() {
  local file
  for file in ${SOPS_AGE_KEY_FILE:+"$SOPS_AGE_KEY_FILE"} "$age_keys"; do
    [[ -f "$file" ]] || continue
    if have age-keygen; then age-keygen -y <"$file" 2>/dev/null || true
    else while IFS= read -r line; do [[ "$line" == "# public key: "* ]] && printf '%s\n' "${line#\# public key: }"; done <"$file"; fi
  done
  if [[ -n "${SOPS_AGE_KEY:-}" ]] && have age-keygen; then age-keygen -y <<<"$SOPS_AGE_KEY" 2>/dev/null || true; fi
}
if [[ -n "${SOPS_AGE_KEY_FILE:-}" && ! -f "$SOPS_AGE_KEY_FILE" ]]; then miss "SOPS_AGE_KEY_FILE names no file ($SOPS_AGE_KEY_FILE)"
elif (( ${#key_sources[@]} == 0 )); then miss "no age key: SOPS_AGE_KEY_FILE (or $age_keys) must hold the cluster's age key"
elif [[ "$config_state" != ok ]]; then opt "an age key in $key_text; whether it decrypts the SOPS file is checked once $platform_config renders"
elif ! have sops; then opt "an age key in $key_text; whether it decrypts the SOPS file is checked once sops is installed"
else
  secrets_file=$(name_of SECRETS_FILE)
  if sops_why=$(sops --decrypt "$secrets_file" 2>&1 >/dev/null); then ok "the age key in $key_text decrypts $secrets_file"
  else
    mapfile -t have_keys < <(key_recipients)
    read -ra file_keys <<<"$(name_of SECRETS_RECIPIENTS)"
    known=0
    for r in "${file_keys[@]}"; do [[ " ${have_keys[*]} " == *" $r "* ]] && known=1; done
    if (( known == 0 )); then
      wanted=$(joined "${file_keys[@]}"); held=$(joined "${have_keys[@]}")
      miss "the age key in $key_text cannot decrypt $secrets_file: the file is encrypted to ${wanted:-no age recipient}, the key is ${held:-of no recipient age-keygen -y could read} (use the cluster's key; or, where one of its keys is, add this one: sops --rotate --in-place --add-age <its public key> $secrets_file)"
    else miss "sops cannot decrypt $secrets_file with the age key in $key_text: ${sops_why%%$'\n'*}"; fi
  fi
fi
# What already runs (a cluster made with Talos's defaults runs flannel, the DaemonSet
# kube-system/kube-flannel of Talos's k8stemplates/flannel.go, and kube-proxy): every
# DaemonSet, with the helm release that owns it (the annotation helm checks before it adopts an
# object: helm pkg/action/validate.go, checkOwnership).
cluster_rows() {
  local daemonsets line name release flannel="" proxy="" cilium="" cilium_release=""
  if ! daemonsets=$(kubectl --request-timeout=10s get daemonsets -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}|{.metadata.annotations.meta\.helm\.sh/release-name}{"\n"}{end}' 2>&1); then
    opt "what runs on the cluster cannot be read: ${daemonsets%%$'\n'*}"; return
  fi
  while IFS='|' read -r name release; do
    case "$name" in
      */*flannel*) flannel=$name ;;
      kube-system/kube-proxy) proxy=$name ;;
      kube-system/cilium) cilium=$name; cilium_release=$release ;;
    esac
  done <<<"$daemonsets"
  if [[ -n "$flannel" ]]; then miss "the cluster runs flannel ($flannel): Cilium must be its only CNI: its machine config needs cluster.network.cni.name: none, and flannel removed, before make apply-platform"; fi
  if [[ -n "$proxy" ]]; then miss "the cluster runs kube-proxy ($proxy): Cilium replaces it: its machine config needs cluster.proxy.disabled: true, and the DaemonSet removed, before make apply-platform"; fi
  if [[ -n "$cilium" && "$cilium_release" != cilium ]]; then
    miss "Cilium runs outside the helm release cilium ($cilium, release '${cilium_release:-none}'): helm refuses to adopt its objects, so make apply-platform would stop at its first step"
  elif [[ -n "$cilium" ]]; then ok "Cilium is the helm release cilium ($cilium): make apply-platform upgrades it to $CILIUM_VERSION with this profile's values"
  elif [[ -z "$flannel$proxy" ]]; then ok "no CNI and no kube-proxy yet: make apply-platform installs Cilium (the nodes are NotReady until then)"; fi
}
if [[ "$answering" == yes ]]; then echo "the cluster at $endpoint:"; cluster_rows; fi
case "$config_state" in
  absent) miss "$platform_config (${CLUSTER:+mkdir -p ${platform_config%/*} && }cp config/$profile.example.json $platform_config, then edit${CLUSTER:+: cluster_name $CLUSTER, secrets secrets.sops.yaml})" ;;
  unbuilt) opt "$platform_config present, not checked (render-platform is not built: make apply-platform builds it)" ;;
  ok) ok "$platform_config and its SOPS file"
      by_hand "the router hairpins $(name_of PUBLIC_ADDRESS) (NAT loopback): cert-manager's HTTP-01 self-check fetches each name from inside the cluster, at the public address, before Let's Encrypt does; without it no certificate is issued (make cluster-status checks it, row hairpin)" ;;
  invalid) invalid "$platform_config: $config_why" ;;
esac
if (( missing )); then echo "make check: something is missing or invalid (see above)" >&2; exit 1; fi
echo "make check: ready (PROFILE=$profile)"
exit 0
