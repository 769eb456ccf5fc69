#!/usr/bin/env python3
"""A Kubernetes API stand-in for kubectl, on loopback, for the edge pipeline's tests.

Contract checked (Kubernetes API conventions, as kubectl uses them):
- discovery: GET /api, /apis, /api/v1, /apis/<group>/<version> (legacy discovery documents);
- server-side apply: PATCH .../<resource>/<name> with Content-Type application/apply-patch+yaml
  and a fieldManager query parameter; anything else is refused with 415/422, as the API server
  does; the applied fields are merged into the stored object (maps merge, lists replace) and
  fields the manager did not send are kept, which is what server-side apply guarantees for fields
  owned by another manager;
- list with labelSelector (what kubectl's prune reads), get, create (POST), delete.
Every request is appended as one JSON line to the log file given as the second argument.

Usage: kube_api.py PORT_FILE LOG_FILE  (listens on 127.0.0.1, an ephemeral port written to PORT_FILE)
"""
import json
import sys
import time
import urllib.parse
import uuid
import yaml  # PyYAML: apply patches arrive as YAML or JSON

import loopback  # tests/stand-ins/loopback.py, beside this script

RESOURCES = {
    # (group, version): [(kind, plural, namespaced)]
    ("", "v1"): [("Namespace", "namespaces", False), ("ConfigMap", "configmaps", True),
                 ("Service", "services", True), ("ServiceAccount", "serviceaccounts", True),
                 ("Secret", "secrets", True)],
    ("apps", "v1"): [("Deployment", "deployments", True)],
    ("batch", "v1"): [("CronJob", "cronjobs", True), ("Job", "jobs", True)],
    ("rbac.authorization.k8s.io", "v1"): [("Role", "roles", True), ("RoleBinding", "rolebindings", True)],
    ("gateway.networking.k8s.io", "v1"): [("GatewayClass", "gatewayclasses", False),
                                          ("Gateway", "gateways", True), ("HTTPRoute", "httproutes", True)],
    ("cert-manager.io", "v1"): [("ClusterIssuer", "clusterissuers", False)],
    ("extensions.istio.io", "v1alpha1"): [("WasmPlugin", "wasmplugins", True)],
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STORE = {}  # (group, version, plural, namespace, name) -> object
LOG = None


def merge(stored, applied):
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(stored.get(key), dict):
            merge(stored[key], value)
        else:
            stored[key] = value
    return stored


def parse_path(path):
    """Returns (group, version, plural, namespace, name); name is None for a collection."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 2:
        return None
    return group, version, rest[0], namespace, (rest[1] if len(rest) == 2 else None)


def kind_of(group, version, plural):
    for kind, p, namespaced in RESOURCES.get((group, version), []):
        if p == plural:
            return kind, namespaced
    return None, None


class Handler(loopback.Handler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": reason, "message": message, "code": code})

    def record(self, body=None):
        url = urllib.parse.urlsplit(self.path)
        entry = {"method": self.command, "path": url.path,
                 "query": dict(urllib.parse.parse_qsl(url.query)),
                 "content_type": self.headers.get("Content-Type")}
        if body is not None:
            entry["body"] = body
        with open(LOG, "a") as log:
            log.write(json.dumps(entry) + "\n")
        return url

    def discovery(self, path):
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = []
            for (group, version) in RESOURCES:
                if group:
                    gv = {"groupVersion": f"{group}/{version}", "version": version}
                    groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        if (group, version) not in RESOURCES:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [{"name": p, "singularName": k.lower(), "namespaced": n, "kind": k,
                               "verbs": VERBS} for k, p, n in RESOURCES[(group, version)]]}

    def openapi(self, path):
        """Just enough OpenAPI v3 for kubectl to see that every kind's PATCH accepts
        fieldValidation, so it leaves strict validation to this server instead of needing the
        full schemas (kubectl's QueryParamVerifierV3)."""
        def gv_path(group, version):
            return f"apis/{group}/{version}" if group else f"api/{version}"
        if path == "/openapi/v3":
            return {"paths": {gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{gv_path(g, v)}?hash=1"}
                              for (g, v) in RESOURCES}}
        for (group, version), kinds in RESOURCES.items():
            if path == f"/openapi/v3/{gv_path(group, version)}":
                paths = {}
                for kind, plural, _ in kinds:
                    paths[f"/{gv_path(group, version)}/{plural}/{{name}}"] = {"patch": {
                        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
                        "parameters": [{"name": "fieldManager", "in": "query"},
                                       {"name": "fieldValidation", "in": "query"},
                                       {"name": "force", "in": "query"}],
                        "responses": {}}}
                return {"openapi": "3.0.0", "info": {"title": "stand-in", "version": version}, "paths": paths}
        return None

    def do_GET(self):
        url = self.record()
        doc = self.discovery(url.path) if not url.path.startswith("/openapi/") else self.openapi(url.path)
        if doc is not None:
            return self.reply(200, doc)
        parsed = parse_path(url.path)
        if not parsed:
            return self.status(404, "NotFound", f"no such path {url.path}")
        group, version, plural, namespace, name = parsed
        kind, _ = kind_of(group, version, plural)
        if kind is None:
            return self.status(404, "NotFound", f"no resource {plural} in {group}/{version}")
        if name:
            obj = STORE.get((group, version, plural, namespace, name))
            if obj is None:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            return self.reply(200, obj)
        selector = dict(urllib.parse.parse_qsl(url.query)).get("labelSelector", "")
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        items = [o for (g, v, p, ns, _), o in sorted(STORE.items(), key=lambda kv: str(kv[0]))
                 if (g, v, p) == (group, version, plural) and (namespace is None or ns == namespace)
                 and all(o.get("metadata", {}).get("labels", {}).get(k) == val for k, val in wanted.items())]
        api_version = f"{group}/{version}" if group else version
        return self.reply(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                "metadata": {"resourceVersion": "1"}, "items": items})

    def read_body(self):
        return self.body_bytes().decode()

    def do_POST(self):
        text = self.read_body()
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            self.record(None)
            return self.status(415, "UnsupportedMediaType", "this stand-in speaks JSON only")
        body = json.loads(text) if text else None
        url = self.record(body)
        parsed = parse_path(url.path)
        if not parsed or parsed[4] is not None or body is None:
            return self.status(404, "NotFound", f"no such path {url.path}")
        group, version, plural, namespace, _ = parsed
        kind, _ = kind_of(group, version, plural)
        name = body.get("metadata", {}).get("name")
        key = (group, version, plural, namespace, name)
        if key in STORE:
            return self.status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        body.setdefault("metadata", {})["uid"] = str(uuid.uuid4())
        if "dryRun" not in dict(urllib.parse.parse_qsl(url.query)):
            STORE[key] = body
        return self.reply(201, body)

    def do_PATCH(self):
        text = self.read_body()
        content_type = self.headers.get("Content-Type", "")
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as err:
            self.record(text)
            return self.status(400, "BadRequest", f"cannot decode the patch: {err}")
        self.record(body)
        # kubectl rollout restart sends a strategic merge patch of the pod template's annotations;
        # for such a patch (maps only) a recursive merge is what the API server does.
        strategic = content_type == "application/strategic-merge-patch+json"
        if content_type != "application/apply-patch+yaml" and not strategic:
            return self.status(415, "UnsupportedMediaType", f"only server-side apply here, got {content_type}")
        if not strategic and not query.get("fieldManager"):
            return self.status(422, "Invalid", "fieldManager is required for apply patch")
        parsed = parse_path(url.path)
        if not parsed:
            return self.status(404, "NotFound", f"no such path {url.path}")
        group, version, plural, namespace, name = parsed
        kind, _ = kind_of(group, version, plural)
        key = (group, version, plural, namespace, name)
        if strategic:
            if key not in STORE:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            if "dryRun" not in query:
                merge(STORE[key], body)
            return self.reply(200, STORE[key])
        if kind is None or body.get("kind") != kind or body.get("metadata", {}).get("name") != name:
            return self.status(400, "BadRequest", f"body does not match {url.path}")
        stored = json.loads(json.dumps(STORE.get(key, {})))
        merged = merge(stored, body)
        # The server owns uid: kubectl's prune tells applied objects from stale ones by it.
        merged["metadata"].setdefault("uid", str(uuid.uuid4()))
        merged.setdefault("metadata", {})["namespace"] = namespace
        if namespace is None:
            merged["metadata"].pop("namespace")
        if "dryRun" not in query:
            STORE[key] = merged
        return self.reply(200, merged)

    def do_DELETE(self):
        text = self.read_body()
        options = json.loads(text) if text else {}  # DeleteOptions: dryRun travels here
        url = self.record(options or None)
        parsed = parse_path(url.path)
        if not parsed:
            return self.status(404, "NotFound", f"no such path {url.path}")
        group, version, plural, namespace, name = parsed
        key = (group, version, plural, namespace, name)
        dry_run = "dryRun" in dict(urllib.parse.parse_qsl(url.query)) or options.get("dryRun")
        obj = STORE.get(key) if dry_run else STORE.pop(key, None)
        if obj is None:
            return self.status(404, "NotFound", f'{plural} "{name}" not found')
        return self.reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


def main():
    global LOG
    port_file, LOG = sys.argv[1], sys.argv[2]
    server = loopback.listen(Handler, port_file)
    deadline = time.time() + 300  # never outlive a test run by more than 5 minutes
    server.timeout = 1
    while time.time() < deadline:
        server.handle_request()


if __name__ == "__main__":
    main()
