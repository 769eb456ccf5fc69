#!/usr/bin/env python3
"""Scaleway API stand-in, on loopback, for the scw-infra tests.

Contract enforced: Scaleway's published OpenAPI specs (../shared/scaleway-openapi). Every request
is matched to a path and method of a spec; its query (declared names only, types, enums, required
ones, repeated keys only for arrays) and its JSON body (declared fields only, types, enums,
required fields, nested objects, and the specs' `x-one-of` groups: at most one member of a group
set) are checked, and a request the spec does not allow is refused with a 400 in Scaleway's
`invalid_arguments` shape and logged as refused. Every answer is itself validated against the
spec's response schema before it is sent (a stand-in bug answers 500).

Objects are shaped like the recorded traffic (../shared/scaleway-cassettes): the first recorded
Instance server, IP, security group and rule, Elastic Metal server and offer, and IAM SSH key are
the templates the stand-in fills in. The Instance API pages with X-Total-Count, the others with
total_count. Servers move through their real states, one step per look at them: Instances
stopped -> starting -> running -> stopping -> stopped (terminate: stopping, then gone), Elastic
Metal delivering -> ready -> stopping -> stopped -> starting -> ready.

Elastic Metal, as the tools order it (without `install`, so with no OS):
- no Instance image exists until one is imported or seeded: nothing is pre-seeded;
- `reboot` is refused while the server has no installed OS (`install` is null): the rescue mode
  documentation requires an installed server (docs-content
  pages/elastic-metal/how-to/use-rescue-mode.mdx, "Requirements"), and operators report that a
  server without one answers no reboot; `stop` then `start` with a `boot_type` works;
- `start` and `reboot` take `boot_type` and `ssh_key_ids`, "additional SSH public key IDs to
  configure on rescue image" (scaleway.baremetal.v1.Api.yml, StartServer and RebootServer): an
  unknown id is a 404; a boot into rescue writes the public keys of exactly those ids to
  RESCUE_DIR/authorized_keys (the only keys the rescue sshd of the tests accepts: a server with
  no OS has no registered keys of its own) and the rescue password to RESCUE_DIR/password; a
  normal boot empties both;
- each server has a rescue system of its own, as each real machine does: `--rescue-dir` may be
  given once a server, as NAME=DIR, the folder of the server ordered (or seeded) under NAME; a
  plain DIR serves every server no NAME= names. A named folder holding a file `address` (the
  loopback address its sshd listens at) gives the server ordered under NAME that public IPv4,
  in place of the next 203.0.113.N: every Elastic Metal server gets an IPv4 of its own
  (scaleway.baremetal.v1.Api.yml, Server `ips`), and a test's machine must be reachable there;
- `rescue_server` ({user, password}, the rescue system's credentials) is filled one look after
  the server is ready in rescue, not at the first `ready` answer.

An Instance's user data (SetServerUserData, a `*/*` body) is kept as the bytes sent; the log
keeps their digest and content type, the state dump (`user_data`) their digest by server and key.

An API key can read every project of its organization, and a list answers with the objects of
all of them unless it is given the project filter the spec declares ("List only Instances of this
Project ID": `project` for the Instance API, `project_id` for Elastic Metal, Block, IAM, Domain
and Registry): the stand-in applies that filter, and only when it is given, so objects seeded in
another project (`"project"` in a seed) show up in every unscoped list, as they do on Scaleway.

An Instance's `volumes` map keys its root volume, made from the image at creation, as "0" and the
volumes attached later as "1", "2"... (scaleway-cli `internal/namespaces/instance/v1/
custom_server_create.go`: `volumes["0"]` is the root volume, additional volumes `i + 1`);
`attach-volume` adds a Block volume under the next key, and `terminate` only detaches Block
volumes (ServerAction `terminate`: "deletes local volumes, only detaches sbs_volume").

The Registry v1 namespace endpoints are not in the specs: they are checked against the fields the
issue names (name, project_id, is_public, description).

Usage: scaleway_api.py --specs DIR --cassettes DIR --port-file F --log F --secret S --project P
                       [--dns-zone Z] [--rescue-dir [NAME=]DIR ... --rescue-user NAME]
Control (not Scaleway): POST /__standin/faults [{method, path (regex), kind: status|cut|slow,
status, retry_after, count, applied}], POST /__standin/seed {kind, project, ...fields},
POST /__standin/iam-refuses-duplicate-keys (IAM answers 409 to a public key the organization
already holds), POST /__standin/guest-halt {address} (the guest of the Instance with that public IPv4 powered
itself off, as `talosctl shutdown` makes Talos do: the Instance goes stopping, then `stopped in
place`, standby, still billed: "`poweroff` typed inside the guest gives standby",
scaleway/docs-content PR #5001, ../shared/reference/infra-facts.md §2 S10; from there
`poweroff` "fully stop[s] the Instance and release[s] the hypervisor slot" and `poweron`
starts it: scaleway.instance.v1.Api.yml, ServerAction), GET /__standin/state. A fault with
`applied: true` lets the request take effect and then answers the fault instead of the result,
as a gateway does that times out after the backend acted
(RFC 9110, 9.2.2: a client cannot tell whether a non-idempotent request it got no answer for was
done); without it the request is not done.
POST /__standin/interrupt {nth, marker}: the nth request that can change something (any method
but GET, counted from the stand-in's start, once the specs let it through) is served (it takes
effect, or is refused), then is never answered: the stand-in
writes "METHOD path" to the file `marker` and holds the connection (HOLD_SECONDS at most, then
closes it unanswered), so that a test kills the client right after a call that was done.

Talos reads its machine config at boot from the Instance's user data key `cloud-init` when its
disk holds none (siderolabs/talos v1.13, internal/app/machined/pkg/runtime/v1alpha1/platform/
scaleway/scaleway.go, Configuration: a missing or empty key is ErrNoConfigSource), and a node
with no config source opens maintenance mode (Talos docs, "Acquiring Machine Configuration": the
STATE partition, then the platform, then maintenance). An Instance's first `poweron` notes which
it gets: the state dump's `first_boots`, by server name, "config" or "maintenance"; later boots
read the disk.
"""

import argparse
import copy
import hashlib
import datetime
import glob
import json
import os
import re
import sys
import threading
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import loopback  # loopback.py, beside this script

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STEPS = 2  # looks before a transient state moves on
HOLD_SECONDS = 60  # how long an interrupted request holds its connection, at most

# ---- the specs --------------------------------------------------------------------------------


class Spec:
    def __init__(self, specs_dir):
        self.routes = []  # (regex, template, method, op, components)
        self.comps = {}
        for path in sorted(glob.glob(os.path.join(specs_dir, "*.yml"))):
            with open(path) as f:
                doc = yaml.load(f, Loader=LOADER)
            comps = doc.get("components", {}).get("schemas", {})
            self.comps.update(comps)
            for template, item in doc.get("paths", {}).items():
                regex = "^" + re.sub(r"\{[^}]+\}", "([^/]+)", template) + "$"
                names = re.findall(r"\{([^}]+)\}", template)
                for method, op in item.items():
                    if method in ("get", "post", "put", "patch", "delete"):
                        self.routes.append((re.compile(regex), template, names, method.upper(), op, comps))
        self.routes.extend(registry_routes())
        # Literal segments win over parameters.
        self.routes.sort(key=lambda r: r[1].count("{"))

    def match(self, method, path):
        allowed = []
        for regex, template, names, m, op, comps in self.routes:
            hit = regex.match(path)
            if hit:
                if m == method:
                    return template, dict(zip(names, hit.groups())), op, comps
                allowed.append(m)
        return None, allowed, None, None


def registry_routes():
    """Registry v1 namespaces (not in the shared specs): the fields the issue names."""
    ns = {
        "type": "object",
        "properties": {k: {"type": t} for k, t in [
            ("id", "string"), ("name", "string"), ("description", "string"),
            ("organization_id", "string"), ("project_id", "string"), ("status", "string"),
            ("status_message", "string"), ("endpoint", "string"), ("is_public", "boolean"),
            ("size", "integer"), ("created_at", "string"), ("updated_at", "string"),
            ("image_count", "integer"), ("region", "string")]},
    }
    comps = {"registry.Namespace": ns}
    region = {"in": "path", "name": "region", "required": True,
              "schema": {"type": "string", "enum": ["fr-par", "nl-ams", "pl-waw"]}}
    list_op = {
        "parameters": [region] + [
            {"in": "query", "name": n, "schema": s} for n, s in [
                ("page", {"type": "integer"}), ("page_size", {"type": "integer"}),
                ("order_by", {"type": "string"}), ("organization_id", {"type": "string"}),
                ("project_id", {"type": "string"}), ("name", {"type": "string"})]],
        "responses": {"200": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {
                "namespaces": {"type": "array", "items": {"$ref": "#/components/schemas/registry.Namespace"}},
                "total_count": {"type": "integer"}}}}}}},
    }
    create_op = {
        "parameters": [region],
        "requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "required": ["name"],
            "properties": {
                "name": {"type": "string"}, "description": {"type": "string"},
                "organization_id": {"type": "string", "x-one-of": "ProjectIdentifier"},
                "project_id": {"type": "string", "x-one-of": "ProjectIdentifier"},
                "is_public": {"type": "boolean"}}}}}},
        "responses": {"200": {"content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/registry.Namespace"}}}}},
    }
    t = "/registry/v1/regions/{region}/namespaces"
    rx = re.compile("^/registry/v1/regions/([^/]+)/namespaces$")
    return [(rx, t, ["region"], "GET", list_op, comps), (rx, t, ["region"], "POST", create_op, comps)]


def resolve(schema, comps):
    while isinstance(schema, dict) and "$ref" in schema:
        schema = comps[schema["$ref"].rsplit("/", 1)[1]]
    return schema or {}


def prune(schema, value, comps):
    """Drops what the spec does not have (the recordings hold a few fields the published specs
    have since removed, such as `bootscript`), so the answers stay spec-valid."""
    schema = resolve(schema, comps)
    if isinstance(value, dict) and (schema.get("type") == "object" or "properties" in schema):
        props = schema.get("properties", {})
        pattern = next((p for k, p in props.items() if k.startswith("<")), None)
        out = {}
        for key, item in value.items():
            sub = props.get(key) or pattern
            if sub is None and schema.get("additionalProperties"):
                out[key] = item
            elif sub is not None:
                out[key] = prune(sub, item, comps)
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        return [prune(schema.get("items", {}), v, comps) for v in value]
    return value


def validate(schema, value, where, comps, request, errors):
    schema = resolve(schema, comps)
    if value is None:
        if request and not schema.get("nullable"):
            errors.append(f"{where}: null is not allowed")
        return
    kind = schema.get("type")
    if kind == "object" or (kind is None and "properties" in schema):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected an object")
            return
        props = schema.get("properties", {})
        pattern = next((p for k, p in props.items() if k.startswith("<")), None)
        extra = schema.get("additionalProperties")
        groups = {}
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and pattern is not None:
                sub = pattern
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if extra is not True:
                    errors.append(f"{where}.{key}: not a field of this object in the spec")
                continue
            group = resolve(sub, comps).get("x-one-of") or (sub.get("x-one-of") if isinstance(sub, dict) else None)
            if group and item is not None:
                groups.setdefault(group, []).append(key)
            validate(sub, item, f"{where}.{key}", comps, request, errors)
        for group, keys in groups.items():
            if len(keys) > 1:
                errors.append(f"{where}: {', '.join(sorted(keys))} are one-of `{group}`: set one")
        if request:
            for key in schema.get("required", []):
                if key not in value:
                    errors.append(f"{where}.{key}: required")
    elif kind == "array":
        if not isinstance(value, list):
            errors.append(f"{where}: expected an array")
            return
        for i, item in enumerate(value):
            validate(schema.get("items", {}), item, f"{where}[{i}]", comps, request, errors)
    elif kind == "string":
        if not isinstance(value, str):
            errors.append(f"{where}: expected a string")
        elif "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: `{value}` is not one of {schema['enum']}")
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{where}: expected an integer")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{where}: expected a number")
    elif kind == "boolean":
        if not isinstance(value, bool):
            errors.append(f"{where}: expected a boolean")


def check_query(op, query, errors):
    params = {p["name"]: p for p in op.get("parameters", []) if p.get("in") == "query"}
    for name, values in query.items():
        p = params.get(name)
        if p is None:
            errors.append(f"query {name}: not a parameter of this operation")
            continue
        schema = p.get("schema", {})
        kind = schema.get("type")
        if kind != "array" and len(values) > 1:
            errors.append(f"query {name}: given {len(values)} times")
        item = schema.get("items", {}) if kind == "array" else schema
        for v in values:
            t = item.get("type")
            if t == "integer" and not re.fullmatch(r"-?[0-9]+", v):
                errors.append(f"query {name}: `{v}` is not an integer")
            if t == "boolean" and v not in ("true", "false"):
                errors.append(f"query {name}: `{v}` is not a boolean")
            if "enum" in item and v not in item["enum"]:
                errors.append(f"query {name}: `{v}` is not one of {item['enum']}")
    for name, p in params.items():
        if p.get("required") and name not in query:
            errors.append(f"query {name}: required")


def check_path(op, params, errors):
    for p in op.get("parameters", []):
        if p.get("in") == "path":
            enum = p.get("schema", {}).get("enum")
            if enum and params.get(p["name"]) not in enum:
                errors.append(f"path {p['name']}: `{params.get(p['name'])}` is not one of {enum}")


# ---- the templates (recorded answers) ---------------------------------------------------------


TEMPLATE_SCHEMAS = {
    "instance_server": "scaleway.instance.v1.Server", "instance_ip": "scaleway.instance.v1.Ip",
    "security_group": "scaleway.instance.v1.SecurityGroup", "rule": "scaleway.instance.v1.SecurityGroupRule",
    "task": "scaleway.instance.v1.Task", "baremetal_server": "scaleway.baremetal.v1.Server",
    "offer": "scaleway.baremetal.v1.Offer", "ssh_key": "scaleway.iam.v1alpha1.SSHKey",
    "image": "scaleway.instance.v1.Image",
}


def load_templates(cassettes_dir, spec):
    want = {
        ("POST", r"/instance/v1/zones/[^/]+/servers$", 201): ("instance_server", "server"),
        ("POST", r"/instance/v1/zones/[^/]+/ips$", 201): ("instance_ip", "ip"),
        ("POST", r"/instance/v1/zones/[^/]+/security_groups$", 201): ("security_group", "security_group"),
        ("POST", r"/instance/v1/zones/[^/]+/security_groups/[^/]+/rules$", 201): ("rule", "rule"),
        ("POST", r"/instance/v1/zones/[^/]+/servers/[^/]+/action$", 202): ("task", "task"),
        ("POST", r"/baremetal/v1/zones/[^/]+/servers$", 200): ("baremetal_server", None),
        ("GET", r"/baremetal/v1/zones/[^/]+/offers/[^/]+$", 200): ("offer", None),
        ("POST", r"/iam/v1alpha1/ssh-keys$", 200): ("ssh_key", None),
        ("GET", r"/instance/v1/zones/[^/]+/images/[^/]+$", 200): ("image", "image"),
    }
    found = {}
    files = sorted(glob.glob(os.path.join(cassettes_dir, "*", "*.cassette.yaml")), key=os.path.getsize)
    for path in files:
        if len(found) == len(want):
            break
        with open(path) as f:
            doc = yaml.load(f, Loader=LOADER)
        for i in doc.get("interactions", []):
            req, resp = i["request"], i["response"]
            p = urlsplit(req["url"]).path
            for (m, rx, code), (name, key) in want.items():
                if name in found or req["method"] != m or resp["code"] != code or not re.search(rx, p):
                    continue
                try:
                    body = json.loads(resp["body"])
                except ValueError:
                    continue
                found[name] = body[key] if key else body
    missing = set(n for n, _ in want.values()) - set(found)
    if missing:
        sys.exit(f"stand-in: no recorded template for {sorted(missing)}")
    return {name: prune({"$ref": "#/x/" + TEMPLATE_SCHEMAS[name]}, body, spec.comps) for name, body in found.items()}


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def new_id():
    return str(uuid.uuid4())


# ---- the state --------------------------------------------------------------------------------


class State:
    def __init__(self, templates, project, dns_zone, rescue_dirs=(), rescue_user="rescue"):
        self.t = templates
        self.project = project
        self.lock = threading.RLock()
        self.security_groups = {}
        self.rules = {}  # group id -> [rule]
        self.ips = {}
        self.servers = {}
        self.volumes = {}  # Block volumes
        self.images = {}
        self.bm_servers = {}
        self.offers = {}
        self.ssh_keys = {}
        self.dns_zones = {}
        self.records = {}  # zone -> [record]
        self.namespaces = {}
        self.snapshots = {}
        self.s3_root = None
        self.faults = []
        self.interrupt = None  # {nth, marker}
        self.changes = 0  # requests that can change something, so far
        self.first_boots = {}  # server name -> "config" | "maintenance"
        self.iam_refuses_duplicates = False
        self.next_ip = 10
        # server name -> its rescue folder ("" for the folder of every server not named)
        self.rescue_dirs = dict(d.split("=", 1) if "=" in d else ("", d) for d in rescue_dirs)
        self.rescue_user = rescue_user
        offer = copy.deepcopy(self.t["offer"])
        offer.update(id=new_id(), name="EM-A116X-SSD", stock="available", enable=True,
                     subscription_period="hourly", zone="fr-par-1")
        self.offers[offer["id"]] = offer
        if dns_zone:
            self.dns_zones[dns_zone] = {
                "domain": dns_zone, "subdomain": "", "ns": ["ns0.dom.scw.cloud"],
                "ns_default": ["ns0.dom.scw.cloud"], "ns_master": [], "status": "active",
                "message": None, "updated_at": now(), "project_id": project, "linked_products": []}
            self.records[dns_zone] = []

    def address(self):
        self.next_ip += 1
        return f"203.0.113.{self.next_ip}"

    def rescue_dir(self, name):
        return self.rescue_dirs.get(name) or self.rescue_dirs.get("")

    def bm_address(self, name):
        """The IPv4 of the Elastic Metal server ordered as `name`: its own rescue's address when
        its folder names one, else the next of the pool."""
        path = os.path.join(self.rescue_dirs[name], "address") if name in self.rescue_dirs else None
        if path and os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        return self.address()

    # Instance server states advance one step per look.
    def look_server(self, s):
        st = s.setdefault("_steps", 0)
        if s["state"] in ("starting", "stopping"):
            if st + 1 < STEPS:
                s["_steps"] = st + 1
                return s
            s["_steps"] = 0
            if s.get("_terminating"):
                self.remove_server(s)
                return None
            if s.pop("_halted", False):
                s.update(state="stopped in place", state_detail="stopped in place",
                         allowed_actions=["poweron", "poweroff", "backup"])
                return s
            s["state"] = "running" if s["state"] == "starting" else "stopped"
            s["state_detail"] = "booted" if s["state"] == "running" else ""
            s["allowed_actions"] = (["poweroff", "terminate", "reboot", "stop_in_place", "backup"]
                                    if s["state"] == "running" else ["poweron", "backup"])
        return s

    def remove_server(self, s):
        self.servers.pop(s["id"], None)
        for ip in self.ips.values():
            if ip["server"] and ip["server"]["id"] == s["id"]:
                ip["server"] = None
                ip["state"] = "detached"
        for v in s["volumes"].values():
            vol = self.volumes.get(v["id"])
            if vol:
                vol["status"] = "available"
                vol["references"] = []
        g = self.security_groups.get((s.get("security_group") or {}).get("id"))
        if g:
            g["servers"] = [x for x in g["servers"] if x["id"] != s["id"]]

    def bm_ipv6(self):
        """Each Elastic Metal server its own IPv6, as the recorded servers have theirs
        (scaleway-cassettes/baremetal-v1: 2001:bc8:1201:a17:b683:51ff:fe0f:60e4, ...:6d5c,
        ...:6e00, one a server, from its MAC): the first one ordered gets 2001:db8::10, the
        next ::11, and so on."""
        self.bm_ordered = getattr(self, "bm_ordered", 0) + 1
        return "2001:db8::%x" % (0xf + self.bm_ordered)

    def look_bm(self, s):
        st = s.setdefault("_steps", 0)
        nxt = {"delivering": "ready", "stopping": "stopped", "starting": "ready"}.get(s["status"])
        if nxt:
            if st + 1 < STEPS:
                s["_steps"] = st + 1
            else:
                s["_steps"] = 0
                s["status"] = nxt
        elif s["status"] == "ready" and s["boot_type"] == "rescue" and s.get("rescue_server") is None:
            # The credentials come a look after the server says it is ready in rescue.
            if s.get("_rescue_ready"):
                s["rescue_server"] = {"user": self.rescue_user, "password": s["_rescue_password"]}
            s["_rescue_ready"] = True
        return s

    def boot_bm(self, s, boot_type, ssh_key_ids):
        """A start or reboot: the rescue image gets exactly the keys named by id."""
        keys = []
        for key_id in ssh_key_ids:
            keys.append(found(self.ssh_keys, key_id, "ssh_key")["public_key"])
        s.update(status="starting", _steps=0, boot_type=boot_type, rescue_server=None, _rescue_ready=False,
                 _rescue_password=uuid.uuid4().hex if boot_type == "rescue" else None)
        rescue_dir = self.rescue_dir(s["name"])
        if rescue_dir:
            with open(os.path.join(rescue_dir, "authorized_keys"), "w") as f:
                f.write("".join(k + "\n" for k in keys) if boot_type == "rescue" else "")
            with open(os.path.join(rescue_dir, "password"), "w") as f:
                f.write(s["_rescue_password"] or "")


def public(obj):
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def has_tags(obj, tags):
    return all(t in obj.get("tags", []) for t in tags)


class Answer(Exception):
    def __init__(self, status, body, headers=None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


def not_found(resource, rid):
    return Answer(404, {"type": "not_found", "message": "resource is not found",
                        "resource": resource, "resource_id": rid})


def not_found_alphabetical(resource, rid):
    """The 404 as the stand-in's Block, IAM and user-data answers spell it: the fields of
    `not_found`, in alphabetical order."""
    return Answer(404, {"message": "resource is not found", "resource": resource,
                        "resource_id": rid, "type": "not_found"})


def found(objects, rid, resource, missing=not_found):
    """The object of id `rid`, or the 404 (`missing`) naming `resource` when there is none."""
    obj = objects.get(rid)
    if not obj:
        raise missing(resource, rid)
    return obj


def delete_unless_in_use(objects, obj):
    """A Block DELETE: refused with a 412 while something uses the volume or snapshot."""
    if obj["status"] == "in_use":
        raise Answer(412, {"message": "precondition failed", "type": "precondition_failed",
                           "precondition": "resource_still_in_use"})
    del objects[obj["id"]]
    return Answer(204, None)


def bad(message, kind="invalid_request_error"):
    return Answer(400, {"type": kind, "message": message})


def page(items, query, size_name, header):
    size = int(query.get(size_name, ["50" if header else "20"])[0])
    if size > 100:
        raise Answer(400, {"type": "invalid_arguments", "message": "invalid argument(s)",
                           "details": [{"argument_name": size_name, "reason": "constraint",
                                        "help_message": "must be at most 100"}]})
    n = int(query.get("page", ["1"])[0])
    chunk = items[(n - 1) * size: n * size]
    return chunk, len(items)


# ---- the handlers -----------------------------------------------------------------------------


def handle(state, method, template, p, query, body):
    s = state
    zone = p.get("zone")
    q1 = lambda name: query.get(name, [None])[0]  # noqa: E731

    def in_project(items, field, param):
        """The spec's project filter, applied only when given (a key reads every project)."""
        return [o for o in items if not q1(param) or o.get(field) == q1(param)]

    def instance_list(key, objects, tags_from_query=True):
        items = in_project(objects, "project", "project")
        if tags_from_query and q1("tags"):
            items = [o for o in items if has_tags(o, q1("tags").split(","))]
        if q1("name"):
            items = [o for o in items if q1("name") in o.get("name", "")]
        chunk, total = page(items, query, "per_page", True)
        return Answer(200, {key: [public(o) for o in chunk]}, {"X-Total-Count": str(total)})

    def listed(key, items):
        items = in_project(items, "project_id", "project_id")
        chunk, total = page(items, query, "page_size", False)
        return Answer(200, {"total_count": total, key: [public(o) for o in chunk]})

    # Instance: security groups and rules
    if template == "/instance/v1/zones/{zone}/security_groups":
        if method == "GET":
            return instance_list("security_groups", [g for g in s.security_groups.values() if g["zone"] == zone])
        g = copy.deepcopy(s.t["security_group"])
        gid = new_id()
        g.update(id=gid, name=body["name"], description=body.get("description"), tags=body.get("tags", []),
                 project=body.get("project", s.project), organization=s.project,
                 inbound_default_policy=body.get("inbound_default_policy", "accept"),
                 outbound_default_policy=body.get("outbound_default_policy", "accept"),
                 stateful=body.get("stateful", True), servers=[], zone=zone,
                 creation_date=now(), modification_date=now(),
                 enable_default_security=body.get("enable_default_security", True))
        s.security_groups[gid] = g
        s.rules[gid] = []
        if g["enable_default_security"]:
            for i, port in enumerate([25, 465, 587], start=1):
                for version, rng in (("4", "0.0.0.0/0"), ("6", "::/0")):
                    rule = copy.deepcopy(s.t["rule"])
                    rule.update(id=f"11111111-2222-4333-8444-00000000000{len(s.rules[gid]) + 1}", protocol="TCP",
                                direction="outbound", action="drop", ip_range=rng, dest_port_from=port,
                                dest_port_to=None, position=i, editable=False, zone=zone)
                    s.rules[gid].append(rule)
        return Answer(201, {"security_group": public(g)})
    if template == "/instance/v1/zones/{zone}/security_groups/{security_group_id}":
        g = found(s.security_groups, p["security_group_id"], "instance_security_group")
        if method == "GET":
            return Answer(200, {"security_group": public(g)})
        if method == "DELETE":
            if g["servers"]:
                raise bad("group is in use, you cannot delete it")
            del s.security_groups[g["id"]]
            s.rules.pop(g["id"], None)
            return Answer(204, None)
    if template == "/instance/v1/zones/{zone}/security_groups/{security_group_id}/rules":
        gid = p["security_group_id"]
        if gid not in s.security_groups:
            raise not_found("instance_security_group", gid)
        if method == "GET":
            return instance_list("rules", s.rules[gid], tags_from_query=False)
        if method == "PUT":
            # SetSecurityGroupRules: the given rules replace every editable one.
            fixed = [r for r in s.rules[gid] if not r["editable"]]
            by_id = {r["id"]: r for r in s.rules[gid] if r["editable"]}
            out = []
            for given in body.get("rules", []):
                if given.get("editable") is False:
                    continue
                rule = by_id.get(given.get("id")) or copy.deepcopy(s.t["rule"])
                if given.get("id") and given["id"] not in by_id:
                    raise not_found("instance_security_group_rule", given["id"])
                rule.update(id=rule.get("id") if given.get("id") else new_id(), protocol=given.get("protocol"),
                            direction=given.get("direction"), action=given.get("action"), ip_range=given.get("ip_range"),
                            dest_port_from=given.get("dest_port_from"), dest_port_to=given.get("dest_port_to"),
                            position=given.get("position", len(out) + 1), editable=True, zone=zone)
                out.append(rule)
            s.rules[gid] = fixed + out
            return Answer(200, {"rules": [public(r) for r in s.rules[gid]]})
        rule = copy.deepcopy(s.t["rule"])
        rule.update(id=new_id(), protocol=body["protocol"], direction=body["direction"], action=body["action"],
                    ip_range=body["ip_range"], dest_port_from=body.get("dest_port_from"),
                    dest_port_to=body.get("dest_port_to"), position=len(s.rules[gid]) + 1, editable=True,
                    zone=zone)
        s.rules[gid].append(rule)
        return Answer(201, {"rule": public(rule)})
    if template == "/instance/v1/zones/{zone}/security_groups/{security_group_id}/rules/{security_group_rule_id}":
        rules = s.rules.get(p["security_group_id"], [])
        rule = next((r for r in rules if r["id"] == p["security_group_rule_id"]), None)
        if not rule:
            raise not_found("instance_security_group_rule", p["security_group_rule_id"])
        if method == "DELETE":
            if not rule["editable"]:
                raise bad("rule is not editable")
            rules.remove(rule)
            return Answer(204, None)

    # Instance: IPs
    if template == "/instance/v1/zones/{zone}/ips":
        if method == "GET":
            return instance_list("ips", [i for i in s.ips.values() if i["zone"] == zone])
        ip = copy.deepcopy(s.t["instance_ip"])
        ip.update(id=new_id(), address=s.address(), prefix=None, reverse=None, server=None,
                  project=body.get("project", s.project), organization=s.project, zone=zone,
                  type=body.get("type", "routed_ipv4"), state="detached", tags=body.get("tags", []))
        s.ips[ip["id"]] = ip
        return Answer(201, {"ip": public(ip)})
    if template == "/instance/v1/zones/{zone}/ips/{ip}":
        ip = next((i for i in s.ips.values() if p["ip"] in (i["id"], i["address"])), None)
        if not ip:
            raise not_found("instance_ip", p["ip"])
        if method == "GET":
            return Answer(200, {"ip": public(ip)})
        if method == "PATCH":
            if "server" in body:
                sid = body["server"]
                if sid is None:
                    ip["server"], ip["state"] = None, "detached"
                else:
                    srv = found(s.servers, sid, "instance_server")
                    ip["server"], ip["state"] = {"id": sid, "name": srv["name"]}, "attached"
                    entry = {"id": ip["id"], "address": ip["address"], "gateway": "62.210.0.1", "netmask": "32",
                             "family": "inet", "dynamic": False, "provisioning_mode": "dhcp",
                             "tags": [], "ipam_id": new_id(), "state": "attached"}
                    srv["public_ips"] = [x for x in srv["public_ips"] if x["id"] != ip["id"]] + [entry]
            if "tags" in body:
                ip["tags"] = body["tags"]
            return Answer(200, {"ip": public(ip)})
        if method == "DELETE":
            if ip["server"]:
                srv = s.servers.get(ip["server"]["id"])
                if srv:
                    srv["public_ips"] = [x for x in srv["public_ips"] if x["id"] != ip["id"]]
            del s.ips[ip["id"]]
            return Answer(204, None)

    # Instance: images
    if template == "/instance/v1/zones/{zone}/images" and method == "GET":
        return instance_list("images", [i for i in s.images.values() if i["zone"] == zone])

    # Instance: servers
    if template == "/instance/v1/zones/{zone}/servers":
        if method == "GET":
            for srv in list(s.servers.values()):
                s.look_server(srv)
            return instance_list("servers", [x for x in s.servers.values() if x["zone"] == zone])
        image = found(s.images, body.get("image"), "instance_image")
        srv = copy.deepcopy(s.t["instance_server"])
        sid = new_id()
        vol = {"id": new_id(), "name": f"{body['name']}-root", "type": "sbs_5k", "size": root_volume_size(s, image, body),
               "project_id": s.project, "created_at": now(), "updated_at": now(), "parent_snapshot_id": None,
               "status": "in_use", "tags": [], "zone": zone, "specs": {"perf_iops": 5000, "class": "sbs"},
               "last_detached_at": None,
               "references": [{"id": new_id(), "product_resource_type": "instance_server",
                               "product_resource_id": sid, "created_at": now(), "type": "exclusive",
                               "status": "attached"}]}
        s.volumes[vol["id"]] = vol
        # A Block volume in a server is only this, in the recordings (no name, no server).
        root = {"boot": False, "volume_type": "sbs_volume", "id": vol["id"], "state": "available", "zone": zone}
        group = None
        if body.get("security_group"):
            g = found(s.security_groups, body["security_group"], "instance_security_group")
            g["servers"].append({"id": sid, "name": body["name"]})
            group = {"id": g["id"], "name": g["name"]}
        srv.update(id=sid, name=body["name"], tags=body.get("tags", []), state="stopped", state_detail="",
                   commercial_type=body["commercial_type"], project=body.get("project", s.project),
                   organization=s.project, zone=zone, public_ips=[], public_ip=None, private_ip=None,
                   security_group=group, volumes={"0": root}, allowed_actions=["poweron", "backup"],
                   location=None, creation_date=now(), modification_date=now(), dynamic_ip_required=False,
                   image=public(image))
        s.servers[sid] = srv
        for ip_id in body.get("public_ips", []):
            ip = found(s.ips, ip_id, "instance_ip")
            if ip["server"]:
                raise bad(f"ip {ip_id} is already attached")
            handle(s, "PATCH", "/instance/v1/zones/{zone}/ips/{ip}", {"zone": zone, "ip": ip_id}, {}, {"server": sid})
        return Answer(201, {"server": public(srv)})
    if template == "/instance/v1/zones/{zone}/servers/{server_id}":
        srv = s.servers.get(p["server_id"])
        if srv:
            srv = s.look_server(srv) if method == "GET" else srv
        if not srv:
            raise not_found("instance_server", p["server_id"])
        if method == "GET":
            return Answer(200, {"server": public(srv)})
        if method == "PATCH":
            if "security_group" in body:
                g = found(s.security_groups, body["security_group"].get("id"), "instance_security_group")
                old = s.security_groups.get((srv.get("security_group") or {}).get("id"))
                if old:
                    old["servers"] = [x for x in old["servers"] if x["id"] != srv["id"]]
                g["servers"].append({"id": srv["id"], "name": srv["name"]})
                srv["security_group"] = {"id": g["id"], "name": g["name"]}
            for key in ("name", "tags"):
                if key in body:
                    srv[key] = body[key]
            return Answer(200, {"server": public(srv)})
        if method == "DELETE":
            if srv["state"] != "stopped":
                raise bad("instance should be powered off.")
            s.remove_server(srv)
            return Answer(204, None)
    if template == "/instance/v1/zones/{zone}/servers/{server_id}/action":
        srv = found(s.servers, p["server_id"], "instance_server")
        action = body.get("action", "poweron")
        if action not in srv["allowed_actions"]:
            raise bad(f"action {action} is not allowed while the instance is {srv['state']}")
        if action == "poweron":
            if not srv.get("_booted"):
                srv["_booted"] = True
                s.first_boots[srv["name"]] = "config" if srv.get("_user_data", {}).get("cloud-init") else "maintenance"
            srv.update(state="starting", state_detail="allocating node", allowed_actions=["stop_in_place", "backup"])
        elif action == "poweroff":
            srv.update(state="stopping", state_detail="stopping", allowed_actions=["stop_in_place", "backup"])
        elif action == "terminate":
            srv.update(state="stopping", state_detail="terminating", allowed_actions=[], _terminating=True)
            for v in srv["volumes"].values():
                vol = s.volumes.get(v["id"])
                if vol:
                    vol["status"] = "in_use"
        else:
            raise bad(f"the stand-in does not model the action {action}")
        srv["_steps"] = 0
        task = copy.deepcopy(s.t["task"])
        task.update(id=new_id(), description=f"server_{action}", status="pending", href_from=f"/servers/{srv['id']}/action",
                    started_at=now(), terminated_at=None, progress=0, zone=zone)
        return Answer(202, {"task": task})
    if template == "/instance/v1/zones/{zone}/servers/{server_id}/user_data" and method == "GET":
        # ListServerUserData: the keys set on the server, whatever made it.
        srv = found(s.servers, p["server_id"], "instance_server")
        return Answer(200, {"user_data": sorted(srv.get("_user_data", {}))})
    if template == "/instance/v1/zones/{zone}/servers/{server_id}/user_data/{key}" and method == "DELETE":
        # DeleteServerUserData: 204, and the key is gone; an unknown key is a 404.
        srv = found(s.servers, p["server_id"], "instance_server")
        if p["key"] not in srv.get("_user_data", {}):
            raise not_found_alphabetical("instance_user_data", p["key"])
        del srv["_user_data"][p["key"]]
        return Answer(204, None)
    if template == "/instance/v1/zones/{zone}/servers/{server_id}/user_data/{key}" and method == "PATCH":
        # SetServerUserData: the bytes as they are (Talos's Scaleway platform reads the key
        # `cloud-init` at boot).
        srv = found(s.servers, p["server_id"], "instance_server")
        srv.setdefault("_user_data", {})[p["key"]] = body
        return Answer(204, None)
    if template == "/instance/v1/zones/{zone}/servers/{server_id}/attach-volume":
        srv = found(s.servers, p["server_id"], "instance_server")
        vol = found(s.volumes, body["volume_id"], "volume")
        if vol["status"] != "available":
            raise bad(f"volume is {vol['status']}")
        key = str(max((int(k) for k in srv["volumes"]), default=-1) + 1)
        srv["volumes"][key] = {"boot": False, "volume_type": "sbs_volume", "id": vol["id"], "state": "available",
                               "zone": zone}
        vol["status"] = "in_use"
        vol["references"] = [{"id": new_id(), "product_resource_type": "instance_server",
                              "product_resource_id": srv["id"], "created_at": now(), "type": "exclusive",
                              "status": "attached"}]
        return Answer(200, {"server": public(srv)})
    if template == "/instance/v1/zones/{zone}/volumes/{volume_id}" and method == "DELETE":
        raise not_found("instance_volume", p["volume_id"])

    # Block v1
    if template == "/block/v1/zones/{zone}/volumes/{volume_id}":
        vol = found(s.volumes, p["volume_id"], "volume", not_found_alphabetical)
        if method == "GET":
            return Answer(200, public(vol))
        if method == "DELETE":
            return delete_unless_in_use(s.volumes, vol)

    # Block v1 snapshots: the import reads the object the S3 stand-in stored.
    if template == "/block/v1/zones/{zone}/snapshots/import-from-object-storage":
        if not s.s3_root:
            raise bad("the stand-in has no Object Storage")
        path = os.path.join(s.s3_root, body["bucket"], body["key"].replace("/", "%2F"))
        if not os.path.exists(path):
            raise not_found_alphabetical("object", f"{body['bucket']}/{body['key']}")
        # "Any bucket that belongs to the same project as the snapshot can be used" (Scaleway's
        # Instance snapshot import guide, compute/instances/api-cli/snapshot-import-export-feature):
        # the bucket's project is the one the S3 stand-in made it in. No recording holds the
        # refusal: it is answered in the shape of Scaleway's permission errors.
        with open(os.path.join(s.s3_root.rstrip("/") + ".projects", body["bucket"])) as f:
            bucket_project = f.read()
        if bucket_project != body["project_id"]:
            raise Answer(403, {"type": "permissions_denied", "message": "insufficient permissions",
                               "details": [{"resource": "object_storage_bucket", "action": "read"}]})
        with open(path, "rb") as f:
            if f.read(4) != b"QFI\xfb":
                raise Answer(400, {"type": "invalid_arguments", "message": "invalid argument(s)",
                                   "details": [{"argument_name": "key", "reason": "constraint",
                                                "help_message": "the object is not a QCOW2 image"}]})
        if body.get("size") is not None and body["size"] < os.path.getsize(path):
            raise bad("size is smaller than the image")
        snap = {"id": new_id(), "name": body["name"], "parent_volume": None, "size": body.get("size") or 10_000_000_000,
                "project_id": body["project_id"], "created_at": now(), "updated_at": now(), "references": [],
                "status": "creating", "tags": body.get("tags", []), "zone": zone, "class": "sbs", "_steps": 0}
        s.snapshots[snap["id"]] = snap
        return Answer(200, public(snap))
    if template == "/block/v1/zones/{zone}/snapshots":
        items = [x for x in s.snapshots.values() if x["zone"] == zone and has_tags(x, query.get("tags", []))]
        return listed("snapshots", items)
    if template == "/block/v1/zones/{zone}/snapshots/{snapshot_id}":
        snap = found(s.snapshots, p["snapshot_id"], "snapshot", not_found_alphabetical)
        if method == "GET":
            if snap["status"] == "creating":
                snap["_steps"] += 1
                if snap["_steps"] >= STEPS:
                    snap["status"] = "available"
            return Answer(200, public(snap))
        if method == "DELETE":
            return delete_unless_in_use(s.snapshots, snap)

    # Instance images made from a Block snapshot
    if template == "/instance/v1/zones/{zone}/images" and method == "POST":
        snap = found(s.snapshots, body["root_volume"], "instance_snapshot")
        if snap["status"] != "available":
            raise Answer(409, {"type": "transient_state", "message": "resource is in a transient state",
                               "resource": "snapshot", "resource_id": snap["id"], "current_state": snap["status"]})
        snap["status"] = "in_use"
        image = copy.deepcopy(s.t["image"])
        image.update(id=new_id(), name=body.get("name", ""), tags=body.get("tags", []), state="creating",
                     arch=body["arch"], project=body.get("project", s.project), zone=zone, public=False,
                     creation_date=now(), modification_date=now(), _root=snap["id"], _steps=0)
        s.images[image["id"]] = image
        return Answer(201, {"image": public(image)})
    if template == "/instance/v1/zones/{zone}/images/{image_id}":
        image = found(s.images, p["image_id"], "instance_image")
        if method == "GET":
            if image["state"] == "creating":
                image["_steps"] += 1
                if image["_steps"] >= STEPS:
                    image["state"] = "available"
            return Answer(200, {"image": public(image)})
        if method == "DELETE":
            snap = s.snapshots.get(image.get("_root"))
            if snap:
                snap["status"] = "available"
            del s.images[image["id"]]
            return Answer(204, None)

    # Elastic Metal
    if template == "/baremetal/v1/zones/{zone}/offers":
        items = [o for o in s.offers.values() if not q1("name") or o["name"] == q1("name")]
        return listed("offers", items)
    if template == "/baremetal/v1/zones/{zone}/servers":
        if method == "GET":
            items = [x for x in s.bm_servers.values() if x["zone"] == zone and has_tags(x, query.get("tags", []))]
            for x in items:
                s.look_bm(x)
            return listed("servers", items)
        offer = found(s.offers, body["offer_id"], "offer")
        srv = copy.deepcopy(s.t["baremetal_server"])
        srv.update(id=new_id(), name=body["name"], description=body["description"], tags=body.get("tags", []),
                   status="delivering", offer_id=offer["id"], offer_name=offer["name"], zone=zone,
                   project_id=body.get("project_id", s.project), organization_id=s.project, install=None,
                   rescue_server=None, boot_type="normal", created_at=now(), updated_at=now(),
                   ips=[{"id": new_id(), "address": s.bm_address(body["name"]), "reverse": "", "version": "IPv4",
                         "reverse_status": "active", "reverse_status_message": ""},
                        {"id": new_id(), "address": s.bm_ipv6(), "reverse": "", "version": "IPv6",
                         "reverse_status": "active", "reverse_status_message": ""}])
        s.bm_servers[srv["id"]] = srv
        return Answer(200, public(srv))
    if template.startswith("/baremetal/v1/zones/{zone}/servers/{server_id}"):
        srv = found(s.bm_servers, p["server_id"], "baremetal_server")
        if template.endswith("{server_id}"):
            if method == "GET":
                return Answer(200, public(s.look_bm(srv)))
            if method == "PATCH":
                if "tags" in body:
                    srv["tags"] = body["tags"]
                return Answer(200, public(srv))
            if method == "DELETE":
                del s.bm_servers[srv["id"]]
                srv["status"] = "deleting"
                return Answer(200, public(srv))
        action = template.rsplit("/", 1)[1]
        if srv["status"] == "delivering":
            raise Answer(400, {"message": "Server is not delivered"})
        boot_type = body.get("boot_type") or "unknown_boot_type"
        if boot_type == "unknown_boot_type":
            boot_type = srv["boot_type"] if action == "start" else "normal"
        if action == "stop":
            if srv["status"] != "ready":
                raise bad(f"server is {srv['status']}")
            srv.update(status="stopping", _steps=0)
        elif action == "start":
            if srv["status"] != "stopped":
                raise bad(f"server is {srv['status']}")
            s.boot_bm(srv, boot_type, body.get("ssh_key_ids") or [])
        elif action == "reboot":
            if srv.get("install") is None:
                raise Answer(412, {"type": "precondition_failed", "precondition": "server_not_installed",
                                   "message": "server has no installed OS: stop it, then start it"})
            s.boot_bm(srv, boot_type, body.get("ssh_key_ids") or [])
        return Answer(200, public(srv))

    # IAM SSH keys
    if template == "/iam/v1alpha1/ssh-keys":
        if method == "GET":
            items = [k for k in s.ssh_keys.values() if not q1("name") or q1("name") in k["name"]]
            return listed("ssh_keys", items)
        # Whether IAM refuses a public key the organization already holds is not settled: a
        # maintainer answered "409 Conflict ... because two keys are the same"
        # (terraform-provider-scaleway#713, 2020), later reports show two identical keys made
        # (scaleway-cli#2421, 2022). Off by default; POST /__standin/iam-refuses-duplicate-keys
        # turns the refusal on.
        same = body["public_key"].split()[:2]
        if s.iam_refuses_duplicates and any(k["public_key"].split()[:2] == same for k in s.ssh_keys.values()):
            raise Answer(409, {"type": "conflict", "message": "resource conflict",
                               "resource": "ssh_key"})
        key = copy.deepcopy(s.t["ssh_key"])
        key.update(id=new_id(), name=body["name"], public_key=body["public_key"], project_id=body["project_id"],
                   organization_id=s.project, created_at=now(), updated_at=now(), disabled=False)
        s.ssh_keys[key["id"]] = key
        return Answer(200, public(key))
    if template == "/iam/v1alpha1/ssh-keys/{ssh_key_id}":
        key = found(s.ssh_keys, p["ssh_key_id"], "ssh_key", not_found_alphabetical)
        if method == "DELETE":
            del s.ssh_keys[key["id"]]
            return Answer(204, None)

    # Domain v2beta1
    if template == "/domain/v2beta1/dns-zones":
        items = [z for z in s.dns_zones.values()
                 if z["domain"] == q1("domain") or z["domain"].endswith("." + (q1("domain") or ""))]
        if q1("dns_zone"):
            items = [z for z in items if z["domain"] == q1("dns_zone")]
        return listed("dns_zones", items)
    if template == "/domain/v2beta1/dns-zones/{dns_zone}/records":
        recs = s.records.get(p["dns_zone"])
        if recs is None:
            raise Answer(403, {"message": "insufficient permissions", "type": "permissions_denied"})
        if method == "GET":
            items = [r for r in recs if r["name"] == q1("name") and (not q1("type") or r["type"] == q1("type"))]
            return listed("records", items)
        if method == "PATCH":
            for change in body["changes"]:
                (op, arg), = [(k, v) for k, v in change.items() if v is not None]
                if op in ("add", "set"):
                    if op == "set":
                        ident = arg.get("id_fields") or {}
                        if arg.get("id"):
                            recs[:] = [r for r in recs if r["id"] != arg["id"]]
                        else:
                            recs[:] = [r for r in recs if not (r["name"] == ident.get("name")
                                                               and r["type"] == ident.get("type"))]
                    for r in arg.get("records", []):
                        rec = {"id": new_id(), "data": r["data"], "name": r["name"], "priority": r.get("priority", 0),
                               "ttl": r.get("ttl", 3600), "type": r["type"], "comment": r.get("comment")}
                        recs.append(rec)
                elif op == "delete":
                    before = len(recs)
                    if arg.get("id"):
                        recs[:] = [r for r in recs if r["id"] != arg["id"]]
                    else:
                        f = arg.get("id_fields") or {}
                        recs[:] = [r for r in recs if not all(r.get(k) == v for k, v in f.items() if v is not None)]
                    if len(recs) == before:
                        raise not_found("record", arg.get("id") or "")
                elif op == "clear":
                    recs.clear()
            return Answer(200, {"records": []})

    # Registry v1
    if template == "/registry/v1/regions/{region}/namespaces":
        if method == "GET":
            items = [n for n in s.namespaces.values() if n["region"] == p["region"]
                     and (not q1("name") or n["name"] == q1("name"))]
            return listed("namespaces", items)
        if any(n["name"] == body["name"] for n in s.namespaces.values()):
            raise Answer(409, {"message": "resource already exists", "type": "already_exists"})
        ns = {"id": new_id(), "name": body["name"], "description": body.get("description", ""),
              "organization_id": s.project, "project_id": body.get("project_id", s.project), "status": "ready",
              "status_message": "", "endpoint": f"rg.{p['region']}.scw.cloud/{body['name']}",
              "is_public": body.get("is_public", False), "size": 0, "created_at": now(), "updated_at": now(),
              "image_count": 0, "region": p["region"]}
        s.namespaces[ns["id"]] = ns
        return Answer(200, ns)

    raise bad(f"the stand-in does not model {method} {template}")


# ---- the server -------------------------------------------------------------------------------


def root_volume_size(s, image, body):
    """The root volume of a new Instance is made from its image's root snapshot: of the
    snapshot's size, unless `volumes["0"].size` asks for a resize (Block v1 CreateVolume
    from_snapshot: "Size is optional and is used only if a resize of the volume is requested,
    otherwise original snapshot size will be used", with "a granularity of 1 GB (10^9 bytes)";
    a volume cannot be smaller than the snapshot it holds)."""
    snap = s.snapshots.get(image.get("_root"))
    base = snap["size"] if snap else 10_000_000_000
    root = (body.get("volumes") or {}).get("0")
    if root is None or root.get("size") is None:
        return base
    size = root["size"]
    if root.get("volume_type") != "sbs_volume":
        raise bad(f"volumes.0.volume_type: the image's root is a Block snapshot, not {root.get('volume_type')}")
    if size % 1_000_000_000:
        raise bad("volumes.0.size: Block volumes have a granularity of 1 GB (10^9 bytes)")
    if size < base:
        raise bad(f"volumes.0.size: {size} is smaller than the image's snapshot ({base})")
    return size


def seed(state, body):
    """Adds a resource as someone else (or a half-built run, or an earlier import) left it, in
    `project` (the stand-in's own by default)."""
    kind = body.pop("kind")
    zone = body.pop("zone", "fr-par-1")
    project = body.pop("project", state.project)
    with state.lock:
        if kind == "image":
            # An available image, as an import or a hand-made one leaves it.
            image = copy.deepcopy(state.t["image"])
            image.update(id=new_id(), name=body.get("name", "talos"), tags=body.get("tags", []), state="available",
                         arch=body.get("arch", "x86_64"), project=project, zone=zone, public=False)
            state.images[image["id"]] = image
            return public(image)
        if kind == "instance_server":
            # A plain server: created stopped, from the given image (else any, else a bare one).
            image = body.get("image") or next(iter(state.images), None) or seed(state, {"kind": "image"})["id"]
            a = handle(state, "POST", "/instance/v1/zones/{zone}/servers", {"zone": zone}, {},
                       {"name": body["name"], "commercial_type": "DEV1-M", "image": image, "tags": body.get("tags", []),
                        "project": project, **({"public_ips": body["public_ips"]} if "public_ips" in body else {})})
            return a.body["server"]
        if kind == "baremetal_server":
            # An Elastic Metal server ordered without an OS and delivered, in `status` (ready by
            # default) and `boot_type` (normal by default: rescue, as a run stopped after it
            # wrote the disk leaves it), at `address` when given.
            offer = next(iter(state.offers))
            srv = handle(state, "POST", "/baremetal/v1/zones/{zone}/servers", {"zone": zone}, {},
                         {"offer_id": offer, "project_id": project, "name": body["name"], "description": "",
                          "tags": body.get("tags", [])}).body
            srv = state.bm_servers[srv["id"]]
            srv.update(status=body.get("status", "ready"), boot_type=body.get("boot_type", "normal"), _steps=0)
            if srv["boot_type"] == "rescue":
                srv.update(_rescue_password=uuid.uuid4().hex, _rescue_ready=True)
            if "address" in body:
                srv["ips"][0]["address"] = body["address"]
            return public(srv)
        if kind == "attached_volume":
            # A Block volume made by hand and attached to a server with the Instance API's
            # attach-volume, as an operator adds a data disk.
            vol = {"id": new_id(), "name": body.get("name", "data"), "type": "sbs_5k", "size": 20_000_000_000,
                   "project_id": project, "created_at": now(), "updated_at": now(), "parent_snapshot_id": None,
                   "status": "available", "tags": [], "zone": zone, "specs": {"perf_iops": 5000, "class": "sbs"},
                   "last_detached_at": None, "references": []}
            state.volumes[vol["id"]] = vol
            handle(state, "POST", "/instance/v1/zones/{zone}/servers/{server_id}/attach-volume",
                   {"zone": zone, "server_id": body["server"]}, {},
                   {"volume_id": vol["id"], "volume_type": "sbs_volume"})
            return public(vol)
        if kind == "security_group":
            return handle(state, "POST", "/instance/v1/zones/{zone}/security_groups", {"zone": zone}, {},
                          {"name": body["name"], "tags": body.get("tags", []), "inbound_default_policy": "drop",
                           "project": project}).body["security_group"]
        if kind == "ip":
            return handle(state, "POST", "/instance/v1/zones/{zone}/ips", {"zone": zone}, {},
                          {"tags": body.get("tags", []), "project": project}).body["ip"]
        if kind == "ssh_key":
            return handle(state, "POST", "/iam/v1alpha1/ssh-keys", {}, {},
                          {"name": body["name"], "public_key": body["public_key"], "project_id": project}).body
        if kind == "namespace":
            return handle(state, "POST", "/registry/v1/regions/{region}/namespaces",
                          {"region": body.get("region", "fr-par")}, {},
                          {"name": body["name"], "project_id": project, "is_public": True}).body
        if kind == "record":
            rec = {"id": new_id(), "data": body["data"], "name": body["name"], "priority": 0, "ttl": 300,
                   "type": body["type"], "comment": body.get("comment")}
            state.records[body["dns_zone"]].append(rec)
            return rec
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    for name in ("--specs", "--cassettes", "--port-file", "--log", "--secret", "--project"):
        ap.add_argument(name, required=True)
    ap.add_argument("--rescue-dir", action="append", default=[],
                    help="[NAME=]DIR: where a rescue boot (of server NAME) writes authorized_keys and password")
    ap.add_argument("--rescue-user", default="rescue")
    ap.add_argument("--dns-zone", default="")
    ap.add_argument("--s3-root", default="", help="where the S3 stand-in keeps its objects")
    args = ap.parse_args()
    spec = Spec(args.specs)
    state = State(load_templates(args.cassettes, spec), args.project, args.dns_zone,
                  args.rescue_dir, args.rescue_user)
    state.s3_root = args.s3_root or None
    log = open(args.log, "a", buffering=1)
    log_lock = threading.Lock()

    class Handler(loopback.Handler):
        def send(self, status, body, headers=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def record(self, entry):
            with log_lock:
                log.write(json.dumps(entry) + "\n")

        def do(self):
            url = urlsplit(self.path)
            raw = self.body_bytes()
            method = self.command
            if url.path.startswith("/__standin/"):
                return self.control(method, url.path, raw)
            query = parse_qs(url.query, keep_blank_values=True)
            entry = {"method": method, "path": url.path, "query": query,
                     "body": None, "token": self.headers.get("X-Auth-Token") == args.secret}
            # An operation whose body is not JSON (an Instance's user data: `*/*`, binary) takes
            # the bytes as they are; the log keeps their digest, not them.
            template, params, op, comps = spec.match(method, url.path)
            takes_bytes = op is not None and "*/*" in op.get("requestBody", {}).get("content", {})
            try:
                if takes_bytes:
                    body = None
                    entry["body"] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
                                     "content_type": self.headers.get("Content-Type")}
                else:
                    body = json.loads(raw) if raw else None
                    entry["body"] = body
            except ValueError:
                body = None
                entry["refused"] = ["body is not JSON"]
                self.record(entry)
                return self.send(400, {"type": "invalid_request_error", "message": "body is not JSON"})
            # Faults first: the real API can fail any request.
            with state.lock:
                fault = next((f for f in state.faults if f["count"] > 0 and f.get("method", method) == method
                              and re.search(f["path"], url.path)), None)
                if fault:
                    fault["count"] -= 1
            if fault:
                entry["fault"] = fault["kind"]
                if fault["kind"] != "slow" and not fault.get("applied"):
                    self.record(entry)
                if fault["kind"] == "cut":
                    self.close_connection = True
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cut")
                    return
                if fault["kind"] == "slow":
                    time.sleep(fault.get("seconds", 0.3))
                elif fault.get("applied"):
                    pass  # handled below, once the request has taken effect
                else:
                    headers = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
                    return self.send(fault["status"], {"message": "stand-in fault", "type": "unknown"}
                                     if fault["status"] != 429 else
                                     {"message": "too many requests", "type": "too_many_requests"}, headers)
            if self.headers.get("X-Auth-Token") != args.secret:
                entry["refused"] = ["no or wrong X-Auth-Token"]
                self.record(entry)
                return self.send(401, {"type": "denied_authentication", "message": "authentication is denied"})
            errors = []
            if template is None:
                errors.append(f"{method} {url.path}: no such operation in the specs"
                              + (f" (allowed: {params})" if params else ""))
            else:
                entry["template"] = template
                check_path(op, params, errors)
                check_query(op, query, errors)
                schema = (op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema"))
                if takes_bytes:
                    if not raw and op["requestBody"].get("required"):
                        errors.append("body required")
                elif schema is None and body not in (None, {}):
                    errors.append("a body where the operation takes none")
                elif schema is not None:
                    if body is None and resolve(schema, comps).get("required"):
                        errors.append("body required")
                    validate(schema, body if body is not None else {}, "body", comps, True, errors)
            if errors:
                entry["refused"] = errors
                self.record(entry)
                return self.send(400, {"type": "invalid_arguments", "message": "invalid argument(s)",
                                       "details": [{"argument_name": e.split(":")[0], "reason": "constraint",
                                                    "help_message": e} for e in errors]})
            with state.lock:
                try:
                    answer = handle(state, method, template, params, query, raw if takes_bytes else body or {})
                except Answer as a:
                    answer = a
            entry["status"] = answer.status
            if answer.status < 300 and answer.body is not None:
                resp = op.get("responses", {}).get(str(answer.status)) or next(iter(op.get("responses", {}).values()), {})
                rschema = resp.get("content", {}).get("application/json", {}).get("schema")
                rerrors = []
                if rschema is not None:
                    validate(rschema, answer.body, "response", comps, False, rerrors)
                if rerrors:
                    entry["standin_bug"] = rerrors
                    self.record(entry)
                    return self.send(500, {"message": "stand-in answer is not spec-valid: " + "; ".join(rerrors[:5])})
            if answer.status < 300 and answer.body is not None:
                entry["response"] = answer.body  # for the tests that compare shapes with the recordings
            with state.lock:
                interrupted = False
                if method != "GET":
                    state.changes += 1
                    interrupted = bool(state.interrupt) and state.changes == state.interrupt["nth"]
            if interrupted:
                # It took effect; the client is killed before it hears so.
                entry["interrupted"] = True
                self.record(entry)
                with open(state.interrupt["marker"], "w") as f:
                    f.write(f"{method} {url.path}\n")
                time.sleep(HOLD_SECONDS)
                self.close_connection = True
                return
            if fault and fault.get("applied"):
                # It took effect; the client is told it failed.
                entry["fault_status"] = fault["status"]
                self.record(entry)
                return self.send(fault["status"], {"message": "stand-in fault", "type": "unknown"})
            self.record(entry)
            self.send(answer.status, answer.body, answer.headers)

        def control(self, method, path, raw):
            body = json.loads(raw) if raw else None
            with state.lock:
                if path == "/__standin/faults" and method == "POST":
                    state.faults.extend(body)
                    return self.send(200, {"faults": len(state.faults)})
                if path == "/__standin/interrupt" and method == "POST":
                    state.interrupt = body
                    return self.send(200, {"changes_so_far": state.changes})
                if path == "/__standin/seed" and method == "POST":
                    return self.send(200, seed(state, body))
                if path == "/__standin/iam-refuses-duplicate-keys" and method == "POST":
                    state.iam_refuses_duplicates = True
                    return self.send(200, {})
                if path == "/__standin/guest-halt" and method == "POST":
                    halted = [srv for srv in state.servers.values() if srv["state"] == "running" and
                              any(ip["address"] == body["address"] for ip in srv["public_ips"])]
                    for srv in halted:
                        srv.update(state="stopping", state_detail="stopping", _halted=True, _steps=0,
                                   allowed_actions=["stop_in_place", "backup"])
                    return self.send(200, {"halted": [srv["id"] for srv in halted]})
                if path == "/__standin/state" and method == "GET":
                    dump = {k: [public(o) for o in getattr(state, k).values()] for k in
                            ("security_groups", "ips", "servers", "volumes", "bm_servers", "ssh_keys", "namespaces",
                             "images", "snapshots")}
                    dump["records"] = state.records
                    dump["first_boots"] = state.first_boots
                    dump["rules"] = state.rules
                    # Each server's user data, by key: the digest of the bytes.
                    dump["user_data"] = {sid: {k: hashlib.sha256(v).hexdigest() for k, v in srv.get("_user_data", {}).items()}
                                         for sid, srv in state.servers.items()}
                    return self.send(200, dump)
            self.send(404, {"message": "no such control"})

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do

    loopback.listen(Handler, args.port_file).serve_forever()


if __name__ == "__main__":
    main()
