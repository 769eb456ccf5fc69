#!/usr/bin/env python3
"""A Talos node's API (apid on :50000) for talos-apply-insecure's tests, on loopback.

Speaks the real `machine.MachineService` messages: Talos's own machine.proto and common.proto
(../shared/talos/v1.13.9/api) are compiled with grpcio-tools when it starts. It behaves as
Talos v1.13.9 does (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
internal/app/machined/pkg/controllers/runtime/api_service_config.go, services/machined.go):

- maintenance mode: server-only TLS with a self-signed certificate, every peer gets the reader
  role. ApplyConfiguration is open to it: the config must load and pass the config's own
  validation for the platform's mode (metal), else InvalidArgument with Talos's message; the
  real talosctl's `validate` (--talosctl) runs both, as configloader.NewFromBytes and
  Config.Validate do in machined (the runtime checks against the node's resources aside).
  REBOOT and AUTO become
  NO_REBOOT ("Applied configuration without a reboot"), TRY, NO_REBOOT and STAGED are accepted,
  any other value is InvalidArgument. Version is open to readers too (features unset, as there
  is no config yet). Every other RPC is Unimplemented (the generated servicer's default).
  With --talos v1.11, the older maintenance service instead: only AUTO, TRY and REBOOT, others
  Unimplemented; Version Unimplemented "API is not implemented in maintenance mode".
- once a config is applied (not a dry run) the node leaves maintenance mode: from the next
  handshake, mutual TLS is required, as the API service config switches SkipVerifyingClientCert off,
  presenting --configured-cert (issued by the machine CA, naming the node's addresses:
  internal/app/machined/pkg/controllers/secrets/api_cert_sans.go) and taking only client
  certificates of --client-ca (the machine CA: apid verifies clients against it).
- --start configured: mutual TLS from the start (an installed node); with a --configured-cert
  and --client-ca of another CA, a node someone else configured.
- --listen-after S: the port is chosen (and written) at once, the API listens only S seconds
  later: a machine still in its POST, then booting.
- --swap-cert/--swap-key: after the first Version call, new handshakes get this other
  certificate (an on-path host answering in the node's place, or a rebooted node).

- a configured control plane (--machine-type controlplane) answers the etcd calls (EtcdSnapshot,
  EtcdStatus, EtcdMemberList, EtcdRecover, Bootstrap) over a real etcd: talos_etcd.py, which
  cites the behaviour of each.
- a configured node answers `Restart` of a Kubernetes container (`talosctl restart -k`: namespace
  k8s.io, the CRI driver) as Talos does (S:1621-1647 with internal/pkg/containers/cri/
  cri.go:112-170): the id `<namespace>/<pod>:<container>` is looked up among the node's
  containers, a container not found is the error `container "<id>" not found` (code Unknown), a
  found one gets SIGTERM and its kubelet starts it again. The one container modelled is the
  static pod kube-apiserver's, whose pod kubelet names `kube-apiserver-<hostname>`
  (pkg/kubelet/config/common.go, generatePodName, lowercase), running when
  --kube-apiserver-pid-file names a live process (a test's real API server, which the test
  starts again as kubelet would). Other namespaces or drivers are refused as not modelled.
- a configured node answers `Version` with --talos-version (v1.13.9 by default), and the calls
  `talosctl upgrade --wait` makes (ImageService.Pull, LifecycleService.Upgrade, Reboot, Events,
  Read of the boot id), rebooting (etcd stopped and started again on its data, a new boot id)
  and answering with the installer's version after: talos_upgrade.py, which cites each; the
  kubeconfig its drain fetches (with --admin-kubeconfig): talos_drain.py; and COSI's State
  (Get, List) of the resource definitions, the node's Nodename and its running etcd service:
  talos_cosi.py, which cites each.

- a configured node routes a call naming nodes (talosctl's `--nodes`) as apid does: forwarded
  to their API, even its own, one-to-one or one-to-many: talos_apid.py, which cites each.

Listens on --address (127.0.0.1 by default: several nodes take addresses of their own in
127.0.0.0/8) at --port (0: one the system picks). Writes the port it listens on to --port-file,
each config it took to --record-dir/applied-N.yaml and each call to --record-dir/calls.jsonl.
Stops by itself after --lifetime seconds, and its etcd with it.
"""
import argparse
import importlib
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

import talos_apid
import talos_cosi
import talos_drain
import talos_etcd
import talos_upgrade


def compile_protos(api_dir, out_dir):
    import grpc_tools

    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = ["machine/machine.proto", "common/common.proto", "google/rpc/status.proto"]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{api_dir}", f"-I{api_dir}/vendor",
         f"-I{well_known}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"] + files,
        check=True, cwd=api_dir)
    # No __init__.py: `google` must stay a namespace package shared with protobuf's own.
    sys.path.insert(0, out_dir)
    return (importlib.import_module("machine.machine_pb2"),
            importlib.import_module("machine.machine_pb2_grpc"))


def running_pid(pid_file):
    """The pid written in `pid_file` when that process is alive, else None."""
    try:
        pid = int(open(pid_file).read().strip())
        os.kill(pid, 0)
        return pid
    except (TypeError, OSError, ValueError):
        return None


def validation_error(talosctl, data):
    """Talos's refusal of a config on a metal node (loading it, then its Validate), or None."""
    with tempfile.NamedTemporaryFile(suffix=".yaml") as config:
        config.write(data)
        config.flush()
        check = subprocess.run([talosctl, "validate", "--config", config.name, "--mode", "metal"],
                               capture_output=True, text=True, timeout=30)
    if check.returncode == 0:
        return None
    return check.stderr.strip() or f"talosctl validate exited with {check.returncode}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-dir", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--client-ca", required=True)
    parser.add_argument("--configured-cert")
    parser.add_argument("--configured-key")
    parser.add_argument("--swap-cert")
    parser.add_argument("--swap-key")
    parser.add_argument("--listen-after", type=float, default=0)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record-dir", required=True)
    parser.add_argument("--start", choices=["maintenance", "configured"], default="maintenance")
    parser.add_argument("--talos", choices=["v1.13", "v1.11"], default="v1.13")
    parser.add_argument("--lifetime", type=float, default=120)
    parser.add_argument("--talosctl", required=True,
                        help="the real talosctl, whose validate checks each config received")
    parser.add_argument("--talos-version", default="v1.13.9",
                        help="the Talos version the node runs (Version's tag) until an upgrade")
    parser.add_argument("--route", action="append", default=[],
                        help="ADDRESS=LOOPBACK: the test's network takes ADDRESS to LOOPBACK")
    parser.add_argument("--kube-apiserver-pid-file",
                        help="the pid of the process playing this node's kube-apiserver")
    talos_etcd.add_arguments(parser)
    talos_drain.add_arguments(parser)
    args = parser.parse_args()

    pb, pb_grpc = compile_protos(args.api_dir, tempfile.mkdtemp(prefix="talos-api-"))
    Mode = pb.ApplyConfigurationRequest
    swap = bool(args.swap_cert)
    state = {"maintenance": args.start == "maintenance", "applied": 0, "versions": 0}
    leave = threading.Event()

    def record(call):
        # `at`: the wall clock, so that a test can order the calls of several nodes.
        with open(os.path.join(args.record_dir, "calls.jsonl"), "a") as f:
            f.write(json.dumps({**call, "at": time.time()}) + "\n")

    common_pb = importlib.import_module("common.common_pb2")
    node_etcd = talos_etcd.NodeEtcd(args, pb, common_pb, record)
    etcd_calls = talos_etcd.servicer_methods(node_etcd, lambda: state["maintenance"])
    node_upgrade = talos_upgrade.NodeUpgrade(args.talos_version, record, pb, args.reboot_seconds,
                                             node_etcd)
    node_drain = talos_drain.NodeDrain(
        args, common_pb, record,
        lambda context, api: node_etcd.check_controlplane(context, api, state["maintenance"]))
    node_cosi = talos_cosi.NodeCosi(
        record, talos_drain.nodename_from_hostname(args.hostname),
        lambda: node_etcd.etcd_state()[0] == "Running")

    class Machine(pb_grpc.MachineServiceServicer):
        def Version(self, request, context):
            state["versions"] += 1
            record({"rpc": "Version", "maintenance": state["maintenance"]})
            if state["maintenance"] and args.talos == "v1.11":
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              "API is not implemented in maintenance mode")
            return pb.VersionResponse(messages=[pb.Version(
                version=pb.VersionInfo(tag=node_upgrade.version, os="linux", arch="amd64"),
                platform=pb.PlatformInfo(name="metal", mode="metal"))])

        def Reboot(self, request, context):
            return node_upgrade.reboot()

        # Maintenance mode's service has none of these three: Unimplemented, the default's.
        def Events(self, request, context):
            if state["maintenance"]:
                return super().Events(request, context)
            return node_upgrade.watch(request, context)

        def Read(self, request, context):
            if state["maintenance"]:
                return super().Read(request, context)
            return node_upgrade.read(common_pb, request, context)

        def Kubeconfig(self, request, context):
            if state["maintenance"]:
                return super().Kubeconfig(request, context)
            return node_drain.kubeconfig(request, context)

        def Restart(self, request, context):
            record({"rpc": "Restart", "namespace": request.namespace, "id": request.id,
                    "driver": request.driver})
            if request.namespace != "k8s.io" or request.driver != 1:  # common.ContainerDriver.CRI
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              "the stand-in models only Kubernetes containers (restart -k)")
            apiserver = f"kube-system/kube-apiserver-{args.hostname.lower()}:kube-apiserver"
            pid = running_pid(args.kube_apiserver_pid_file)
            if request.id != apiserver or pid is None:
                context.abort(grpc.StatusCode.UNKNOWN, f'container "{request.id}" not found')
            os.kill(pid, signal.SIGTERM)
            return pb.RestartResponse(messages=[pb.Restart()])

        def ApplyConfiguration(self, request, context):
            mode = Mode.Mode.Name(request.mode) if request.mode in Mode.Mode.values() else request.mode
            record({"rpc": "ApplyConfiguration", "mode": mode, "dry_run": request.dry_run,
                    "bytes": len(request.data)})
            if args.talos == "v1.11" and request.mode not in (Mode.AUTO, Mode.TRY, Mode.REBOOT):
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              f"apply configuration in {mode} mode is not supported in maintenance mode")
            refusal = validation_error(args.talosctl, request.data)
            if refusal is not None:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
            if request.mode in (Mode.REBOOT, Mode.AUTO, Mode.NO_REBOOT):
                chosen, details = Mode.NO_REBOOT, "Applied configuration without a reboot"
            elif request.mode == Mode.TRY:
                chosen, details = Mode.TRY, "Applied configuration without a reboot"
            elif request.mode == Mode.STAGED:
                chosen, details = Mode.STAGED, "Staged configuration to be applied after the next reboot"
            else:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"incorrect mode '{mode}' specified for the apply config call")
            if request.dry_run:
                return pb.ApplyConfigurationResponse(messages=[pb.ApplyConfiguration(
                    mode=chosen, mode_details="Dry run summary:\n" + details + " (skipped in dry-run).")])
            state["applied"] += 1
            with open(os.path.join(args.record_dir, f"applied-{state['applied']}.yaml"), "wb") as f:
                f.write(request.data)
            leave.set()
            return pb.ApplyConfigurationResponse(messages=[pb.ApplyConfiguration(
                mode=chosen, mode_details=details)])

    for name, method in etcd_calls.items():
        setattr(Machine, name, method)

    # gRPC itself runs without TLS on an inner loopback port; TLS is the front's (OpenSSL, through
    # Python's ssl module), as Talos's apid is Go's crypto/tls: both take Ed25519 client
    # certificates (talosctl's admin certificate is one), which gRPC's own BoringSSL refuses by
    # default.
    # A worker a call: the event streams talosctl's wait keeps open hold one each, two when
    # forwarded to this node itself (apid's routing: talos_apid.py).
    router = talos_apid.Router(args.address, args.configured_cert or args.cert,
                               args.configured_key or args.key, args.client_ca,
                               lambda: state["maintenance"], record,
                               [route.split("=", 1) for route in args.route])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), interceptors=[router])
    pb_grpc.add_MachineServiceServicer_to_server(Machine(), server)
    server.add_generic_rpc_handlers(node_upgrade.handlers())
    server.add_generic_rpc_handlers(node_cosi.handlers())
    inner = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def context(mutual):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_alpn_protocols(["h2"])
        if mutual:
            ctx.load_cert_chain(args.configured_cert or args.cert, args.configured_key or args.key)
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.client_ca)
        elif swap and state["versions"] > 0:
            ctx.load_cert_chain(args.swap_cert, args.swap_key)
        else:
            ctx.load_cert_chain(args.cert, args.key)
        return ctx

    def relay(tls, backend):
        # One thread drives both directions: OpenSSL forbids using one SSL object from two
        # threads at once (reads and writes interleaved from two threads fail at random under
        # load). No idle timeout once the handshake is done: a config's validation by talosctl
        # may take seconds on a loaded machine while the client waits in silence; --lifetime
        # bounds the whole process.
        tls.settimeout(None)
        try:
            while True:
                # A reboot cuts the connections already open, as a real one does.
                readable, _, _ = select.select([tls, backend], [], [], 0.1)
                if node_etcd.rebooting():
                    break
                if tls in readable or tls.pending():
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    backend.sendall(chunk)
                    while tls.pending():
                        backend.sendall(tls.recv(65536))
                if backend in readable:
                    chunk = backend.recv(65536)
                    if not chunk:
                        break
                    tls.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (tls, backend):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()

    def connection(raw):
        # A node rebooting (after a reset or an upgrade) takes no connection until it is back.
        if node_etcd.rebooting():
            raw.close()
            return
        # Each handshake sees the node as it is now: maintenance (and which certificate) or not.
        try:
            tls = context(not state["maintenance"]).wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        relay(tls, socket.create_connection(("127.0.0.1", inner)))

    # The port is chosen now and written at once; the API may listen on it later.
    front = socket.socket()
    front.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    front.bind((args.address, args.port))
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(front.getsockname()[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    router.listening(front.getsockname()[1])
    time.sleep(args.listen_after)
    front.listen(16)
    front.settimeout(0.1)

    deadline = time.monotonic() + args.lifetime
    while time.monotonic() < deadline:
        try:
            raw, _ = front.accept()
        except socket.timeout:
            raw = None
        if raw is not None:
            raw.settimeout(10)  # bounds the handshake only
            threading.Thread(target=connection, args=(raw,), daemon=True).start()
        if leave.is_set() and state["maintenance"]:
            # Leave maintenance mode: from the next handshake on, mutual TLS.
            time.sleep(0.2)  # let the answer reach the client first
            state["maintenance"] = False
            leave.clear()
    server.stop(grace=0)
    node_etcd.stop()


if __name__ == "__main__":
    main()
