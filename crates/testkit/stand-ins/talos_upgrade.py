"""The upgrade side of a configured Talos node, for talos_maintenance.py: what `talosctl upgrade`
sends through Talos v1.13's upgrade API, and the reboot it follows with `--wait`, answered as
Talos v1.13.9 answers them.

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
  default: talos_drain.py), a drain through the Kubernetes API, and `MachineService.Reboot`
  unless `--no-reboot` (reboot.go:92-116: without `--wait`, the call alone; with it, below);
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
  365-393: answers at once with an actor id (a UUID) and runs the `reboot` sequence in the
  background, its context carrying that actor id (:377), which every event the sequence
  publishes carries (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_events.go:214-229): the
  `SequenceEvent` START of `reboot` (v1alpha1_controller.go:259-263); the machine's stage,
  published by the MachineStatusPublisherController without an actor
  (internal/app/machined/pkg/controllers/runtime/machine_status_publisher.go:51-84), becomes
  REBOOTING, not ready. Then the services stop (etcd with them), the node goes away (open
  connections cut, none taken) for --reboot-seconds and comes back: a new boot id, a new event
  history (machined's is in memory) of BOOTING then, once etcd answers again on the data it kept
  (Talos keeps /var across an upgrade; its readiness waits for the services' health), RUNNING
  ready. From then on it answers `Version` with the staged installer's tag (an Image Factory
  installer `<host>/<platform>-installer/<schematic>:<version>` is tagged with the Talos version
  it installs: image-factory docs/api.md). A node starts as one just booted: BOOTING, RUNNING
  ready in its history;
- `MachineService.Events` (machine.proto, ../shared; v1alpha1_server.go:1447-1517): first an
  empty "hello" event (no payload, the request's actor id), then the events from the position
  `tail_events` asks (0: only those published from now on; negative: the whole history; N: the
  last N; v1alpha1_events.go:124-141), filtered by `with_actor_id`, each an `Event` whose
  `data` is an Any of type URL `talos/runtime/<message's full name>`
  (internal/app/machined/pkg/runtime/events.go:127-159) and whose id is an xid (20 characters
  of base32hex, github.com/rs/xid).
  `tail_id` and `tail_seconds` are not modelled (Unimplemented, saying so);
- `MachineService.Read` (machine.proto; v1alpha1_server.go:1406-1442): a regular file
  streamed as `common.Data`; a path that does not exist is NotFound with Go's `stat <path>: no
  such file or directory` (:1407-1411). The one file modelled is
  /proc/sys/kernel/random/boot_id (the kernel's boot id, a UUID and a newline).

What talosctl does with these, `upgrade --wait` (forced on by the drain, upgrade.go:66-72) or
`reboot --wait`: cmd/talosctl/cmd/talos/reboot.go:92-116 and cmd/talosctl/pkg/talos/action/
tracker.go:38-76, 172-278, node.go:67-311: `Version`, the boot id read, `Reboot`, the events
watched (a `reboot` sequence event of the actor, or a broken stream, is waited past, then the
whole history is watched again) until a MachineStatusEvent RUNNING and ready, then the boot id
read until it differs from the one before.

Not modelled: the installer itself (bootloader, partitions, kernel arguments), the legacy path,
the other tasks and phases of the reboot sequence, and the Kubernetes node's status (the test's
kubelet stand-in keeps it Ready through a reboot this short, as the node lifecycle controller
waits its grace period, tens of seconds, before it marks a silent node NotReady).
"""
import base64
import hashlib
import os
import threading
import time
import uuid

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

BOOT_ID = "/proc/sys/kernel/random/boot_id"
# How long the stand-in waits for the node's etcd to answer again after a reboot before it
# declares the machine ready anyway (a test's broken member must not hang the node).
ETCD_BACK_SECONDS = 60

F = descriptor_pb2.FieldDescriptorProto


def field(name, number, kind, type_name=None, oneof=None, repeated=False):
    label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
    described = F(name=name, number=number, type=kind, label=label)
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


def xid():
    """An event id as github.com/rs/xid writes one: 12 bytes, 20 characters of base32hex."""
    return base64.b32hexencode(os.urandom(12)).decode().lower().rstrip("=")


class NodeUpgrade:
    """One node's installed version, its containerd stores, its staged upgrade, its boots and
    their events. `services` stops the node's services for a reboot (whether etcd ran), keeps
    the machine down meanwhile and runs them again (`stop_for_reboot()`, `down_for()`,
    `run_again()`, `etcd_answers()`)."""

    def __init__(self, version, record, pb, reboot_seconds, services):
        self.version = version
        self.record = record
        self.pb = pb
        self.reboot_seconds = reboot_seconds
        self.services = services
        self.pulled = set()
        self.staged = None
        self.lock = threading.Lock()
        self.m = upgrade_messages()
        self.changed = threading.Condition()
        self.boot = 0
        self.boot_id = str(uuid.uuid4())
        self.events = []
        self.booted()

    # --- the machine's events and boots -------------------------------------------------------

    def publish(self, payload, actor_id=""):
        data = any_pb2.Any(type_url=f"talos/runtime/{payload.DESCRIPTOR.full_name}",
                           value=payload.SerializeToString())
        with self.changed:
            self.events.append(self.pb.Event(data=data, id=xid(), actor_id=actor_id))
            self.changed.notify_all()

    def stage(self, stage, ready):
        status = self.pb.MachineStatusEvent
        self.publish(status(stage=status.MachineStage.Value(stage),
                            status=status.MachineStatus(ready=ready)))

    def booted(self):
        """The history of a node past its boot: BOOTING, then RUNNING and ready."""
        self.stage("BOOTING", False)
        self.stage("RUNNING", True)

    def reboot_sequence(self, actor_id):
        time.sleep(0.2)  # the answer reaches the client first
        self.publish(self.pb.SequenceEvent(sequence="reboot",
                                           action=self.pb.SequenceEvent.START), actor_id)
        self.stage("REBOOTING", False)
        time.sleep(0.2)
        etcd_ran = self.services.stop_for_reboot()
        with self.changed:
            self.services.down_for(self.reboot_seconds)
            self.boot += 1
            self.boot_id = str(uuid.uuid4())
            self.events = []
            if self.staged:
                self.version, self.staged = self.staged, None
            self.changed.notify_all()
        self.record({"reboot": "down", "reboot_seconds": self.reboot_seconds})
        time.sleep(self.reboot_seconds)
        self.stage("BOOTING", False)
        if etcd_ran:
            self.services.run_again()
            deadline = time.monotonic() + ETCD_BACK_SECONDS
            while not self.services.etcd_answers() and time.monotonic() < deadline:
                time.sleep(0.2)
        self.stage("RUNNING", True)
        self.record({"reboot": "up", "version": self.version})

    def watch(self, request, context):
        self.record({"rpc": "Events", "tail_events": request.tail_events,
                     "with_actor_id": request.with_actor_id})
        if request.tail_id or request.tail_seconds:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "the stand-in models only tail_events and with_actor_id")
        yield self.pb.Event(data=any_pb2.Any(), id=xid(), actor_id=request.with_actor_id)
        with self.changed:
            boot, position = self.boot, len(self.events)
            if request.tail_events < 0:
                position = 0
            elif request.tail_events > 0:
                position = max(0, position - request.tail_events)
        while context.is_active():
            with self.changed:
                if self.boot != boot:
                    return  # the machine rebooted: its connections are gone
                if position >= len(self.events):
                    self.changed.wait(0.2)
                    continue
                pending, position = self.events[position:], len(self.events)
            for event in pending:
                if not request.with_actor_id or event.actor_id == request.with_actor_id:
                    yield event

    def read(self, common, request, context):
        self.record({"rpc": "Read", "path": request.path})
        if request.path != BOOT_ID:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"stat {request.path}: no such file or directory")
        yield common.Data(bytes=(self.boot_id + "\n").encode())

    # --- the upgrade ----------------------------------------------------------------------------

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

    def reboot(self):
        actor_id = str(uuid.uuid4())
        self.record({"rpc": "Reboot", "staged": self.staged, "actor_id": actor_id})
        threading.Thread(target=self.reboot_sequence, args=(actor_id,), daemon=True).start()
        return self.pb.RebootResponse(messages=[self.pb.Reboot(actor_id=actor_id)])

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
