"""What the stand-ins share: a quiet HTTP/1.1 request handler, and a loopback server that
announces its port.

The tests (testkit::standin) start a stand-in with a port file and wait for it: the port is
written to PORT_FILE.tmp and renamed, so a reader never sees a partial number.
"""

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as the clients under test use it.
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass  # stderr belongs to the test

    def body_bytes(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""


def listen(handler, port_file):
    """A threaded server for `handler` on 127.0.0.1 (an ephemeral port), its port written to
    `port_file`; the caller serves."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, port_file)
    return server
