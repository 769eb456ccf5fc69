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
- `cosi.resource.State/Get` (cosi api/v1alpha1/state_grpc.pb.go:23): Talos registers COSI's own
  server over its resources behind an access filter (S:146-159). The server (pkg/state/protobuf/
  server/server.go:38-61) answers a resource as `GetResponse{resource}` or a not-found error as
  NotFound with its text; the filter (Talos internal/app/resources/access.go:25-64) first
  refuses a type with no resource definition, PermissionDenied `resource type "<type>" is not
  supported`, then a namespace not registered, PermissionDenied `namespace "<ns>" is not
  supported`. The one definition and namespace modelled here are Nodename's and `k8s`: any other
  type or namespace is refused so (a real node knows many more; talosctl's drain reads no
  other). The definition is looked up by the lowercased type (access.go:31), the resource by the
  type as asked. The `k8s` namespace is an in-memory state, whose not-found error is `resource
  <type>(<ns>/<id>@undefined) doesn't exist` (pkg/state/impl/inmem/errors.go:22-26 with
  pkg/resource/metadata.go:145-147).
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

Not modelled: COSI's other calls (List, Watch, ...: Unimplemented, gRPC's answer to a method not
served) and COSI in maintenance mode (the resource is a configured node's).

The COSI messages are not among the protos ../shared holds: they are described here field by
field as cosi-project/runtime v1.14.1 declares them (api/v1alpha1/state.pb.go, resource.pb.go;
package `cosi.resource`), limited to what talosctl sends and reads:
`GetRequest` namespace = 1, type = 2, id = 3, options = 4 (state.pb.go:160-166; `GetOptions` has
no field, :228-232), `GetResponse` resource = 1 (:264-266); `Resource` metadata = 1, spec = 2
(resource.pb.go:290-293); `Metadata` namespace = 1, type = 2, id = 3, version = 4, owner = 5,
phase = 6, created = 7, updated = 8 (google.protobuf.Timestamp) (:110-119; finalizers, labels
and annotations, :120-122, are never set here); `Spec` proto_spec = 1 (bytes), yaml_spec = 2
(:235-240). `NodenameSpec`: nodename = 1, hostname_version = 2, skip_node_registration = 3
(Talos api/resource/definitions/k8s/k8s.proto:240-244).
"""
import io
import re
import tarfile
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from talos_upgrade import F, field, message

NAMESPACE = "k8s"
NODENAME_TYPE = "Nodenames.kubernetes.talos.dev"
NODENAME_ID = "nodename"
# The controller that owns the resource (its Name(), nodename.go:27-29).
OWNER = "k8s.NodenameController"


def cosi_messages():
    """COSI's Get messages and Talos's NodenameSpec, in the default pool."""
    pool = descriptor_pool.Default()
    # timestamp.proto must be in the default pool before a file that depends on it.
    assert timestamp_pb2.Timestamp.DESCRIPTOR.file.name == "google/protobuf/timestamp.proto"
    cosi = descriptor_pb2.FileDescriptorProto(
        name="edgepop/cosi_state_model.proto", package="cosi.resource", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    stamp = ".google.protobuf.Timestamp"
    cosi.message_type.extend([
        message("Metadata", [
            field("namespace", 1, F.TYPE_STRING), field("type", 2, F.TYPE_STRING),
            field("id", 3, F.TYPE_STRING), field("version", 4, F.TYPE_STRING),
            field("owner", 5, F.TYPE_STRING), field("phase", 6, F.TYPE_STRING),
            field("created", 7, F.TYPE_MESSAGE, stamp),
            field("updated", 8, F.TYPE_MESSAGE, stamp)]),
        message("Spec", [field("proto_spec", 1, F.TYPE_BYTES),
                         field("yaml_spec", 2, F.TYPE_STRING)]),
        message("Resource", [field("metadata", 1, F.TYPE_MESSAGE, ".cosi.resource.Metadata"),
                             field("spec", 2, F.TYPE_MESSAGE, ".cosi.resource.Spec")]),
        message("GetOptions", []),
        message("GetRequest", [
            field("namespace", 1, F.TYPE_STRING), field("type", 2, F.TYPE_STRING),
            field("id", 3, F.TYPE_STRING),
            field("options", 4, F.TYPE_MESSAGE, ".cosi.resource.GetOptions")]),
        message("GetResponse", [field("resource", 1, F.TYPE_MESSAGE, ".cosi.resource.Resource")]),
    ])
    pool.Add(cosi)
    k8s = descriptor_pb2.FileDescriptorProto(
        name="edgepop/talos_k8s_nodename_model.proto",
        package="talos.resource.definitions.k8s", syntax="proto3")
    k8s.message_type.extend([message("NodenameSpec", [
        field("nodename", 1, F.TYPE_STRING), field("hostname_version", 2, F.TYPE_STRING),
        field("skip_node_registration", 3, F.TYPE_BOOL)])])
    pool.Add(k8s)
    found = {name: f"cosi.resource.{name}" for name in
             ["Metadata", "Spec", "Resource", "GetRequest", "GetResponse"]}
    found["NodenameSpec"] = "talos.resource.definitions.k8s.NodenameSpec"
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            for name, full in found.items()}


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
    """The node's side of a drain: its kubeconfig and its `Nodename`."""

    def __init__(self, args, common_pb, record, check_controlplane):
        self.args = args
        self.common = common_pb
        self.record = record
        self.check_controlplane = check_controlplane
        self.m = cosi_messages()
        self.created = timestamp_pb2.Timestamp()
        self.created.GetCurrentTime()

    def kubeconfig(self, request, context):
        self.record({"rpc": "Kubeconfig"})
        self.check_controlplane(context, "kubeconfig")
        if not self.args.admin_kubeconfig:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "the stand-in serves a kubeconfig only with --admin-kubeconfig")
        with open(self.args.admin_kubeconfig, "rb") as f:
            data = f.read()
        yield self.common.Data(bytes=kubeconfig_archive(data))

    def get(self, request, context):
        self.record({"rpc": "COSI.Get", "namespace": request.namespace, "type": request.type,
                     "id": request.id})
        if request.type.lower() != NODENAME_TYPE.lower():
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f'resource type "{request.type}" is not supported')
        if request.namespace != NAMESPACE:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f'namespace "{request.namespace}" is not supported')
        if request.id != NODENAME_ID or request.type != NODENAME_TYPE:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"resource {request.type}({request.namespace}/{request.id}@undefined) "
                          "doesn't exist")
        spec = self.m["NodenameSpec"](nodename=nodename_from_hostname(self.args.hostname),
                                      hostname_version="1")
        metadata = self.m["Metadata"](
            namespace=NAMESPACE, type=NODENAME_TYPE, id=NODENAME_ID, version="1", owner=OWNER,
            phase="running", created=self.created, updated=self.created)
        resource = self.m["Resource"](metadata=metadata, spec=self.m["Spec"](
            proto_spec=spec.SerializeToString(),
            yaml_spec=f"nodename: {spec.nodename}\nhostnameVersion: \"1\"\n"
                      "skipNodeRegistration: false\n"))
        return self.m["GetResponse"](resource=resource)

    def handlers(self):
        """COSI's State service (Get only), for `server.add_generic_rpc_handlers`."""
        m = self.m
        return [grpc.method_handlers_generic_handler("cosi.resource.State", {
            "Get": grpc.unary_unary_rpc_method_handler(
                self.get, request_deserializer=m["GetRequest"].FromString,
                response_serializer=m["GetResponse"].SerializeToString)})]


def add_arguments(parser):
    parser.add_argument("--admin-kubeconfig",
                        help="the admin kubeconfig a control plane serves through Kubeconfig")
