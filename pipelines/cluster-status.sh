#!/usr/bin/env bash
# `make cluster-status`: one table of what the layers put on the cluster, to check each step of a
# deployment. PROFILE=edge (the default): nodes, Cilium, cert-manager, Istio, the Gateway API
# CRDs, Gateways, each edge node serving a Ready gateway pod, Certificates, the filter's
# WasmPlugin and, when there is one, the scheduled etcd backup's last run; the edge nodes' label
# comes from render-platform's status.env (NAMES), the gateway's namespace and pods from
# render-edge's names (EDGE_NAMES). PROFILE=onprem: the base's own checks, each row saying where
# to look when it is not ok: nodes Ready, `cilium status`, the default StorageClass, Traefik's
# external address, the CrowdSec bouncer registered and pulling, the public address reached from
# inside the cluster (the router's hairpin, which HTTP-01 needs), and the smoke test's name
# answering in HTTPS at the public address; the names it checks come from render-platform's
# status.env (NAMES). Exits 0 when every row is ok, 1 otherwise (2 when
# the cluster cannot be asked).
#
#   COMPONENT    NAME                                   STATE     DETAIL
#   node         edge-worker-1                          ok        Ready, kubelet v1.36.0
#   cilium       kube-system/ds/cilium                  ok        4/4 ready
#   ...
#   edge-node    edge-worker-1                          ok        gateway pod edge-gateway-istio-5c9d8f7b4-x2x7q Ready
#   ...
set -euo pipefail
here=$(dirname "$0")
source "${VERSIONS_FILE:-$here/../k8s/versions.env}"
command -v kubectl >/dev/null || { echo "cluster-status: kubectl is not installed (make tools builds it at its pin)" >&2; exit 2; }

profile=${PROFILE:-edge}
case "$profile" in
  edge|onprem) ;;
  *) echo "cluster-status: no status for profile '$profile'" >&2; exit 2 ;;
esac
[[ -n "${NAMES:-}" && -f "$NAMES" ]] ||
  { echo "cluster-status: ${NAMES:-NAMES} is missing: render-platform --profile $profile --out-dir writes status.env" >&2; exit 2; }
# The render's names, KEY=value a line: read, not sourced (a value is never run), and only the
# ones this script uses. A value may hold '=' (a label selector): read keeps it whole.
while IFS='=' read -r key value; do
  case "$key" in
    CLUSTER_ENDPOINT|STORAGE_CLASS|CEPH_NAMESPACE|TRAEFIK_NAMESPACE|TRAEFIK_SERVICE|INGRESS_ADDRESS|\
    PUBLIC_ADDRESS|LB_POOL|CROWDSEC_NAMESPACE|LAPI_DEPLOYMENT|BOUNCER_NAME|BOUNCER_PREFIX|SMOKE_NAMESPACE|SMOKE_HOST|\
    ACME_SERVER|EDGE_NODE_LABEL) printf -v "$key" '%s' "$value" ;;
  esac
done <"$NAMES"
# What to say when the cluster cannot be asked: the edge's cluster is this Makefile's own (its
# kubeconfig made by apply-infra, its power by make up); another profile's exists on its own.
case "$profile" in
  edge)
    [[ -n "${EDGE_NODE_LABEL:-}" ]] ||
      { echo "cluster-status: $NAMES names no EDGE_NODE_LABEL: render-platform writes it" >&2; exit 2; }
    source "$here/edge-names.sh"
    read_edge_names "${EDGE_NAMES:-}" || exit 2
    [[ -n "${EDGE_GATEWAY_PODS:-}" ]] ||
      { echo "cluster-status: $EDGE_NAMES names no EDGE_GATEWAY_PODS: render-edge --names writes it" >&2; exit 2; }
    no_kubeconfig="run make apply-infra first"
    no_answer="the API server does not answer (make up powers the cluster on)" ;;
  onprem)
    no_kubeconfig="name the cluster's kubeconfig (make cluster-status PROFILE=onprem KUBECONFIG=FILE)"
    no_answer="the API server at ${CLUSTER_ENDPOINT:-?} does not answer: check the cluster (its control planes are up and reachable from here) and the kubeconfig $KUBECONFIG (its current context, its credentials)" ;;
esac
[[ -n "${KUBECONFIG:-}" && -f "$KUBECONFIG" ]] || {
  echo "cluster-status: no kubeconfig at '${KUBECONFIG:-}': $no_kubeconfig" >&2; exit 2; }
kubectl get --raw /readyz >/dev/null 2>&1 || { echo "cluster-status: $no_answer" >&2; exit 2; }

not_ok=0
row() {
  printf '%-12s %-46s %-9s %s\n' "$1" "$2" "$3" "$4"
  [[ "$3" == ok ]] || not_ok=$((not_ok + 1))
}
row COMPONENT NAME STATE DETAIL
not_ok=0
# Fields are separated by '|': a tab is whitespace to read, which would merge empty fields.
sep='|'

# Nodes: Ready condition, cordon, kubelet version.
while IFS="$sep" read -r name ready unschedulable kubelet; do
  [[ -n "$name" ]] || continue
  state=ok; detail="Ready, kubelet $kubelet"
  [[ "$ready" == True ]] || { state=NOT-READY; detail="Ready=${ready:-unknown}, kubelet $kubelet"; }
  if [[ "$unschedulable" == true ]]; then detail+=", cordoned"; [[ "$state" != ok ]] || state=CORDONED; fi
  row node "$name" "$state" "$detail"
done < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}|{.status.conditions[?(@.type=="Ready")].status}|{.spec.unschedulable}|{.status.nodeInfo.kubeletVersion}{"\n"}{end}')

# The onprem profile's checks (its seed's list), after the nodes.
onprem_rows() {
  local out rc line name revoked pulled address code dns
  # Cilium's own summary, from an agent.
  rc=0; out=$(kubectl -n kube-system exec ds/cilium -- cilium status --brief 2>&1) || rc=$?
  if (( rc == 0 )) && [[ "$out" == OK* ]]; then row cilium kube-system/ds/cilium ok "cilium status: OK"
  else row cilium kube-system/ds/cilium DEGRADED "${out%%$'\n'*}; look at: kubectl -n kube-system exec ds/cilium -- cilium status"; fi

  # The StorageClass ceph-csi-rbd makes, the cluster's default.
  if ! out=$(kubectl get storageclass "$STORAGE_CLASS" -o jsonpath='{.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}|{.provisioner}' 2>/dev/null); then
    row storage "storageclass/$STORAGE_CLASS" ABSENT "look at: kubectl -n $CEPH_NAMESPACE get pods (ceph-csi-rbd makes it)"
  elif [[ "${out%%|*}" != true ]]; then
    row storage "storageclass/$STORAGE_CLASS" NOT-DEFAULT "${out#*|}; look at: kubectl get storageclass (another is the default?)"
  else row storage "storageclass/$STORAGE_CLASS" ok "default, ${out#*|}"; fi

  # Traefik's Service, at the address the router forwards to.
  if ! address=$(kubectl -n "$TRAEFIK_NAMESPACE" get svc "$TRAEFIK_SERVICE" -o jsonpath='{.status.loadBalancer.ingress[*].ip}' 2>/dev/null); then
    row traefik "$TRAEFIK_NAMESPACE/svc/$TRAEFIK_SERVICE" ABSENT "look at: helm -n $TRAEFIK_NAMESPACE status traefik"
  elif [[ -z "$address" ]]; then
    row traefik "$TRAEFIK_NAMESPACE/svc/$TRAEFIK_SERVICE" PENDING "no external address; look at: kubectl get ciliumloadbalancerippool $LB_POOL -o yaml (is $INGRESS_ADDRESS in it, and free?)"
  elif [[ "$address" != "$INGRESS_ADDRESS" ]]; then
    row traefik "$TRAEFIK_NAMESPACE/svc/$TRAEFIK_SERVICE" WRONG-IP "EXTERNAL-IP $address, the router forwards to $INGRESS_ADDRESS"
  else row traefik "$TRAEFIK_NAMESPACE/svc/$TRAEFIK_SERVICE" ok "EXTERNAL-IP $address"; fi

  # The bouncer, registered by the LAPI and pulling decisions. `cscli bouncers list -o raw` is CSV:
  # name,ip,revoked (validated|pending),last_pull,type,version,auth_type (crowdsec
  # cmd/crowdsec-cli/clibouncer, listCSV).
  if ! out=$(kubectl -n "$CROWDSEC_NAMESPACE" exec "deploy/$LAPI_DEPLOYMENT" -- cscli bouncers list -o raw 2>/dev/null); then
    row crowdsec "bouncer/$BOUNCER_NAME" ABSENT "the LAPI does not answer; look at: kubectl -n $CROWDSEC_NAMESPACE get pods"
  else
    line=$(grep -m1 "^$BOUNCER_NAME," <<<"$out" || true)
    IFS=, read -r name _ revoked pulled _ <<<"$line"
    if [[ -z "$line" ]]; then
      row crowdsec "bouncer/$BOUNCER_NAME" ABSENT "not registered; look at: kubectl -n $CROWDSEC_NAMESPACE logs deploy/$LAPI_DEPLOYMENT (BOUNCER_KEY_$BOUNCER_NAME)"
    elif [[ "$revoked" != validated ]]; then
      row crowdsec "bouncer/$BOUNCER_NAME" REVOKED "$revoked; look at: kubectl -n $CROWDSEC_NAMESPACE exec deploy/$LAPI_DEPLOYMENT -- cscli bouncers list"
    elif [[ -z "$pulled" ]]; then
      row crowdsec "bouncer/$BOUNCER_NAME" NOT-PULLING "registered, never pulled; look at: kubectl -n $TRAEFIK_NAMESPACE logs deploy/traefik | grep -i crowdsec (its key: $TRAEFIK_NAMESPACE/crowdsec-bouncer-key)"
    else row crowdsec "bouncer/$BOUNCER_NAME" ok "registered, last pull $pulled"; fi
    # The bouncers of earlier keys (the name follows the key): the LAPI still accepts them.
    while IFS=, read -r name _; do
      [[ "$name" == "$BOUNCER_PREFIX" || "$name" == "${BOUNCER_PREFIX}_"* ]] || continue
      [[ "$name" != "$BOUNCER_NAME" ]] || continue
      row crowdsec "bouncer/$name" STALE "an earlier key, still accepted; once Traefik uses the new one: kubectl -n $CROWDSEC_NAMESPACE exec deploy/$LAPI_DEPLOYMENT -- cscli bouncers delete $name"
    done <<<"$out"
  fi

  # The public address from inside the cluster, as cert-manager's HTTP-01 self-check fetches a
  # challenge before telling Let's Encrypt (without it, it loops on "failed to perform self check
  # GET request": cert-manager/cert-manager#3238): the router must hairpin (NAT loopback). Asked
  # from a Traefik pod (busybox wget); any HTTP answer means the address was reached.
  rc=0; out=$(kubectl -n "$TRAEFIK_NAMESPACE" exec "deploy/$TRAEFIK_SERVICE" -- wget -q -O /dev/null -T 5 --header "Host: $SMOKE_HOST" "http://$PUBLIC_ADDRESS/" 2>&1) || rc=$?
  if (( rc == 0 )) || [[ "$out" == *"server returned error"* ]]; then row hairpin "$PUBLIC_ADDRESS" ok "reached from inside the cluster"
  else row hairpin "$PUBLIC_ADDRESS" NO-HAIRPIN "${out%%$'\n'*}; the router must loop $PUBLIC_ADDRESS:80 back to $INGRESS_ADDRESS for the cluster's own requests (NAT loopback), or HTTP-01 never validates"; fi

  # The smoke test's name: published at the public address, answering in HTTPS. curl's exit
  # codes are its manual's (EXIT CODES): 6 no such name, 7 refused, 28 timeout, 35 and 60 TLS.
  # The name as the DNS answers it: dig asks the resolver alone, as the seed does (its first
  # address line: +short prints a CNAME chain first); without dig, or when it cannot ask (dig(1):
  # exit 9, no reply), getent, which reads /etc/hosts and local caches too, and the row says so.
  local resolver=dig
  if ! command -v dig >/dev/null || ! dns=$(dig +short +time=3 +tries=2 A "$SMOKE_HOST" 2>/dev/null); then
    resolver="getent: /etc/hosts and local caches count"
    dns=$(getent ahostsv4 "$SMOKE_HOST" 2>/dev/null | awk 'NR == 1 {print $1}' || true)
  fi
  dns=$(grep -m1 -E '^[0-9]+([.][0-9]+){3}$' <<<"$dns" || true)
  local insecure=() note=""
  if [[ "$ACME_SERVER" == staging ]]; then insecure=(--insecure); note=" (staging certificate: acme.server production for a trusted one)"; fi
  rc=0; code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "${insecure[@]}" "https://$SMOKE_HOST/" 2>/dev/null) || rc=$?
  if [[ -z "$dns" ]]; then
    row https "$SMOKE_HOST" NO-DNS "no address ($resolver); external-dns publishes within its interval, a minute, and the name's old absence may be cached as long as the zone's negative TTL: run this again in a minute or two; look at: kubectl -n external-dns logs deploy/external-dns"
  elif [[ "$dns" != "$PUBLIC_ADDRESS" ]]; then
    row https "$SMOKE_HOST" WRONG-DNS "resolves to $dns ($resolver), not $PUBLIC_ADDRESS; look at: kubectl -n $SMOKE_NAMESPACE get ingress whoami (its status shows what external-dns publishes)"
  elif (( rc == 7 || rc == 28 )); then
    row https "$SMOKE_HOST" UNREACHABLE "nothing answers on $PUBLIC_ADDRESS:443; look at: the router's forwarding of 80 and 443 to $INGRESS_ADDRESS"
  elif (( rc == 35 || rc == 60 )); then
    row https "$SMOKE_HOST" NO-CERT "no valid certificate; look at: kubectl -n $SMOKE_NAMESPACE get certificate,challenges"
  elif (( rc != 0 )); then
    row https "$SMOKE_HOST" FAILED "curl exit $rc; look at: curl -v https://$SMOKE_HOST/"
  elif [[ "$code" != 200 ]]; then
    row https "$SMOKE_HOST" "HTTP-$code" "Traefik answers $code (403: the bouncer); look at: kubectl -n $SMOKE_NAMESPACE describe ingress whoami"
  else row https "$SMOKE_HOST" ok "HTTP 200 at $dns ($resolver)$note"; fi
}

if [[ "$profile" == onprem ]]; then
  onprem_rows
  if (( not_ok )); then echo "cluster-status: $not_ok row(s) not ok" >&2; exit 1; fi
  exit 0
fi

# Workloads: ready / wanted. ds = DaemonSet, deploy = Deployment.
workload() {
  local component=$1 ns=$2 kind=$3 name=$4 counts ready want
  local path='{.status.readyReplicas}/{.spec.replicas}'
  [[ "$kind" == ds ]] && path='{.status.numberReady}/{.status.desiredNumberScheduled}'
  if ! counts=$(kubectl -n "$ns" get "$kind" "$name" -o jsonpath="$path" 2>/dev/null); then
    row "$component" "$ns/$kind/$name" ABSENT "not installed"; return
  fi
  ready=${counts%/*}; want=${counts#*/}
  if [[ -n "$want" && "$want" != 0 && "${ready:-0}" == "$want" ]]; then row "$component" "$ns/$kind/$name" ok "$counts ready"
  else row "$component" "$ns/$kind/$name" DEGRADED "${ready:-0}/${want:-?} ready"; fi
}
workload cilium kube-system ds cilium
workload cilium kube-system deploy cilium-operator
workload cilium kube-system deploy hubble-relay
workload cert-manager cert-manager deploy cert-manager
workload cert-manager cert-manager deploy cert-manager-webhook
workload cert-manager cert-manager deploy cert-manager-cainjector
workload istio istio-system deploy istiod

# The Gateway API CRDs of the pins: Established, and the bundle version they carry.
while IFS= read -r line; do
  file=${line#*=}; file=${file%%:*}                      # gateway.networking.k8s.io_gateways.yaml
  crd=${file%.yaml}; crd="${crd#*_}.${crd%%_*}"          # gateways.gateway.networking.k8s.io
  if ! got=$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}|{.metadata.annotations.gateway\.networking\.k8s\.io/bundle-version}' 2>/dev/null); then
    row gateway-api "$crd" ABSENT "make apply-platform installs $GATEWAY_API_VERSION"; continue
  fi
  established=${got%%"$sep"*}; bundle=${got#*"$sep"}
  if [[ "$established" != True ]]; then row gateway-api "$crd" PENDING "not Established"
  elif [[ "$bundle" != "$GATEWAY_API_VERSION" ]]; then row gateway-api "$crd" DRIFT "bundle ${bundle:-?}, pinned $GATEWAY_API_VERSION"
  else row gateway-api "$crd" ok "$bundle"; fi
done < <(grep -E '^VENDOR_GATEWAY_API_[A-Z0-9_]+=' "${VERSIONS_FILE:-$here/../k8s/versions.env}")

# Objects of the edge layer, by their status conditions. `kind` absent: its CRD is not there.
objects() {
  local component=$1 kind=$2 condition=$3 extra=$4 out name status detail found=0
  if ! out=$(kubectl get "$kind" -A -o jsonpath="{range .items[*]}{.metadata.namespace}/{.metadata.name}|{.status.conditions[?(@.type==\"$condition\")].status}|$extra{\"\n\"}{end}" 2>/dev/null); then
    row "$component" "$kind" ABSENT "its CRD is not installed"; return
  fi
  while IFS="$sep" read -r name status detail; do
    [[ -n "$name" ]] || continue
    found=1
    if [[ "$condition" == - || "$status" == True ]]; then row "$component" "$name" ok "$detail"
    else row "$component" "$name" NOT-"${condition^^}" "$condition=${status:-unknown} $detail"; fi
  done <<<"$out"
  (( found )) || row "$component" "$kind" NONE "no object yet (make apply-edge)"
}
objects gateway gateways.gateway.networking.k8s.io Programmed '{.status.addresses[*].value}'

# Each edge node, by the gateway pods on it. DNS sends every edge node its share of the visitors
# and the gateway's Service keeps the client's address (externalTrafficPolicy Local), so a node
# without a Ready gateway pod drops its share while the Gateway itself says Programmed.
edge_node_rows() {
  local nodes pods node on name phase ready served unplaced=0 seen
  local look="look at: kubectl -n $EDGE_NAMESPACE get pods -o wide -l $EDGE_GATEWAY_PODS"
  if ! nodes=$(kubectl get nodes -l "$EDGE_NODE_LABEL" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}') ||
     ! pods=$(kubectl -n "$EDGE_NAMESPACE" get pods -l "$EDGE_GATEWAY_PODS" -o jsonpath='{range .items[*]}{.spec.nodeName}|{.metadata.name}|{.status.phase}|{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'); then
    row edge-node "$EDGE_NODE_LABEL" UNKNOWN "kubectl cannot list the edge nodes or the gateway pods (its error on stderr); $look"
    return
  fi
  if [[ -z "$nodes" ]]; then
    row edge-node "$EDGE_NODE_LABEL" NONE "no node carries this label: the edge has no node to serve from; look at: kubectl get nodes -L ${EDGE_NODE_LABEL%%=*} (the workers' Talos patch sets it)"
    return
  fi
  while IFS="$sep" read -r on name _; do
    if [[ -n "$name" && -z "$on" ]]; then unplaced=$((unplaced + 1)); fi
  done <<<"$pods"
  while IFS= read -r node; do
    [[ -n "$node" ]] || continue
    served="" seen=""
    while IFS="$sep" read -r on name phase ready; do
      [[ -n "$name" && "$on" == "$node" ]] || continue
      if [[ "$ready" == True ]]; then served=$name; break; fi
      seen+="${seen:+, }$name $phase, Ready=${ready:-unknown}"
    done <<<"$pods"
    if [[ -n "$served" ]]; then row edge-node "$node" ok "gateway pod $served Ready"; continue; fi
    [[ -n "$seen" ]] || seen="no gateway pod on it"
    (( unplaced == 0 )) || seen+="; $unplaced gateway pod(s) wait for a node"
    row edge-node "$node" NO-GATEWAY "$seen: visitors DNS sends here go unanswered; $look"
  done <<<"$nodes"
}
edge_node_rows
objects certificate certificates.cert-manager.io Ready 'expires {.status.notAfter}'
objects filter wasmplugins.extensions.istio.io - '{.spec.url}'

# The scheduled etcd backup, when the platform config sets one (no row otherwise). The CronJob
# controller records when it last started a run and when one last succeeded, and lists the runs
# still going (batch/v1 CronJobStatus: lastScheduleTime, lastSuccessfulTime, active): a start
# after the last success, with nothing running, is a run that failed. The times are RFC 3339 UTC,
# so they compare as text.
backup_name=etcd-backup/cronjob/etcd-backup
if backup=$(kubectl -n etcd-backup get cronjob etcd-backup -o jsonpath='{.spec.schedule}|{.status.lastScheduleTime}|{.status.lastSuccessfulTime}|{.status.active[*].name}' 2>/dev/null); then
  IFS="$sep" read -r schedule started succeeded running <<<"$backup"
  look="look at: kubectl -n etcd-backup get jobs, then kubectl -n etcd-backup logs job/NAME"
  if [[ -n "$running" ]]; then
    row etcd-backup "$backup_name" ok "running ($running); last success ${succeeded:-never}"
  elif [[ -z "$started" ]]; then
    row etcd-backup "$backup_name" PENDING "no run yet (schedule $schedule, UTC)"
  elif [[ -z "$succeeded" || "$succeeded" < "$started" ]]; then
    row etcd-backup "$backup_name" FAILING "the run started $started did not succeed (last success ${succeeded:-never}); $look"
  else
    row etcd-backup "$backup_name" ok "last success $succeeded (schedule $schedule, UTC)"
  fi
fi

if (( not_ok )); then echo "cluster-status: $not_ok row(s) not ok" >&2; exit 1; fi
