"""A configured Talos node's COSI `State` service, for talos_maintenance.py: the resources
talosctl reads of it (`Get`, `List`), answered as Talos v1.13.9 answers them.

Sources: siderolabs/talos at v1.13.9, cosi-project/runtime at v1.14.1 (the version Talos
v1.13.9's go.mod pins).

- The server: COSI's own (pkg/state/protobuf/server/server.go:38-61 Get, :64-116 List),
  registered by Talos over its resources behind an access filter (internal/app/machined/
  internal/server/v1alpha1/v1alpha1_server.go:146-159). `Get` answers `GetResponse{resource}`,
  a missing one NotFound with its text; `List` streams one `ListResponse{resource}` each. The
  filter (internal/app/resources/access.go:25-64) first refuses a type with no resource
  definition, PermissionDenied `resource type "<type>" is not supported` (the definition looked
  up by the lowercased type, :31), then a namespace not registered, PermissionDenied `namespace
  "<ns>" is not supported`. The namespaces here are in-memory states, whose not-found error is
  `resource <type>(<ns>/<id>@undefined) doesn't exist` (cosi pkg/state/impl/inmem/errors.go:22-26
  with pkg/resource/metadata.go:145-147).
- The resources served, each with its definition (a `ResourceDefinition` in namespace `meta`,
  its id the lowercased type; its aliases as cosi's ResourceDefinitionSpec.Fill makes them,
  pkg/resource/meta/spec/resource_definition.go:55-123: the plural lowercased name, the name
  with each prefix of the suffix, the declared aliases, the singular, the capitals when more than
  one):
  - `ResourceDefinitions.meta.cosi.dev` (meta): the definitions themselves (pkg/resource/meta/
    resource_definition.go:48-54, alias `api-resources`). talosctl's `get <kind>` lists them
    first and picks the one whose id or alias is the kind asked (pkg/machinery/client/
    resources.go:20-60), its default namespace when none is given;
  - `Nodenames.kubernetes.talos.dev` (k8s, id `nodename`): the node's Kubernetes name, which
    talosctl's drain reads (talos_drain.py says how it is made);
  - `Services.v1alpha1.talos.dev` (runtime; pkg/machinery/resources/v1alpha1/service.go:16-62,
    alias `svc`): Talos's ServiceController (internal/app/machined/pkg/controllers/v1alpha1/
    service.go:72-93) writes a service's resource when the service runs (running, and its
    health) and destroys it on any other state: a control plane's `etcd` exists only while its
    etcd runs (talos_etcd.py's state), healthy; a worker runs no etcd. Other services are not
    modelled.
  Only these: a real node knows many more types, refused here as an unknown type is.

Not modelled: Watch and the other COSI calls (Unimplemented, gRPC's answer to a method not
served), list options (labels, ids), and COSI in maintenance mode.

The messages are not among the protos ../shared holds: they are described here field by field as
cosi-project/runtime v1.14.1 declares them (package `cosi.resource`, api/v1alpha1/state.pb.go,
resource.pb.go), limited to what talosctl sends and reads: `GetRequest` namespace = 1, type = 2,
id = 3, options = 4 (state.pb.go:160-166; `GetOptions` has no field, :228-232), `GetResponse`
resource = 1 (:264-266); `ListRequest` namespace = 1, type = 2, options = 3 (:308-313; the
options' fields, label_query = 1 and id_query = 2, :368-372, are not read here), `ListResponse`
resource = 1 (:420-423); `Resource` metadata = 1, spec = 2 (resource.pb.go:290-293); `Metadata`
namespace = 1, type = 2, id = 3, version = 4, owner = 5, phase = 6, created = 7, updated = 8
(google.protobuf.Timestamp) (:110-119; finalizers, labels and annotations, :120-122, are never
set here); `Spec` proto_spec = 1 (bytes), yaml_spec = 2 (:235-240). In package
`cosi.resource.meta` (meta.pb.go:120-137, 220-224): `ResourceDefinitionSpec` resource_type = 1,
display_type = 2, default_namespace = 3, aliases = 4, all_aliases = 5, print_columns = 6,
sensitivity = 7 (NON_SENSITIVE = 0), its `PrintColumn` name = 1, json_path = 2. Talos's specs
are encoded by protoenc from their struct tags: `NodenameSpec` nodename = 1, hostname_version = 2,
skip_node_registration = 3 (api/resource/definitions/k8s/k8s.proto:240-244), `ServiceSpec`
running = 1, healthy = 2, unknown = 3 (service.go:25-29).
"""
import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from talos_upgrade import F, field, message

RD_TYPE = "ResourceDefinitions.meta.cosi.dev"
NODENAME_TYPE = "Nodenames.kubernetes.talos.dev"
SERVICE_TYPE = "Services.v1alpha1.talos.dev"
# Type, default namespace, declared aliases, print columns (name, JSONPath).
DEFINITIONS = [
    (RD_TYPE, "meta", ["api-resources"], []),
    (NODENAME_TYPE, "k8s", [], [("Nodename", "{.nodename}")]),
    (SERVICE_TYPE, "runtime", ["svc"], [("Running", "{.running}"), ("Healthy", "{.healthy}"),
                                        ("Health Unknown", "{.unknown}")]),
]


def cosi_messages():
    """COSI's Get and List messages, its ResourceDefinitionSpec and Talos's specs, in the
    default pool."""
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
        message("ListOptions", []),
        message("ListRequest", [
            field("namespace", 1, F.TYPE_STRING), field("type", 2, F.TYPE_STRING),
            field("options", 3, F.TYPE_MESSAGE, ".cosi.resource.ListOptions")]),
        message("ListResponse", [field("resource", 1, F.TYPE_MESSAGE,
                                       ".cosi.resource.Resource")]),
    ])
    pool.Add(cosi)
    meta = descriptor_pb2.FileDescriptorProto(
        name="edgepop/cosi_meta_model.proto", package="cosi.resource.meta", syntax="proto3")
    meta.message_type.extend([
        message("PrintColumn", [field("name", 1, F.TYPE_STRING),
                                field("json_path", 2, F.TYPE_STRING)]),
        message("ResourceDefinitionSpec", [
            field("resource_type", 1, F.TYPE_STRING), field("display_type", 2, F.TYPE_STRING),
            field("default_namespace", 3, F.TYPE_STRING),
            field("aliases", 4, F.TYPE_STRING, repeated=True),
            field("all_aliases", 5, F.TYPE_STRING, repeated=True),
            field("print_columns", 6, F.TYPE_MESSAGE, ".cosi.resource.meta.PrintColumn",
                  repeated=True),
            field("sensitivity", 7, F.TYPE_INT32)]),
    ])
    pool.Add(meta)
    talos = descriptor_pb2.FileDescriptorProto(
        name="edgepop/talos_specs_model.proto", package="edgepop.talos.specs", syntax="proto3")
    talos.message_type.extend([
        message("NodenameSpec", [
            field("nodename", 1, F.TYPE_STRING), field("hostname_version", 2, F.TYPE_STRING),
            field("skip_node_registration", 3, F.TYPE_BOOL)]),
        message("ServiceSpec", [field("running", 1, F.TYPE_BOOL),
                                field("healthy", 2, F.TYPE_BOOL),
                                field("unknown", 3, F.TYPE_BOOL)]),
    ])
    pool.Add(talos)
    found = {name: f"cosi.resource.{name}" for name in
             ["Metadata", "Spec", "Resource", "GetRequest", "GetResponse", "ListRequest",
              "ListResponse"]}
    found["ResourceDefinitionSpec"] = "cosi.resource.meta.ResourceDefinitionSpec"
    found["PrintColumn"] = "cosi.resource.meta.PrintColumn"
    found["NodenameSpec"] = "edgepop.talos.specs.NodenameSpec"
    found["ServiceSpec"] = "edgepop.talos.specs.ServiceSpec"
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            for name, full in found.items()}


def definition_spec(m, kind, namespace, declared, columns):
    """A ResourceDefinitionSpec as cosi's Fill completes it (resource_definition.go:55-123), and
    its YAML form."""
    name, suffix = kind.split(".", 1)
    singular = name[:-1]  # the three plurals here end in a plain `s`
    aliases = list(declared) + [singular.lower()]
    parts = suffix.split(".")
    all_aliases = [name.lower()] + [".".join([name.lower()] + parts[:i])
                                    for i in range(1, len(parts))]
    capitals = "".join(c for c in name if c.isupper())
    if len(capitals) > 1:
        aliases.append(capitals.lower())
        if not capitals.endswith("S"):
            aliases.append(capitals.lower() + "s")
    all_aliases += aliases
    spec = m["ResourceDefinitionSpec"](
        resource_type=kind, display_type=singular, default_namespace=namespace, aliases=aliases,
        all_aliases=all_aliases,
        print_columns=[m["PrintColumn"](name=n, json_path=p) for n, p in columns])
    lines = [f"type: {kind}", f"displayType: {singular}", f"defaultNamespace: {namespace}",
             "aliases:"] + [f"    - {a}" for a in aliases] + ["allAliases:"] + \
        [f"    - {a}" for a in all_aliases] + ["printColumns: []" if not columns else "printColumns:"]
    for n, p in columns:
        lines += [f"    - name: {n}", f"      jsonPath: '{p}'"]
    return spec, "\n".join(lines) + "\n"


class NodeCosi:
    """The node's COSI state: the definitions, its `Nodename`, its running services."""

    def __init__(self, record, nodename, etcd_running):
        self.record = record
        self.nodename = nodename
        self.etcd_running = etcd_running
        self.m = cosi_messages()
        # The definitions are fixed: made once, as COSI registers them at start.
        self.definitions = []
        for definition in DEFINITIONS:
            spec, text = definition_spec(self.m, *definition)
            self.definitions.append((definition[0].lower(), "", spec.SerializeToString(), text))
        self.created = timestamp_pb2.Timestamp()
        self.created.GetCurrentTime()

    def resources(self, namespace, kind):
        """The resources of `kind` in `namespace` now: (id, owner, proto spec, YAML spec)."""
        m = self.m
        if (namespace, kind) == ("meta", RD_TYPE):
            return self.definitions
        if (namespace, kind) == ("k8s", NODENAME_TYPE):
            spec = m["NodenameSpec"](nodename=self.nodename, hostname_version="1")
            text = f"nodename: {self.nodename}\nhostnameVersion: \"1\"\nskipNodeRegistration: false\n"
            return [("nodename", "k8s.NodenameController", spec.SerializeToString(), text)]
        if (namespace, kind) == ("runtime", SERVICE_TYPE) and self.etcd_running():
            spec = m["ServiceSpec"](running=True, healthy=True)
            text = "running: true\nhealthy: true\nunknown: false\n"
            return [("etcd", "v1alpha1.ServiceController", spec.SerializeToString(), text)]
        return []

    def check_access(self, context, namespace, kind):
        """access.go:25-64: the type's definition, then the namespace."""
        if kind.lower() not in [d[0].lower() for d in DEFINITIONS]:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f'resource type "{kind}" is not supported')
        if namespace not in [d[1] for d in DEFINITIONS]:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f'namespace "{namespace}" is not supported')

    def resource(self, namespace, kind, found):
        rid, owner, proto_spec, yaml_spec = found
        metadata = self.m["Metadata"](
            namespace=namespace, type=kind, id=rid, version="1", owner=owner, phase="running",
            created=self.created, updated=self.created)
        return self.m["Resource"](metadata=metadata, spec=self.m["Spec"](
            proto_spec=proto_spec, yaml_spec=yaml_spec))

    def get(self, request, context):
        self.record({"rpc": "COSI.Get", "namespace": request.namespace, "type": request.type,
                     "id": request.id})
        self.check_access(context, request.namespace, request.type)
        for found in self.resources(request.namespace, request.type):
            if found[0] == request.id:
                return self.m["GetResponse"](
                    resource=self.resource(request.namespace, request.type, found))
        context.abort(grpc.StatusCode.NOT_FOUND,
                      f"resource {request.type}({request.namespace}/{request.id}@undefined) "
                      "doesn't exist")

    def list(self, request, context):
        self.record({"rpc": "COSI.List", "namespace": request.namespace, "type": request.type})
        self.check_access(context, request.namespace, request.type)
        for found in self.resources(request.namespace, request.type):
            yield self.m["ListResponse"](
                resource=self.resource(request.namespace, request.type, found))

    def handlers(self):
        """COSI's State service (Get, List), for `server.add_generic_rpc_handlers`."""
        m = self.m
        return [grpc.method_handlers_generic_handler("cosi.resource.State", {
            "Get": grpc.unary_unary_rpc_method_handler(
                self.get, request_deserializer=m["GetRequest"].FromString,
                response_serializer=m["GetResponse"].SerializeToString),
            "List": grpc.unary_stream_rpc_method_handler(
                self.list, request_deserializer=m["ListRequest"].FromString,
                response_serializer=m["ListResponse"].SerializeToString)})]

