#!/usr/bin/env python3
"""A Kubernetes API stand-in for kubectl, on loopback, for the edge pipeline's tests.

Contract checked (Kubernetes API conventions, as kubectl uses them):
- discovery: GET /api, /apis, /api/v1, /apis/<group>/<version> (legacy discovery documents);
- server-side apply: PATCH .../<resource>/<name> with Content-Type application/apply-patch+yaml
  and a fieldManager query parameter; anything else is refused with 415/422, as the API server
  does. Field ownership follows k8s.io/apimachinery's structured-merge-diff as the API server
  runs it, recorded in metadata.managedFields (FieldsV1):
  * an apply by manager M owns exactly the fields M sent (operation Apply); fields M owned before
    and no longer sends are removed from the object unless another manager owns them;
  * a field owned by another manager (through create, update, patch or its own apply) conflicts
    when M applies a different value: 409 Conflict, "Apply failed with N conflict(s): conflict
    with "<manager>" using <apiVersion>: <field>", nothing changed, unless force=true, which takes
    the field over; the same value is not a conflict: the field becomes co-owned;
  * create (POST), merge and strategic merge patches are updates: their manager (fieldManager,
    else the User-Agent's program name, as the API server derives it) takes every field it changed
    from the others;
  * maps merge key by key; every list is owned and replaced as a whole (atomic). The API server
    merges lists of listType=map by key, which none of the objects two managers write here holds;
  * apiVersion, kind, metadata.name/namespace/uid/resourceVersion/generation/creationTimestamp/
    managedFields are never owned; status is reached only through the /status subresource;
  * metadata.generation starts at 1 and grows with every change outside metadata and status;
- list with labelSelector (what kubectl's prune reads), get, create (POST), delete.
Every request is appended as one JSON line to the log file given as the second argument.

Usage: kube_api.py PORT_FILE LOG_FILE  (listens on 127.0.0.1, an ephemeral port written to PORT_FILE)
"""
import copy
import json
import sys
import time
import urllib.parse
import uuid
import yaml  # PyYAML: apply patches arrive as YAML or JSON

import loopback  # loopback.py, beside this script

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
    ("cilium.io", "v2"): [("CiliumNetworkPolicy", "ciliumnetworkpolicies", True)],
    ("admissionregistration.k8s.io", "v1"): [
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
        ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", False)],
}
# Kinds whose status is a subresource: writes to the main resource never change it.
WITH_STATUS = {"Namespace", "Service", "Deployment", "CronJob", "Job", "GatewayClass", "Gateway",
               "HTTPRoute", "ClusterIssuer", "ValidatingAdmissionPolicy", "CiliumNetworkPolicy"}
# Never owned by a manager (the API server strips them before computing field sets).
IGNORED = {("apiVersion",), ("kind",), ("status",)} | {("metadata", f) for f in (
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")}
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


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: null deletes, maps merge, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    target = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


def leaves(obj, prefix=()):
    """The owned fields of an object: the path of every scalar, list (atomic) or empty map."""
    out = set()
    for key, value in obj.items():
        path = prefix + (key,)
        if path in IGNORED or path[:1] == ("status",):
            continue
        if isinstance(value, dict) and value:
            out |= leaves(value, path)
        else:
            out.add(path)
    return out


def lookup(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return KeyError
        obj = obj[key]
    return obj


def remove(obj, path):
    """Deletes a field and the maps it leaves empty."""
    parents = []
    for key in path[:-1]:
        if not isinstance(obj, dict) or key not in obj:
            return
        parents.append((obj, key))
        obj = obj[key]
    if isinstance(obj, dict):
        obj.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key] == {}:
            del parent[key]


def to_fields_v1(paths):
    tree = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def from_fields_v1(tree, prefix=()):
    out = set()
    for key, child in tree.items():
        if key == ".":
            continue
        path = prefix + (key[2:],)
        if child and set(child) != {"."}:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


def managers_of(obj):
    """[(manager, operation, apiVersion, set of paths)] from metadata.managedFields."""
    return [(e["manager"], e["operation"], e.get("apiVersion", ""), from_fields_v1(e.get("fieldsV1", {})))
            for e in obj.get("metadata", {}).get("managedFields", []) if not e.get("subresource")]


def set_managers(obj, managers, kept_subresource_entries):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries = [{"manager": m, "operation": op, "apiVersion": api, "time": now, "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(paths)} for m, op, api, paths in managers if paths]
    obj.setdefault("metadata", {})["managedFields"] = entries + kept_subresource_entries


def subresource_entries(obj):
    return [e for e in obj.get("metadata", {}).get("managedFields", []) if e.get("subresource")]


def field_name(path):
    return "".join(f".{key}" for key in path)


def server_apply(live, config, manager, api_version, force):
    """Structured-merge-diff's apply: returns (new object, conflicts [(manager, apiVersion, path)])."""
    applied = leaves(config)
    managers = managers_of(live) if live else []
    conflicts = []
    for other, op, api, owned in managers:
        if other == manager:
            continue  # its own entries: what it applied or updated before
        for path in sorted(applied & owned):
            if lookup(live, path) != lookup(config, path):
                conflicts.append((other, api, path))
    if conflicts and not force:
        return None, conflicts
    merged = merge(copy.deepcopy(live) if live else {}, copy.deepcopy(config))
    previous = set()
    kept = []
    taken = {path for _, _, path in conflicts}
    for other, op, api, owned in managers:
        if other == manager and op == "Apply":
            previous = owned
            continue
        if other == manager:
            owned = owned - applied  # its updates of these fields are now its apply
        kept.append((other, op, api, owned - taken))
    still_owned = set().union(*(owned for _, _, _, owned in kept)) if kept else set()
    for path in previous - applied - still_owned:
        remove(merged, path)
    kept.append((manager, "Apply", api_version, applied))
    set_managers(merged, kept, subresource_entries(live) if live else [])
    return merged, []


def server_update(live, new, manager, api_version):
    """An update (create, merge or strategic patch): the manager takes what it changed."""
    before = leaves(live) if live else set()
    after = leaves(new)
    changed = {p for p in after if lookup(live or {}, p) != lookup(new, p)}
    gone = before - after
    managers = [(m, op, api, owned - changed - gone)
                for m, op, api, owned in (managers_of(live) if live else [])]
    for i, (m, op, api, owned) in enumerate(managers):
        if m == manager and op == "Update":
            managers[i] = (m, op, api_version, owned | changed)
            break
    else:
        managers.append((manager, "Update", api_version, changed))
    set_managers(new, managers, subresource_entries(live) if live else [])
    return new


def set_generation(live, new):
    """metadata.generation: 1 at create, +1 on every change outside metadata and status, as the
    API server counts it for the kinds here (controllers report the generation they saw in
    status.conditions[].observedGeneration)."""
    def content(obj):
        return {k: v for k, v in (obj or {}).items() if k not in ("metadata", "status")}
    generation = (live or {}).get("metadata", {}).get("generation", 0)
    if live is None or content(live) != content(new):
        generation += 1
    new["metadata"]["generation"] = generation


def conflict_status(conflicts):
    causes = [{"type": "FieldManagerConflict", "message": f'conflict with "{m}" using {api}',
               "field": field_name(path)} for m, api, path in conflicts]
    lines = [f'conflict with "{m}" using {api}: {field_name(path)}' for m, api, path in conflicts]
    n = len(conflicts)
    if n == 1:
        message = f"Apply failed with 1 conflict: {lines[0]}"
    else:
        message = f"Apply failed with {n} conflicts: " + "\n".join(lines)
    return message, causes


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
    if not rest or len(rest) > 3 or (len(rest) == 3 and rest[2] != "status"):
        return None
    return group, version, rest[0], namespace, (rest[1] if len(rest) >= 2 else None)


def manager_of(query, headers):
    """The fieldManager parameter, else the User-Agent's program name, as the API server does."""
    if query.get("fieldManager"):
        return query["fieldManager"]
    return (headers.get("User-Agent") or "unknown").split("/")[0][:128]


def api_version_of(group, version):
    return f"{group}/{version}" if group else version


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
                               "verbs": VERBS} for k, p, n in RESOURCES[(group, version)]]
                + [{"name": f"{p}/status", "singularName": "", "namespaced": n, "kind": k,
                    "verbs": ["get", "patch", "update"]}
                   for k, p, n in RESOURCES[(group, version)] if k in WITH_STATUS]}

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
        query = dict(urllib.parse.parse_qsl(url.query))
        if kind in WITH_STATUS:
            body.pop("status", None)  # status is the subresource's
        body.setdefault("metadata", {}).pop("managedFields", None)
        created = server_update(None, body, manager_of(query, self.headers), api_version_of(group, version))
        created["metadata"]["uid"] = str(uuid.uuid4())
        set_generation(None, created)
        if namespace is not None:
            created["metadata"]["namespace"] = namespace
        if "dryRun" not in query:
            STORE[key] = created
        return self.reply(201, created)

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
        merge_type = content_type == "application/merge-patch+json"
        if content_type != "application/apply-patch+yaml" and not strategic and not merge_type:
            return self.status(415, "UnsupportedMediaType", f"only server-side apply here, got {content_type}")
        if content_type == "application/apply-patch+yaml" and not query.get("fieldManager"):
            return self.status(422, "Invalid", "fieldManager is required for apply patch")
        parsed = parse_path(url.path)
        if not parsed or parsed[4] is None:
            return self.status(404, "NotFound", f"no such path {url.path}")
        group, version, plural, namespace, name = parsed
        kind, _ = kind_of(group, version, plural)
        key = (group, version, plural, namespace, name)
        api_version = api_version_of(group, version)
        manager = manager_of(query, self.headers)
        status_only = url.path.rstrip("/").endswith("/status")
        if status_only and kind not in WITH_STATUS:
            return self.status(404, "NotFound", f"{plural} has no status subresource")
        if strategic or merge_type or status_only:
            if key not in STORE:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            live = STORE[key]
            if status_only:
                # Only status moves through the subresource; its writer is recorded apart.
                updated = copy.deepcopy(live)
                patched = merge_patch({"status": live.get("status", {})}, {"status": body.get("status", {})})
                updated["status"] = patched.get("status", {})
                entries = [e for e in updated["metadata"].get("managedFields", [])
                           if not (e.get("subresource") == "status" and e["manager"] == manager)]
                entries.append({"manager": manager, "operation": "Update", "apiVersion": api_version,
                                "subresource": "status", "fieldsType": "FieldsV1",
                                "fieldsV1": to_fields_v1({("status", k) for k in updated["status"]})})
                updated["metadata"]["managedFields"] = entries
            else:
                new = merge(copy.deepcopy(live), body) if strategic else merge_patch(live, body)
                if kind in WITH_STATUS:
                    new["status"] = copy.deepcopy(live.get("status"))
                    if new["status"] is None:
                        new.pop("status")
                updated = server_update(live, new, manager, api_version)
                set_generation(live, updated)
            if "dryRun" not in query:
                STORE[key] = updated
            return self.reply(200, updated)
        if kind is None or body.get("kind") != kind or body.get("metadata", {}).get("name") != name:
            return self.status(400, "BadRequest", f"body does not match {url.path}")
        live = STORE.get(key)
        config = copy.deepcopy(body)
        config.pop("status", None)
        config.get("metadata", {}).pop("managedFields", None)
        merged, conflicts = server_apply(live, config, manager, api_version, query.get("force") == "true")
        if conflicts:
            message, causes = conflict_status(conflicts)
            return self.reply(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "message": message, "reason": "Conflict",
                                    "details": {"causes": causes}, "code": 409})
        # The server owns uid: kubectl's prune tells applied objects from stale ones by it.
        merged["metadata"]["uid"] = (live or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
        set_generation(live, merged)
        if live is not None and "status" in live:
            merged["status"] = copy.deepcopy(live["status"])
        merged["metadata"]["namespace"] = namespace
        if namespace is None:
            merged["metadata"].pop("namespace")
        if "dryRun" not in query:
            STORE[key] = merged
        return self.reply(201 if live is None else 200, merged)

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
