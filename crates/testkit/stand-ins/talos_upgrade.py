"""The upgrade side of a configured Talos node, for talos_maintenance.py: what `talosctl upgrade`
sends through Talos v1.13's upgrade API, answered as Talos v1.13.9 answers it.

The services `machine.ImageService` (api/machine/image.proto) and `machine.LifecycleService`
(api/machine/lifecycle.proto) are not among the protos ../shared/talos/v1.13.9/api holds
(machine.proto, common.proto, google/rpc/status.proto only). Their messages are described here,
field by field, as those files declare them at v1.13.9, limited to the fields talosctl sends and
reads (the wire format is the field numbers and types; no file of Talos's is copied):

- `ImageService.Pull(ImageServicePullRequest) returns (stream ImageServicePullResponse)`
  (image.proto:18): request `containerd` = 1 (common.ContainerdInstance), `image_ref` = 3
  (image.proto:39-43); response oneof `name` = 1, `pull_progress` = 2 (image.proto:45-52; the
  progress messages are never sent here, so their type is left out of the description and
  field 2 is not declared);
- `LifecycleService.Upgrade(LifecycleServiceUpgradeRequest) returns (stream
  LifecycleServiceUpgradeResponse)` (lifecycle.proto:15-17): request `containerd` = 1,
  `source` = 2 (InstallArtifactsSource: `image_name` = 1) (lifecycle.proto:20-24, 60-66);
  response `progress` = 1 (LifecycleServiceInstallProgress: oneof `message` = 1, `exit_code` = 2,
  lifecycle.proto:42-52, 68-72).

Sources, siderolabs/talos at v1.13.9:

- the client, cmd/talosctl/cmd/talos/upgrade.go:82-175: `Version` first (the node must be in
  ">1.13.0-alpha.2 <2.0.0", :86, :120-134), then `ImageService.Pull` of `--image`
  (image.go:237-297), then `LifecycleService.Upgrade` with the same reference (:177-244: a
  non-zero `exit_code` becomes "upgrade failed with exit code N"), then, with `--drain` (on by
  default), a drain through the Kubernetes API, and `MachineService.Reboot` unless `--no-reboot`
  (reboot.go:92-116: without `--wait`, the call alone);
- `ImageService.Pull`, internal/app/images/images.go:88-145: the image pulled into the
  containerd instance the request names, then its name sent once, pinned by digest when the
  reference was not (`<name>@<digest>`, :128-144). No registry answers here: every reference
  pulls, and its digest is the sha256 of the reference's text;
- `LifecycleService.Upgrade`, internal/app/lifecycle/lifecycle.go:145-232: the lock
  (FailedPrecondition "another installation/upgrade is already in progress", :156-159), the
  machine installed (a configured node here is), InvalidArgument "installer image name is
  required" for an empty reference (:169-172), then the installer run from the containerd store
  of the request's instance: an image not pulled there fails with Internal "upgrade failed:
  installer image %q not found in containerd store: <containerd's error>" (:227-229,
  container.go:95-98; the text after the colon is containerd's `image "<ref>": not found`).
  The installer's output lines are streamed as `message`, then its `exit_code` (0 here: no
  installer runs, the upgrade is staged). Neither an etcd health check nor a lock across nodes:
  those are the legacy `MachineService.Upgrade`'s only (v1alpha1_server.go:539-559);
- `MachineService.Reboot`, internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go:
  365-393: answers at once with an actor id and reboots in the background. Here the reboot is
  immediate: from then on the node answers `Version` with the staged installer's tag (an Image
  Factory installer `<host>/<platform>-installer/<schematic>:<version>` is tagged with the Talos
  version it installs: image-factory docs/api.md).

Not modelled: the drain (talosctl reads the node's name from COSI and drains through the
Kubernetes API: run talosctl with `--drain=false`), `--wait` (the `Events` stream and the boot
id), the installer itself (bootloader, partitions, kernel arguments), the legacy path.
"""
import hashlib
import threading
import uuid

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def field(name, number, kind, type_name=None, oneof=None):
    described = F(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    if type_name:
        described.type_name = type_name
    if oneof is not None:
        described.oneof_index = oneof
    return described


def message(name, fields, oneofs=()):
    described = descriptor_pb2.DescriptorProto(name=name, field=fields)
    for oneof in oneofs:
        described.oneof_decl.add(name=oneof)
    return described


def upgrade_messages():
    """The messages of the two services' calls, in the default pool beside common.proto's."""
    pool = descriptor_pool.Default()
    described = descriptor_pb2.FileDescriptorProto(
        name="edgepop/talos_upgrade_model.proto", package="machine", syntax="proto3",
        dependency=["common/common.proto"])
    instance = ".common.ContainerdInstance"
    described.message_type.extend([
        message("ImageServicePullRequest", [
            field("containerd", 1, F.TYPE_MESSAGE, instance),
            field("image_ref", 3, F.TYPE_STRING)]),
        message("ImageServicePullResponse", [field("name", 1, F.TYPE_STRING, oneof=0)],
                oneofs=["response"]),
        message("InstallArtifactsSource", [field("image_name", 1, F.TYPE_STRING)]),
        message("LifecycleServiceUpgradeRequest", [
            field("containerd", 1, F.TYPE_MESSAGE, instance),
            field("source", 2, F.TYPE_MESSAGE, ".machine.InstallArtifactsSource")]),
        message("LifecycleServiceInstallProgress", [
            field("message", 1, F.TYPE_STRING, oneof=0),
            field("exit_code", 2, F.TYPE_INT32, oneof=0)], oneofs=["response"]),
        message("LifecycleServiceUpgradeResponse", [
            field("progress", 1, F.TYPE_MESSAGE, ".machine.LifecycleServiceInstallProgress")]),
    ])
    pool.Add(described)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"machine.{name}"))
            for name in ["ImageServicePullRequest", "ImageServicePullResponse",
                         "LifecycleServiceUpgradeRequest", "LifecycleServiceUpgradeResponse",
                         "LifecycleServiceInstallProgress"]}


def store_of(instance):
    """The containerd store a `ContainerdInstance` names (its driver and namespace)."""
    return (instance.driver, instance.namespace)


class NodeUpgrade:
    """One node's installed version, its containerd stores, its staged upgrade."""

    def __init__(self, version, record):
        self.version = version
        self.record = record
        self.pulled = set()
        self.staged = None
        self.lock = threading.Lock()
        self.m = upgrade_messages()

    def pull(self, request, context):
        ref = request.image_ref
        self.pulled.add((store_of(request.containerd), ref))
        digest = "sha256:" + hashlib.sha256(ref.encode()).hexdigest()
        name = ref if "@" in ref else ref.rsplit(":", 1)[0] + "@" + digest
        self.record({"rpc": "ImageService.Pull", "image_ref": ref,
                     "namespace": request.containerd.namespace})
        yield self.m["ImageServicePullResponse"](name=name)

    def upgrade(self, request, context):
        if not self.lock.acquire(blocking=False):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "another installation/upgrade is already in progress")
        try:
            ref = request.source.image_name
            self.record({"rpc": "LifecycleService.Upgrade", "image_name": ref})
            if not ref:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "installer image name is required")
            if (store_of(request.containerd), ref) not in self.pulled:
                context.abort(grpc.StatusCode.INTERNAL,
                              f'upgrade failed: installer image "{ref}" not found in containerd '
                              f'store: image "{ref}": not found')
            progress = self.m["LifecycleServiceInstallProgress"]
            answer = self.m["LifecycleServiceUpgradeResponse"]
            yield answer(progress=progress(message=f"upgrading with {ref}"))
            self.staged = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else None
            yield answer(progress=progress(exit_code=0))
        finally:
            self.lock.release()

    def reboot(self, pb):
        self.record({"rpc": "Reboot", "staged": self.staged})
        if self.staged:
            self.version, self.staged = self.staged, None
        return pb.RebootResponse(messages=[pb.Reboot(actor_id=str(uuid.uuid4()))])

    def handlers(self):
        """The gRPC handlers of the two services, for `server.add_generic_rpc_handlers`."""
        m = self.m
        return [
            grpc.method_handlers_generic_handler("machine.ImageService", {
                "Pull": grpc.unary_stream_rpc_method_handler(
                    self.pull, request_deserializer=m["ImageServicePullRequest"].FromString,
                    response_serializer=m["ImageServicePullResponse"].SerializeToString)}),
            grpc.method_handlers_generic_handler("machine.LifecycleService", {
                "Upgrade": grpc.unary_stream_rpc_method_handler(
                    self.upgrade,
                    request_deserializer=m["LifecycleServiceUpgradeRequest"].FromString,
                    response_serializer=m["LifecycleServiceUpgradeResponse"].SerializeToString)}),
        ]
