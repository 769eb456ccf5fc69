"""The etcd side of a configured Talos control plane, for talos_maintenance.py: the
`MachineService` etcd calls answered as Talos v1.13.9 answers them, over a real etcd.

Sources, siderolabs/talos at v1.13.9 (S = internal/app/machined/internal/server/v1alpha1/
v1alpha1_server.go, E = internal/app/machined/pkg/system/services/etcd.go, H =
internal/app/internal/machinehelper/machinehelper.go), pkg/machinery v1.13.9 (C =
constants/constants.go), etcd v3.6.12 (M = server/etcdserver/api/v3rpc/maintenance.go):

- every etcd call first checks the machine type (H:21-38): a node in maintenance mode has none,
  `Unimplemented` "machine type is not set, cannot use <api> API"; a worker `Unimplemented`
  "<api> is only available on control plane nodes", <api> being the handler's own name
  ("etcd snapshot", "etcd status", "member list", "etcd recover", "bootstrap");
- the node's etcd is a real etcd (--etcd-client-url; one this stand-in started, or one a test
  runs). Talos reaches it through a local client that dials for 5 s and then gives up
  (internal/pkg/etcd/etcd.go:43-77): when nothing listens there the call fails with the error
  that client returns, "failed to create etcd client: error building etcd client: context
  deadline exceeded" (code Unknown, as gRPC reports a plain Go error); this stand-in says so at
  once instead of after 5 s;
- `EtcdSnapshot` (S:1956-1990): the local member's `Maintenance.Snapshot`, the bbolt file and its
  sha256 trailer (M:150-209), taken here with the real `etcdctl snapshot save`, which writes
  exactly that stream (client/v3/snapshot/v3_snapshot.go), streamed as `common.Data` chunks of
  1024 bytes (pkg/chunker/stream/stream.go:49-52); its record names the nodes the call was sent
  to: talosctl's `nodes` metadata (pkg/machinery/client/context.go:16-24), by which apid routes
  a call (internal/app/apid/pkg/director/director.go:66-101 at v1.13.9). The forwarding itself
  is not modelled: this node answers whichever node is named;
- `EtcdStatus` (S:2174-2223): the local member's `Maintenance.Status` (the real `etcdctl endpoint
  status`), mapped field by field; a member without a leader answers with the error
  "etcdserver: no leader" in `errors` (M:286-288), an answer, not a failure;
- `EtcdMemberList` (S:1817-1863): the member list with `WithRequireLeader`, so a member without a
  leader fails with etcd's "etcdserver: no leader" (the real `etcdctl member list`'s error);
  `query_local` false asks the control planes' endpoints: here, the same local member;
- `EtcdRecover` (S:1995-2056): `FailedPrecondition` "etcd service is not ready for recovery yet"
  while /var/lib (--var-lib) does not exist, then the machine type; the upload goes to
  /var/lib/etcd.snapshot (C:461), removed when the upload breaks;
- `EtcdRemoveMemberByID` (S:1866-1893): the machine type ("etcd remove member"), then etcd's
  `MemberRemove` of the id with `WithRequireLeader` (the real `etcdctl member remove`), through
  a client of every control plane's etcd in a random order (internal/pkg/etcd/etcd.go:81-91),
  which needs no local member: the endpoints are those Talos discovered (endpoints.go:20-45;
  here --control-plane-etcd-endpoints); etcd's
  "etcdserver: member not found" is `NotFound` with that text, any other error "failed to remove
  member: <etcd's error>";
- `EtcdLeaveCluster` (S:1896-1919, L = internal/pkg/etcd/etcd.go:153-196): the machine type
  ("etcd leave"), the local member's id (internal/pkg/etcd/local.go:19-34, from the member
  resource etcd's controller keeps; here the local member's own status), then its `MemberRemove`
  through that same client
  (a member not found counts as removed), then the etcd service stopped and /var/lib/etcd
  removed; an error is "failed to leave cluster: <error>". Talos retries etcd's "unhealthy
  cluster" and "server stopped" answers every 10 s for five minutes (L:157-178: etcd refuses a
  removal until the members left have been connected for a while; a removal the leaving member
  serves itself is applied, and its answer is "etcdserver: server stopped" as that member stops,
  as etcd v3.6.14 answers here); this stand-in retries them every second for a minute. The
  client is built once, before the first attempt, on every control plane's endpoint (S:1901-1906),
  so a retry after the local member has stopped reaches the others and finds the member gone;
- `Bootstrap` (S:439-472): the machine type, then `AlreadyExists` "etcd data directory is not
  empty" when /var/lib/etcd (C:452) holds anything; the time is in sync and bootstrap allowed
  here (a configured node past its boot). Then etcd is stopped and started again in bootstrap
  mode (E:682-718); the service starts in a goroutine of its own (internal/app/machined/pkg/
  system/system.go:143-186), so the call answers before the restore runs: a restore that fails
  fails the etcd service, not the call. With `recover_etcd`, the service's pre-start step
  (E:511-515, 570-602) runs `Status`, then `Restore` with Name = the node's hostname,
  OutputDataDir = /var/lib/etcd, PeerURLs = its peer URL, InitialCluster = itself only and
  SkipHashCheck = `recover_skip_hash_check` (the real `etcdutl snapshot restore` with those
  flags; Talos leaves InitialClusterToken empty), deletes the snapshot, and etcd starts on the
  restored folder. Without it, a new one-member cluster.

- `ServiceList` (S:758-770): the etcd service only, its state as the service runner reports it:
  `Running` while the node's etcd answers; `Preparing` while its etcd folder is empty, the
  pre-start step waiting for a bootstrap or a cluster to join ("Running pre state",
  internal/app/machined/pkg/system/service_runner.go:271; the wait, E:330-343); `Failed` for a
  folder holding data with no etcd answering (a test's broken member; Talos's restarts are not
  modelled). Every service carries its events and health, which talosctl reads
  (pkg/machinery/formatters/formatters.go:208-245);
- `Reset` (S:654-755): answers at once with an actor id and runs the reset in the background;
  here only what the tools ask, EPHEMERAL wiped (`system_partitions_to_wipe`), no graceful leave,
  a reboot: etcd stops, the node's /var/lib/etcd and etcd.snapshot go with EPHEMERAL, and the
  node answers no connection for --reboot-seconds, then comes back with an empty etcd folder
  (Preparing). From the services' stop to the end of the reboot the etcd service is `Finished`
  ("Service finished successfully", internal/app/machined/pkg/system/system.go:191), never
  `Preparing`, and the reboot cuts the connections already open. Any other reset is refused as
  not modelled (Unimplemented, saying so);
- an upgrade's reboot (talos_upgrade.py, which cites it): etcd stops with the services and
  starts again once the node is back, on the folder it kept (Talos keeps /var across an
  upgrade), the same member;

- a control plane made again, or added (--etcd-join: not the bootstrap node, its etcd folder
  empty) joins as Talos's etcd service makes it join (E:483-568, 286-396, 604-660): through a
  client of every control plane's etcd (--control-plane-etcd-endpoints) with
  `WithRequireLeader`, the member list first, a member of its own hostname removed (a machine
  made again under the same name: "there will be a conflict between the existing member and a
  new joining member", E:303-312), then `MemberAddAsLearner` of its peer URL, the list read
  again and the initial cluster built from it (the new member, still unnamed, under its
  hostname); a failed attempt is tried again every 3 s and up to 1 s (E:333-336; Talos gives
  up after EtcdJoinTimeout, 30 minutes: C:926; here the node's lifetime). etcd then starts with
  `--initial-cluster-state=existing`, a learner, and the promotion runs beside it
  (E:205-216): `MemberPromote` of its id through each control plane's endpoint in turn, first at
  once, which etcd refuses while the learner has not caught up with the leader, then every 15 s
  and up to 1 s (E:604-660, the units at :614; siderolabs/go-retry v0.3.3 retry/retry.go:208-253 tries first,
  then waits). Talos's first attempt runs as the runner starts etcd's container, before etcd
  answers; here it runs just before etcd starts, so the member is a learner for those 15 s.

Not modelled: the roles (every client here is admin), apid's proxying to other nodes (the client
Talos makes to the control planes' endpoints for a removal is the local member's here), TLS
between etcd and its clients, the time-sync wait, and a worker's Talos services.
"""
import json
import math
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid

import grpc
from google.protobuf import timestamp_pb2

# What Talos's local etcd client returns when nothing answers (internal/pkg/etcd/etcd.go:55-65:
# clientv3.New with DialTimeout 5 s blocks, then fails with the context's error).
LOCAL_CLIENT_FAILED = "failed to create etcd client: error building etcd client: context deadline exceeded"
# etcd's ErrMemberNotFound (api/v3rpc/rpctypes/error.go): NotFound for a removal by id, success
# for a leave (internal/pkg/etcd/etcd.go:180-183).
MEMBER_NOT_FOUND = "etcdserver: member not found"
# What Talos's leave retries (internal/pkg/etcd/etcd.go:163-175: rpctypes.ErrUnhealthy and
# ErrStopped, whose texts are etcd's api/v3rpc/rpctypes/error.go).
RETRIED_ON_LEAVE = ("etcdserver: unhealthy cluster", "etcdserver: server stopped")
# Talos removes a member with the request's own context and no deadline of its own (S:1866-1919):
# the conf change waits for the members to commit it. The stand-in's bound on that wait.
MEMBER_REMOVE_SECONDS = 30
# What talosctl's `reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL` asks
# (cmd/talosctl/cmd/talos/reset.go:154-172), the one reset this stand-in models.
MODELLED_RESET = "EPHEMERAL wiped, a reboot, no graceful leave"
# pkg/chunker/stream/stream.go:49-52, the default chunk size of Talos's stream chunker.
CHUNK = 1024
# A joining control plane's waits (E:333-336, E:613-617): between two attempts to add its member,
# and between two attempts to promote it, each plus up to a second of jitter.
JOIN_RETRY_SECONDS = 3
PROMOTE_RETRY_SECONDS = 15


def die_with_parent(argv):
    """`argv` run so that it goes when the thread that starts it goes, however it goes
    (PR_SET_PDEATHSIG), set by util-linux's setpriv before it executes the program. Not with a
    `preexec_fn`: Python code between fork and exec, in a process whose gRPC threads may hold
    the loader's or the allocator's locks at the fork, can hang the child before it executes
    etcd (subprocess's documentation says so), and the node's etcd then never starts."""
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv]


class NodeEtcd:
    """One control plane's etcd: its local member, its /var/lib, its bootstrap."""

    def __init__(self, args, pb, common_pb, record):
        self.args = args
        self.pb = pb
        self.common = common_pb
        self.record = record
        self.process = None
        self.initial_cluster = None
        self.lock = threading.Lock()
        # Until when the node is rebooting, after a reset or an upgrade (time.monotonic()): it
        # takes no connection meanwhile (talos_maintenance.py asks `rebooting()`).
        self.down_until = 0.0
        # Until when a reset is under way: from the stop of the services to the reboot's end.
        self.reset_until = 0.0
        if args.etcd_initial_cluster:
            self.start(initial_cluster=args.etcd_initial_cluster)
        elif args.etcd_join:
            threading.Thread(target=self.join, daemon=True).start()

    # --- the checks every handler makes first ------------------------------------------------

    def check_controlplane(self, context, api, maintenance):
        if maintenance:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"machine type is not set, cannot use {api} API")
        if self.args.machine_type != "controlplane":
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"{api} is only available on control plane nodes")

    def etcd_answers(self):
        """Whether the node's etcd takes connections at its client URL."""
        url = urllib.parse.urlparse(self.args.etcd_client_url or "http://127.0.0.1:1")
        try:
            socket.create_connection((url.hostname, url.port), timeout=2).close()
            return True
        except OSError:
            return False

    def local_client(self, context):
        if not self.etcd_answers():
            context.abort(grpc.StatusCode.UNKNOWN, LOCAL_CLIENT_FAILED)

    def etcdctl(self, *words, command_timeout=10, endpoints=None):
        return subprocess.run([self.args.etcdctl, "--endpoints",
                               endpoints or self.args.etcd_client_url,
                               "--dial-timeout=3s", f"--command-timeout={command_timeout}s",
                               *words],
                              capture_output=True, text=True, timeout=command_timeout + 20)

    def control_plane_endpoints(self):
        """Where Talos's client for a removal goes: every control plane's etcd, shuffled
        (internal/pkg/etcd/etcd.go:81-91), from the control-plane endpoints Talos discovered
        (internal/pkg/etcd/endpoints.go:20-45: its k8s.Endpoint resources, not the local
        member), so a removal works while the local etcd is down; here
        --control-plane-etcd-endpoints, or the node's own etcd when it is the only one."""
        urls = [u for u in (self.args.control_plane_etcd_endpoints or "").split(",") if u]
        urls = urls or [self.args.etcd_client_url]
        random.shuffle(urls)
        return ",".join(urls)

    @staticmethod
    def etcd_error(done):
        """etcd's own error text out of etcdctl's stderr (`Error: etcdserver: no leader`)."""
        errors = [l.removeprefix("Error: ").strip() for l in done.stderr.splitlines()
                  if l.startswith("Error: ")]
        return errors[-1] if errors else f"etcdctl exited with {done.returncode}"

    def local_status(self, context, failing):
        """The local member's `Maintenance.Status` (the real `etcdctl endpoint status`); an error
        aborts the call as `<failing>: <etcd's error>`."""
        done = self.etcdctl("endpoint", "status", "-w", "json")
        if done.returncode != 0:
            context.abort(grpc.StatusCode.UNKNOWN, f"{failing}: {self.etcd_error(done)}")
        return json.loads(done.stdout)[0]["Status"]

    # --- the handlers --------------------------------------------------------------------------

    def snapshot(self, context, maintenance):
        self.check_controlplane(context, "etcd snapshot", maintenance)
        self.local_client(context)
        with tempfile.TemporaryDirectory(prefix="etcd-snapshot-") as scratch:
            path = os.path.join(scratch, "db")
            done = self.etcdctl("snapshot", "save", path)
            if done.returncode != 0:
                context.abort(grpc.StatusCode.UNKNOWN,
                              f"failed reading etcd snapshot: {self.etcd_error(done)}")
            self.record({"rpc": "EtcdSnapshot", "bytes": os.path.getsize(path)})
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    yield self.common.Data(bytes=chunk)

    def status(self, context, maintenance):
        self.check_controlplane(context, "etcd status", maintenance)
        self.local_client(context)
        answer = self.local_status(context, "failed to query etcd status")
        self.record({"rpc": "EtcdStatus", "leader": answer.get("leader", 0)})
        return self.pb.EtcdStatusResponse(messages=[self.pb.EtcdStatus(
            member_status=self.pb.EtcdMemberStatus(
                member_id=answer["header"]["member_id"],
                protocol_version=answer.get("version", ""),
                db_size=answer.get("dbSize", 0),
                db_size_in_use=answer.get("dbSizeInUse", 0),
                leader=answer.get("leader", 0),
                raft_index=answer.get("raftIndex", 0),
                raft_term=answer.get("raftTerm", 0),
                raft_applied_index=answer.get("raftAppliedIndex", 0),
                storage_version=answer.get("storageVersion", ""),
                errors=answer.get("errors", []),
                is_learner=answer.get("isLearner", False)))])

    def members(self, request, context, maintenance):
        self.check_controlplane(context, "member list", maintenance)
        self.local_client(context)
        done = self.etcdctl("member", "list", "-w", "json")
        if done.returncode != 0:
            context.abort(grpc.StatusCode.UNKNOWN, self.etcd_error(done))
        members = json.loads(done.stdout).get("members", [])
        self.record({"rpc": "EtcdMemberList", "query_local": request.query_local,
                     "members": len(members)})
        return self.pb.EtcdMemberListResponse(messages=[self.pb.EtcdMembers(
            legacy_members=[m.get("name", "") for m in members],
            members=[self.pb.EtcdMember(
                id=m["ID"], hostname=m.get("name", ""), peer_urls=m.get("peerURLs", []),
                client_urls=m.get("clientURLs", []), is_learner=m.get("isLearner", False))
                for m in members])])

    def remove_member(self, request, context, maintenance):
        self.check_controlplane(context, "etcd remove member", maintenance)
        done = self.etcdctl("member", "remove", f"{request.member_id:x}",
                            command_timeout=MEMBER_REMOVE_SECONDS,
                            endpoints=self.control_plane_endpoints())
        self.record({"rpc": "EtcdRemoveMemberByID", "member_id": f"{request.member_id:016x}",
                     "ok": done.returncode == 0})
        if done.returncode != 0:
            error = self.etcd_error(done)
            if error == MEMBER_NOT_FOUND:
                context.abort(grpc.StatusCode.NOT_FOUND, error)
            context.abort(grpc.StatusCode.UNKNOWN, f"failed to remove member: {error}")
        return self.pb.EtcdRemoveMemberByIDResponse(messages=[self.pb.EtcdRemoveMemberByID()])

    def leave(self, request, context, maintenance):
        self.check_controlplane(context, "etcd leave", maintenance)
        self.local_client(context)
        # One client for every attempt, built before the first (S:1901-1906): once the local
        # member has removed itself, the others' endpoints are still known.
        endpoints = self.control_plane_endpoints()
        member_id = self.local_status(context, "failed to leave cluster")["header"]["member_id"]
        for _ in range(60):
            done = self.etcdctl("member", "remove", f"{member_id:x}",
                                command_timeout=MEMBER_REMOVE_SECONDS, endpoints=endpoints)
            if done.returncode == 0 or self.etcd_error(done) not in RETRIED_ON_LEAVE:
                break
            time.sleep(1)
        if done.returncode != 0 and self.etcd_error(done) != MEMBER_NOT_FOUND:
            context.abort(grpc.StatusCode.UNKNOWN,
                          f"failed to leave cluster: {self.etcd_error(done)}")
        self.stop()
        shutil.rmtree(os.path.join(self.args.var_lib, "etcd"), ignore_errors=True)
        self.record({"rpc": "EtcdLeaveCluster", "member_id": f"{member_id:016x}"})
        return self.pb.EtcdLeaveClusterResponse(messages=[self.pb.EtcdLeaveCluster()])

    def recover(self, chunks, context, maintenance):
        var_lib = self.args.var_lib or ""
        if not os.path.isdir(var_lib):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "etcd service is not ready for recovery yet")
        self.check_controlplane(context, "etcd recover", maintenance)
        path = os.path.join(var_lib, "etcd.snapshot")
        uploaded = False
        try:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o700)
            with os.fdopen(fd, "wb") as f:
                size = 0
                for chunk in chunks:
                    f.write(chunk.bytes)
                    size += len(chunk.bytes)
                f.flush()
                os.fsync(f.fileno())
            uploaded = True
        finally:
            if not uploaded and os.path.exists(path):
                os.remove(path)
        self.record({"rpc": "EtcdRecover", "bytes": size})
        return self.pb.EtcdRecoverResponse(messages=[self.pb.EtcdRecover()])

    def bootstrap(self, request, context, maintenance):
        self.record({"rpc": "Bootstrap", "recover_etcd": request.recover_etcd,
                     "recover_skip_hash_check": request.recover_skip_hash_check})
        self.check_controlplane(context, "bootstrap", maintenance)
        data = os.path.join(self.args.var_lib or "", "etcd")
        if os.path.isdir(data) and os.listdir(data):
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "etcd data directory is not empty")
        self.stop()
        threading.Thread(target=self.service, args=(request,), daemon=True).start()
        return self.pb.BootstrapResponse(messages=[self.pb.Bootstrap()])

    def service_list(self, context):
        state, message = self.etcd_state()
        self.record({"rpc": "ServiceList", "etcd": state})
        now = self.common_timestamp()
        return self.pb.ServiceListResponse(messages=[self.pb.ServiceList(services=[
            self.pb.ServiceInfo(
                id="etcd", state=state,
                events=self.pb.ServiceEvents(events=[
                    self.pb.ServiceEvent(msg=message, state=state, ts=now)]),
                health=self.pb.ServiceHealth(unknown=state != "Running",
                                             healthy=state == "Running", last_change=now))])])

    def reset(self, request, context):
        wiped = [p.label for p in request.system_partitions_to_wipe if p.wipe]
        self.record({"rpc": "Reset", "graceful": request.graceful, "reboot": request.reboot,
                     "wipe": wiped, "mode": request.mode})
        if request.graceful or not request.reboot or wiped != ["EPHEMERAL"] \
                or list(request.user_disks_to_wipe):
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"the stand-in models only one reset: {MODELLED_RESET}")
        threading.Thread(target=self.reset_and_reboot, daemon=True).start()
        return self.pb.ResetResponse(messages=[self.pb.Reset(actor_id=str(uuid.uuid4()))])

    def reset_and_reboot(self):
        """The reset sequence Talos runs after answering (S:738-744): the services stop,
        EPHEMERAL (/var) is wiped, the machine reboots."""
        time.sleep(0.2)
        self.reset_until = math.inf
        self.stop()
        shutil.rmtree(os.path.join(self.args.var_lib, "etcd"), ignore_errors=True)
        snapshot = os.path.join(self.args.var_lib, "etcd.snapshot")
        if os.path.exists(snapshot):
            os.remove(snapshot)
        self.reset_until = self.down_for(self.args.reboot_seconds)
        self.record({"reset": "EPHEMERAL", "reboot_seconds": self.args.reboot_seconds})

    def rebooting(self):
        return time.monotonic() < self.down_until

    def down_for(self, seconds):
        """The machine reboots for `seconds` (a reset's reboot, or an upgrade's): until when."""
        self.down_until = time.monotonic() + seconds
        return self.down_until

    def stop_for_reboot(self):
        """etcd stopped with the services for a reboot that keeps /var (an upgrade's): whether
        this node ran it."""
        with self.lock:
            ran = self.process is not None
        self.stop()
        return ran

    def run_again(self):
        """etcd started again on the folder it kept, its member the same, from a thread that
        lasts as long as it runs (the child dies with the thread that started it)."""
        initial = self.initial_cluster

        def run():
            self.start(initial_cluster=initial).wait()

        threading.Thread(target=run, daemon=True).start()

    def etcd_state(self):
        """The etcd service's state and its last event's message (see the module's text)."""
        if time.monotonic() < self.reset_until:
            return "Finished", "Service finished successfully"
        if self.etcd_answers():
            return "Running", "Health check successful"
        data = os.path.join(self.args.var_lib or "", "etcd")
        if os.path.isdir(data) and os.listdir(data):
            return "Failed", "etcd does not answer though its data folder holds data"
        return "Preparing", "Running pre state"

    @staticmethod
    def common_timestamp():
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        return now

    # --- a control plane joining the cluster ---------------------------------------------------

    def join(self):
        """The etcd service of a control plane that joins (see the module's text): its member
        added as a learner, etcd started in the existing cluster, then promoted. The thread
        stays while etcd runs (its child dies with it)."""
        endpoints = self.control_plane_endpoints()
        while True:
            joined = self.add_as_learner(endpoints)
            if joined is not None:
                break
            time.sleep(JOIN_RETRY_SECONDS + random.random())
        member_id, initial_cluster = joined
        self.record({"etcd": "added as a learner", "member_id": f"{member_id:016x}",
                     "initial_cluster": initial_cluster})
        each = endpoints.split(",")
        promoted = self.promote(member_id, each)
        process = self.start(initial_cluster=initial_cluster, state="existing")
        while not promoted:
            time.sleep(PROMOTE_RETRY_SECONDS + random.random())
            promoted = self.promote(member_id, each)
        process.wait()

    def add_as_learner(self, endpoints):
        """One attempt of Talos's addMember (E:286-325): (member id, initial cluster), or None."""
        listed = self.etcdctl("member", "list", "-w", "json", endpoints=endpoints)
        if listed.returncode != 0:
            self.record({"etcd": "join attempt failed", "error": self.etcd_error(listed)})
            return None
        for member in json.loads(listed.stdout).get("members", []):
            if member.get("name") == self.args.hostname:
                gone = self.etcdctl("member", "remove", f"{member['ID']:x}", endpoints=endpoints,
                                    command_timeout=MEMBER_REMOVE_SECONDS)
                self.record({"etcd": "removed the member of the same name",
                             "member_id": f"{member['ID']:016x}", "ok": gone.returncode == 0})
                if gone.returncode != 0:
                    return None
        added = self.etcdctl("member", "add", self.args.hostname,
                             f"--peer-urls={self.args.etcd_peer_url}", "--learner", "-w", "json",
                             endpoints=endpoints)
        if added.returncode != 0:
            self.record({"etcd": "join attempt failed", "error": self.etcd_error(added)})
            return None
        member_id = json.loads(added.stdout)["member"]["ID"]
        listed = self.etcdctl("member", "list", "-w", "json", endpoints=endpoints)
        if listed.returncode != 0:
            return None
        initial = [f"{self.args.hostname if m['ID'] == member_id else m.get('name', '')}={url}"
                   for m in json.loads(listed.stdout).get("members", [])
                   for url in m.get("peerURLs", [])]
        return member_id, ",".join(initial)

    def promote(self, member_id, endpoints):
        """One round of Talos's promoteMember (E:604-660): each endpoint in turn until one
        promotes the learner."""
        for endpoint in endpoints:
            done = self.etcdctl("member", "promote", f"{member_id:x}", endpoints=endpoint)
            if done.returncode == 0:
                self.record({"etcd": "promoted", "member_id": f"{member_id:016x}"})
                return True
            error = self.etcd_error(done)
        self.record({"etcd": "promotion refused", "error": error})
        return False

    # --- the etcd service ----------------------------------------------------------------------

    def service(self, request):
        """The etcd service's run in bootstrap mode: restore first when asked, then etcd."""
        try:
            if request.recover_etcd:
                self.restore(request.recover_skip_hash_check)
            process = self.start(initial_cluster=f"{self.args.hostname}={self.args.etcd_peer_url}")
            self.record({"service": "etcd", "state": "Running"})
            # The child dies with the thread that started it (PR_SET_PDEATHSIG follows the
            # thread): this one stays as long as etcd runs.
            process.wait()
        except (OSError, subprocess.SubprocessError, RuntimeError) as err:
            self.record({"service": "etcd", "state": "Failed", "message": str(err)})

    def restore(self, skip_hash_check):
        snapshot = os.path.join(self.args.var_lib, "etcd.snapshot")
        status = subprocess.run([self.args.etcdutl, "snapshot", "status", snapshot, "-w", "json"],
                                capture_output=True, text=True, timeout=60)
        if status.returncode != 0:
            raise RuntimeError(f"error verifying snapshot: {status.stderr.strip()}")
        flags = ["--name", self.args.hostname,
                 "--data-dir", os.path.join(self.args.var_lib, "etcd"),
                 "--initial-cluster", f"{self.args.hostname}={self.args.etcd_peer_url}",
                 "--initial-advertise-peer-urls", self.args.etcd_peer_url,
                 "--initial-cluster-token="]
        if skip_hash_check:
            flags.append("--skip-hash-check")
        done = subprocess.run([self.args.etcdutl, "snapshot", "restore", snapshot, *flags],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"error recovering from the snapshot: {done.stderr.strip()}")
        self.record({"restored": json.loads(status.stdout), "flags": flags})
        os.remove(snapshot)

    def start(self, initial_cluster, state="new"):
        data = os.path.join(self.args.var_lib, "etcd")
        os.makedirs(data, mode=0o700, exist_ok=True)
        log = open(os.path.join(self.args.record_dir, "etcd.log"), "ab")
        self.initial_cluster = initial_cluster
        with self.lock:
            self.process = subprocess.Popen(
                die_with_parent(
                    [self.args.etcd, f"--name={self.args.hostname}", f"--data-dir={data}",
                     f"--listen-client-urls={self.args.etcd_client_url}",
                     f"--advertise-client-urls={self.args.etcd_client_url}",
                     f"--listen-peer-urls={self.args.etcd_peer_url}",
                     f"--initial-advertise-peer-urls={self.args.etcd_peer_url}",
                     f"--initial-cluster={initial_cluster}", f"--initial-cluster-state={state}"]),
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            return self.process

    def stop(self):
        with self.lock:
            if self.process is not None:
                self.process.kill()
                self.process.wait(timeout=30)
                self.process = None


def add_arguments(parser):
    parser.add_argument("--machine-type", choices=["worker", "controlplane"], default="worker",
                        help="what a configured node is (the etcd calls need a control plane)")
    parser.add_argument("--hostname", default="talos-node",
                        help="the node's hostname: its etcd member's name")
    parser.add_argument("--var-lib", help="the node's /var/lib (etcd/, etcd.snapshot); "
                        "absent: /var not mounted yet")
    parser.add_argument("--etcd", help="the real etcd, for the node's own member")
    parser.add_argument("--etcdctl", help="the real etcdctl (snapshot save, status, members)")
    parser.add_argument("--etcdutl", help="the real etcdutl (snapshot status and restore)")
    parser.add_argument("--etcd-client-url", help="where the node's etcd serves clients")
    parser.add_argument("--etcd-peer-url", help="the node's etcd peer URL")
    parser.add_argument("--control-plane-etcd-endpoints",
                        help="every control plane's etcd client URL, comma-separated, as Talos "
                        "discovers them (default: the node's own)")
    parser.add_argument("--reboot-seconds", type=float, default=3,
                        help="how long the node takes no connection after a reset's reboot")
    parser.add_argument("--etcd-initial-cluster",
                        help="start the node's etcd at once, a member of this initial cluster")
    parser.add_argument("--etcd-join", action="store_true",
                        help="a control plane made again or added: its etcd joins the cluster "
                        "of --control-plane-etcd-endpoints as a learner, then is promoted")


def servicer_methods(node_etcd, maintenance):
    """The MachineService methods this module answers, `maintenance()` saying whether the node
    is still in maintenance mode."""
    return {
        "EtcdSnapshot": lambda self, request, context: node_etcd.snapshot(context, maintenance()),
        "EtcdStatus": lambda self, request, context: node_etcd.status(context, maintenance()),
        "EtcdMemberList": lambda self, request, context: node_etcd.members(
            request, context, maintenance()),
        "EtcdRecover": lambda self, chunks, context: node_etcd.recover(
            chunks, context, maintenance()),
        "Bootstrap": lambda self, request, context: node_etcd.bootstrap(
            request, context, maintenance()),
        "EtcdRemoveMemberByID": lambda self, request, context: node_etcd.remove_member(
            request, context, maintenance()),
        "EtcdLeaveCluster": lambda self, request, context: node_etcd.leave(
            request, context, maintenance()),
        "ServiceList": lambda self, request, context: node_etcd.service_list(context),
        "Reset": lambda self, request, context: node_etcd.reset(request, context),
    }
