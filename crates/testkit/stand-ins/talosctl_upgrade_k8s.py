#!/usr/bin/env python3
"""talosctl for the day-2 tests: the real talosctl ($TALOSCTL_REAL) for every call but
`upgrade-k8s`, which a stand-in plays, since talosctl's upgrade reads and patches the nodes'
COSI resources and machine configs (watches, ApplyConfiguration), which no node stand-in here
serves. What it does is what the upgrade leaves in the Kubernetes API, in talosctl's order, with
its checks and messages (siderolabs/talos v1.13.9: T = pkg/cluster/kubernetes/talos_managed.go,
K = pkg/cluster/kubernetes/kubelet.go, D = pkg/cluster/kubernetes/detect.go,
C = cmd/talosctl/cmd/talos/upgrade-k8s.go; go-kubernetes v0.2.38 kubernetes/upgrade/path.go):

- more than one node in --nodes: refused (C:117, helpers/checks.go FailIfMultiNodes);
- the Kubernetes client is built from the admin kubeconfig the node hands out through its Talos
  API (cluster.KubernetesClient): here the real `talosctl kubeconfig` against that node, which a
  worker refuses;
- without --from, the version it upgrades from is the lowest tag of the containers named as
  their `k8s-app` label in kube-system (kube-apiserver, kube-controller-manager, kube-proxy,
  kube-scheduler), the digest cut off, the tag after the first `:` (D:17-72); none: refused;
- the path must be the same minor or the next, up to 1.36 (path.go IsSupported); otherwise
  `unsupported upgrade path`;
- the control planes are the nodes labelled node-role.kubernetes.io/control-plane, each by its
  first InternalIP (ExternalIP when it has none), the workers every other node (T:96-115,
  pkg/kubernetes/kubernetes.go NodeIPs); no control plane: refused;
- kube-apiserver, kube-controller-manager then kube-scheduler, each on every control plane in
  turn (T:149-153): a pod already at the target is skipped (T:372-376); otherwise Talos rewrites
  the static pod and its kubelet makes the mirror pod again with the new image;
- kube-proxy: the configs are patched (T:229-241); the clusters here disable it, nothing runs;
- every kubelet, control planes first (K:32-48): one at the target is skipped; otherwise it
  restarts at the target and reports it, and talosctl waits until the node with that address
  reports `v<to>` and is Ready (K:155-163, 233-300).

Not modelled, and why: the upgrade checks and the Talos compatibility check (COSI reads; the
tool under test checks the same support table), the image pre-pull (ImagePull; talosctl skips a
node that answers Unimplemented), the config patches themselves, and the bootstrap manifests'
sync (Talos's manifests resources). kubectl from PATH reads and writes the API.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

COMPONENTS = ["kube-apiserver", "kube-controller-manager", "kube-proxy", "kube-scheduler"]
STATIC_PODS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# How long a kubelet may take to report its new version (talosctl retries for minutes).
KUBELET_WAIT_SECONDS = 60


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def log(message):
    # talosctl's upgrade progress (options.Log) goes to stdout.
    print(message, flush=True)


def split_args(argv):
    """Global flags (talosconfig, endpoints, nodes) and the upgrade-k8s flags."""
    values, flags = {"nodes": [], "endpoints": [], "talosconfig": None}, {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, _, inline = arg.partition("=")
        takes = name in ("--talosconfig", "--endpoints", "-e", "--nodes", "-n", "--to", "--from")
        value = inline if inline else (argv[i + 1] if takes and i + 1 < len(argv) else None)
        if takes and not inline:
            i += 1
        if name == "--talosconfig":
            values["talosconfig"] = value
        elif name in ("--endpoints", "-e"):
            values["endpoints"] += value.split(",")
        elif name in ("--nodes", "-n"):
            values["nodes"] += value.split(",")
        elif name in ("--to", "--from"):
            flags[name[2:]] = value
        elif name.startswith("--"):
            flags[name[2:]] = inline or "true"
        i += 1
    return values, flags


def kubectl(kubeconfig, *args, stdin=None):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin,
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def admin_kubeconfig(real, values, folder):
    path = os.path.join(folder, "kubeconfig")
    args = [real, "--talosconfig", values["talosconfig"], "--endpoints", ",".join(values["endpoints"]),
            "--nodes", values["nodes"][0], "kubeconfig", path, "--force", "--merge=false"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"error building kubernetes client: {out.stderr.strip()}")
    return path


def version_of(tag):
    """semver.ParseTolerant of the tag without its `v`: (major, minor, patch), or None."""
    parts = tag.lstrip("v").split("-")[0].split(".")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return None
    return tuple((numbers + [0, 0])[:3]) if 1 <= len(numbers) <= 3 else None


def lowest_version(kubeconfig):
    pods = json.loads(kubectl(kubeconfig, "get", "pods", "--namespace", "kube-system", "-o", "json"))
    lowest = None
    for pod in pods["items"]:
        app = pod["metadata"].get("labels", {}).get("k8s-app")
        if app not in COMPONENTS:
            continue
        for container in pod["spec"]["containers"]:
            if container["name"] != app:
                continue
            image = container["image"].split("@")[0]
            if ":" not in image:
                continue
            version = version_of(image.split(":", 1)[1])
            if version is None:
                log(f"failed to parse {app} container version")
                continue
            lowest = version if lowest is None or version < lowest else lowest
    if lowest is None:
        fail("error detecting the lowest Kubernetes version failed to detect lowest Kubernetes version")
    return ".".join(map(str, lowest))


def supported(origin, target):
    """path.go IsSupported: 1.19 to 1.36, the same minor or the next."""
    (fmaj, fmin), (tmaj, tmin) = origin[:2], target[:2]
    return fmaj == tmaj == 1 and 19 <= fmin <= 36 and tmin in (fmin, fmin + 1) and tmin <= 36


def go_quoted(strings):
    """Go's %q of a []string: each quoted, space-separated, in brackets."""
    return "[" + " ".join(json.dumps(s) for s in strings) + "]"


def node_ips(nodes, control_plane):
    ips = []
    for node in nodes:
        if (CONTROL_PLANE_LABEL in node["metadata"].get("labels", {})) != control_plane:
            continue
        addresses = node.get("status", {}).get("addresses", [])
        for kind in ("InternalIP", "ExternalIP"):
            found = [a["address"] for a in addresses if a["type"] == kind]
            if found:
                ips.append(found[0])
                break
    return ips


def node_at(nodes, address):
    for node in nodes:
        if any(a["address"] == address for a in node.get("status", {}).get("addresses", [])):
            return node
    return None


def upgrade_static_pod(kubeconfig, service, nodes, address, to):
    """The mirror pod of `service` on the node at `address` made again at the target, as its
    kubelet does once Talos rewrote the static pod; skipped when it runs the target already."""
    node = node_at(nodes, address)
    if node is None:
        fail(f"failed updating service \"{service}\": node {json.dumps(address)} not found")
    name = f"{service}-{node['metadata']['name']}"
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "pod", "--namespace",
                          "kube-system", name, "-o", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"failed updating service \"{service}\": pod {name} not found")
    pod = json.loads(out.stdout)
    image = f"registry.k8s.io/{service}:v{to}"
    container = next(c for c in pod["spec"]["containers"] if c["name"] == service)
    if container["image"] == image:
        return
    log(f" > update {service}: {container['image'].split(':', 1)[-1]} -> {to}")
    container["image"] = image
    metadata = pod["metadata"]
    pod["metadata"] = {k: metadata[k] for k in ("name", "namespace", "labels", "annotations",
                                                "ownerReferences") if k in metadata}
    pod.pop("status", None)
    kubectl(kubeconfig, "delete", "pod", "--namespace", "kube-system", name, "--force",
            "--grace-period=0")
    kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(pod))
    log(f" > {json.dumps(address)}: machine configuration patched")
    log(f" < {json.dumps(address)}: successfully updated")


def upgrade_kubelet(kubeconfig, address, to):
    nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json"))["items"]
    node = node_at(nodes, address)
    if node is None:
        fail(f"failed upgrading kubelet: node {json.dumps(address)} not found")
    log(f" > {json.dumps(address)}: starting update")
    if node["status"]["nodeInfo"]["kubeletVersion"] == f"v{to}":
        return
    status = json.dumps({"status": {"nodeInfo": {"kubeletVersion": f"v{to}"}}})
    kubectl(kubeconfig, "patch", "node", node["metadata"]["name"], "--subresource=status",
            "--type=merge", "-p", status)
    log(f" > {json.dumps(address)}: waiting for node update")
    deadline = time.monotonic() + KUBELET_WAIT_SECONDS
    while True:
        nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json"))["items"]
        node = node_at(nodes, address)
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in node.get("status", {}).get("conditions", []))
        if node["status"]["nodeInfo"]["kubeletVersion"] == f"v{to}" and ready:
            break
        if time.monotonic() > deadline:
            fail(f"failed upgrading kubelet: node {address} is not ready at v{to}")
        time.sleep(1)
    log(f" < {json.dumps(address)}: successfully updated")


def upgrade_k8s(real, values, flags):
    if len(values["nodes"]) > 1:
        fail('command "upgrade-k8s" is not supported with multiple nodes')
    if not values["nodes"]:
        fail("nodes are not set for the command: please use `--nodes` flag or configuration file")
    to = flags.get("to", "").lstrip("v")
    with tempfile.TemporaryDirectory() as folder:
        kubeconfig = admin_kubeconfig(real, values, folder)
        origin = flags.get("from")
        if not origin:
            origin = lowest_version(kubeconfig)
            log(f"automatically detected the lowest Kubernetes version {origin}")
        origin = origin.lstrip("v")
        if not supported(version_of(origin), version_of(to)):
            (fmaj, fmin, _), (tmaj, tmin, _) = version_of(origin), version_of(to)
            fail(f'unsupported upgrade path {fmaj}.{fmin}->{tmaj}.{tmin} (from "{origin}" to "{to}")')
        nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json"))["items"]
        control_planes, workers = node_ips(nodes, True), node_ips(nodes, False)
        if not control_planes:
            fail("no controlplane nodes discovered")
        log(f"discovered controlplane nodes {go_quoted(control_planes)}")
        log(f"discovered worker nodes {go_quoted(workers)}")
        for service in STATIC_PODS:
            log(f'updating "{service}" to version "{to}"')
            for address in control_planes:
                log(f" > {json.dumps(address)}: starting update")
                upgrade_static_pod(kubeconfig, service, nodes, address, to)
        log(f'updating kube-proxy to version "{to}"')
        log(f'updating kubelet to version "{to}"')
        for address in control_planes + workers:
            upgrade_kubelet(kubeconfig, address, to)
        log("updating manifests")


def main():
    real = os.environ["TALOSCTL_REAL"]
    argv = sys.argv[1:]
    if "upgrade-k8s" not in argv:
        os.execv(real, [real, *argv])
    values, flags = split_args([a for a in argv if a != "upgrade-k8s"])
    upgrade_k8s(real, values, flags)


if __name__ == "__main__":
    main()
