"""apid's routing on a configured node: a call naming other nodes is forwarded to theirs.

As Talos v1.13.9 routes a call (internal/app/apid/pkg/director/director.go, D below, and
internal/app/apid/pkg/backend/apid.go, B below):

- a call carrying `proxyfrom` (one apid forwarding to another) is answered here (D:62-64); so is
  a call naming no node (D:102-104): talosctl's drain fetches the kubeconfig from its endpoint
  this way (cmd/talosctl/cmd/talos/drain.go:34-37), which only a control plane serves;
- `node` must be single-valued, else InvalidArgument "node metadata must be single-valued"
  (D:69-71); one node: one-to-one (D:100-101, 109-120), the answer and any error passed back as
  they are;
- `nodes` (talosctl's `--nodes` on most commands) wins over `node` (D:86-98): one-to-many,
  only for the services of D:88-95, others InvalidArgument "one-2-many proxying is not supported
  for method <method>". Each node's answer gets `common.Metadata{hostname}` appended to each
  reply (B:172-222: a unary response's field 1, each message of a stream); a node's error
  becomes a reply carrying `hostname`, `error` (Go's text of the status) and `status`
  (B:238-257): the call itself succeeds;
- apid forwards even to its own address (the remote backend factory is set on every node, so
  D:75-84 does not apply): to the target's apid at the same port (Talos's 50000 everywhere,
  B:107), over mutual TLS with the node's own certificate, the metadata copied but `:authority`,
  `node` and `nodes`, with `proxyfrom` set to the authority the caller used (B:71-86). Its
  connection backs off at most 15 s after a failure (B:101-104).

A test's network may route an address to another (`--route`): the call goes where the address
leads, and the certificate is checked against the address it reaches.

What is not modelled: roles (authz), which this stand-in does not check, and one-to-many over
several nodes at once (forwarded one node after the other, where apid runs them in parallel).
"""
import threading

import grpc

# D:88-95: the services one-to-many proxying takes.
ONE_TO_MANY = ("/machine.MachineService/", "/cluster.ClusterService/",
               "/inspect.InspectService/", "/storage.StorageService/", "/time.TimeService/")
# Metadata gRPC sets itself on a call; never copied onto the forwarded one.
OWN_KEYS = ("user-agent", "te", "content-type", "grpc-accept-encoding", "grpc-encoding",
            "grpc-timeout")


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data, at):
    value, shift = 0, 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def length_delimited(number, payload):
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def go_code(code):
    """A gRPC status code as Go's codes.Code.String() spells it."""
    if code == grpc.StatusCode.OK:
        return "OK"
    if code == grpc.StatusCode.CANCELLED:
        return "Canceled"
    return "".join(word.capitalize() for word in code.name.split("_"))


def metadata_message(hostname, error=None):
    """`common.Empty{metadata: common.Metadata{...}}`, encoded (common.proto: Metadata hostname = 1,
    error = 2, status = 3; google.rpc.Status code = 1, message = 2)."""
    fields = length_delimited(1, hostname.encode())
    if error is not None:
        code, details = error
        text = f"rpc error: code = {go_code(code)} desc = {details}"
        status = (varint(1 << 3) + varint(code.value[0]) if code.value[0] else b"") + \
            length_delimited(2, details.encode())
        fields += length_delimited(2, text.encode()) + length_delimited(3, status)
    return length_delimited(1, fields)


def append_info(streaming, reply, hostname):
    """B:172-222."""
    payload = metadata_message(hostname)
    if streaming:
        return reply + payload
    tag, at = read_varint(reply, 0)
    _, at = read_varint(reply, at)
    if tag != (1 << 3) | 2:
        raise ValueError(f"unexpected message format: {tag}")
    rest = reply[at:]
    return varint((1 << 3) | 2) + varint(len(rest) + len(payload)) + rest + payload


class Router(grpc.ServerInterceptor):
    """apid's director on the node at `address`:`port`, forwarding with `cert`/`key` to nodes
    whose certificate `ca` issued; `maintenance()` says whether apid runs at all yet."""

    def __init__(self, address, cert, key, ca, maintenance, record, routes=()):
        self.address = address
        # Where the test's network takes an address no loopback interface has (one the API
        # server publishes, which refuses loopback addresses): `{address: loopback address}`.
        self.routes = dict(routes)
        self.port = None  # set once the front listens: listening()
        with open(cert, "rb") as c, open(key, "rb") as k, open(ca, "rb") as a:
            self.credentials = grpc.ssl_channel_credentials(
                root_certificates=a.read(), private_key=k.read(), certificate_chain=c.read())
        self.maintenance = maintenance
        self.record = record
        self.channels = {}
        self.lock = threading.Lock()

    def listening(self, port):
        self.port = port

    @property
    def authority(self):
        """The address and port a caller dials: what apid puts in `proxyfrom` (B:71-79)."""
        return f"{self.address}:{self.port}"

    def channel(self, target):
        with self.lock:
            if target not in self.channels:
                self.channels[target] = grpc.secure_channel(
                    f"{self.routes.get(target, target)}:{self.port}", self.credentials,
                    options=[("grpc.max_reconnect_backoff_ms", 15000),
                             ("grpc.initial_reconnect_backoff_ms", 1000)])
            return self.channels[target]

    def intercept_service(self, continuation, details):
        if self.maintenance():
            return continuation(details)
        metadata = {}
        for key, value in details.invocation_metadata or ():
            metadata.setdefault(key, []).append(value)
        if "proxyfrom" in metadata:
            return continuation(details)
        node, nodes = metadata.get("node"), metadata.get("nodes")
        if node is not None and len(node) != 1:
            return refusal(grpc.StatusCode.INVALID_ARGUMENT, "node metadata must be single-valued")
        if nodes is None and node is None:
            return continuation(details)
        local = continuation(details)
        streaming = local is not None and local.response_streaming
        outgoing = [(key, value) for key, values in metadata.items() for value in values
                    if key not in ("node", "nodes", ":authority") and key not in OWN_KEYS]
        outgoing.append(("proxyfrom", metadata.get(":authority", [self.authority])[0]))
        if nodes is not None:
            if not details.method.startswith(ONE_TO_MANY):
                return refusal(grpc.StatusCode.INVALID_ARGUMENT,
                               f"one-2-many proxying is not supported for method {details.method}")
            self.record({"apid": "one-to-many", "method": details.method, "nodes": nodes})
            return grpc.stream_stream_rpc_method_handler(
                lambda requests, context: self.one_to_many(
                    details.method, streaming, nodes, outgoing, requests, context))
        self.record({"apid": "one-to-one", "method": details.method, "node": node[0]})
        return grpc.stream_stream_rpc_method_handler(
            lambda requests, context: self.one_to_one(
                details.method, node[0], outgoing, requests, context))

    def call(self, method, target, outgoing, requests, context):
        # The caller's deadline, when it set one (gRPC gives an unset one as ~2^63 seconds).
        remaining = context.time_remaining()
        call = self.channel(target).stream_stream(method)(
            requests, metadata=outgoing, timeout=remaining if remaining < 1e9 else None)
        context.add_callback(call.cancel)
        return call

    def one_to_one(self, method, target, outgoing, requests, context):
        try:
            yield from self.call(method, target, outgoing, requests, context)
        except grpc.RpcError as error:
            context.abort(error.code(), error.details() or "")

    def one_to_many(self, method, streaming, targets, outgoing, requests, context):
        sent = list(requests)
        unary = b""
        for target in targets:
            try:
                for reply in self.call(method, target, outgoing, iter(sent), context):
                    if streaming:
                        yield append_info(True, reply, target)
                    else:
                        unary += append_info(False, reply, target)
            except grpc.RpcError as error:
                # B:238-257: a stream's reply is the `Empty` itself, a unary one an
                # `EmptyResponse` holding it.
                failed = metadata_message(target, (error.code(), error.details() or ""))
                if streaming:
                    yield failed
                else:
                    unary += length_delimited(1, failed)
            except ValueError as error:
                context.abort(grpc.StatusCode.INTERNAL, str(error))
        if not streaming:
            yield unary


def refusal(code, details):
    def refuse(requests, context):
        context.abort(code, details)
    return grpc.stream_stream_rpc_method_handler(refuse)
