"""What talosctl's drain asks of a configured Talos node, for talos_maintenance.py: the admin
kubeconfig (`MachineService.Kubeconfig`) and the node's Kubernetes name, read through COSI's
`State` service, answered as Talos v1.13.9 answers them.

Sources: siderolabs/talos at v1.13.9 (S = internal/app/machined/internal/server/v1alpha1/
v1alpha1_server.go), cosi-project/runtime at v1.14.1 (the version Talos v1.13.9's go.mod pins).

The client, cmd/talosctl/cmd/talos/drain.go:34-103 (`upgrade --drain`, on by default, and again
for the uncordon, :110-161): `kubeclient.FromTalosClient` (cmd/talosctl/pkg/talos/kubeclient/
kubeclient.go:21-43) fetches the admin kubeconfig through the Talos API, then, one node at a time
(`client.WithNode`), `nodedrain.GetKubernetesNodeName` (cmd/talosctl/pkg/talos/nodedrain/
nodedrain.go:52-63) reads the `Nodename` resource: `safe.StateGet` of namespace `k8s`, type
`Nodenames.kubernetes.talos.dev`, id `nodename` (pkg/machinery/resources/k8s/nodename.go:17-20,
k8s.go:13). The cordon, the drain and the uncordon go through the Kubernetes API with that
kubeconfig, never through the node.

- `MachineService.Kubeconfig` (machine.proto, ../shared): S:1260-1301. The machine type is
  checked first (internal/app/internal/machinehelper/machinehelper.go:23-38, api name
  "kubeconfig": talos_etcd.py's check); then the admin kubeconfig Talos generates from the
  cluster's config, wrapped in a .tar.gz holding one file `kubeconfig` (mode 0600), sent as one
  `common.Data`; talosctl unpacks it (pkg/machinery/client/client.go:194-247). Here the
  kubeconfig is --admin-kubeconfig (the test's API server; its server is the API server's
  loopback address instead of the cluster's endpoint); without it, Unimplemented, saying so.
- COSI's `State.Get` of the `Nodename`: talos_cosi.py, which serves it.
- The `Nodename` itself: written by Talos's `k8s.NodenameController` (internal/app/machined/pkg/
  controllers/k8s/nodename.go:27-29, 95-119) from the node's hostname, made a Kubernetes name by
  nodename.FromHostname (internal/app/machined/pkg/controllers/k8s/internal/nodename/
  nodename.go:24-56: lowercased, `_` made `-`, other characters than [a-z0-9.-] dropped, dashes
  and dots trimmed at both ends). talosctl reads it back through
  protobuf.Unmarshal (cosi pkg/resource/protobuf/resource.go:199-219: metadata and spec must be
  there; the version must parse as an integer, pkg/resource/version.go:59-72; the phase must be
  `running` or `tearingDown`, pkg/resource/phase.go:30-39), then the registered type's
  UnmarshalProto (pkg/resource/protobuf/registry.go:90-111) of `proto_spec`, Talos's
  `NodenameSpec` (nodename.go:28-32).
"""
import io
import re
import tarfile
import time

import grpc


def nodename_from_hostname(hostname):
    """nodename.FromHostname (nodename.go:24-56): lowercase, `_` to `-`, others dropped, then
    dashes and dots trimmed at both ends (a name left empty is Talos's error, not modelled)."""
    return re.sub(r"[^a-z0-9.-]", "", hostname.lower().replace("_", "-")).strip("-.")


def kubeconfig_archive(data):
    """The .tar.gz Talos wraps the kubeconfig in (S:1271-1296): one regular file, 0600."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        entry = tarfile.TarInfo("kubeconfig")
        entry.size, entry.mode, entry.mtime = len(data), 0o600, int(time.time())
        archive.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()


class NodeDrain:
    """The node's side of a drain: its kubeconfig (its `Nodename` is talos_cosi.py's)."""

    def __init__(self, args, common_pb, record, check_controlplane):
        self.args = args
        self.common = common_pb
        self.record = record
        self.check_controlplane = check_controlplane

    def kubeconfig(self, request, context):
        self.record({"rpc": "Kubeconfig"})
        self.check_controlplane(context, "kubeconfig")
        if not self.args.admin_kubeconfig:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "the stand-in serves a kubeconfig only with --admin-kubeconfig")
        with open(self.args.admin_kubeconfig, "rb") as f:
            data = f.read()
        yield self.common.Data(bytes=kubeconfig_archive(data))


def add_arguments(parser):
    parser.add_argument("--admin-kubeconfig",
                        help="the admin kubeconfig a control plane serves through Kubeconfig")
