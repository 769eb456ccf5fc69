#!/usr/bin/env python3
"""Object Storage (S3 API) stand-in, path-style, on loopback, for the scw-infra tests.

Contract enforced: AWS Signature Version 4 as S3 checks it, implemented here independently of
the tool (hashlib/hmac): every request must carry `Authorization: AWS4-HMAC-SHA256` for the
expected access key, region and service `s3`, sign `host`, `x-amz-date`, every other `x-amz-*` header and
`x-amz-content-sha256`, and the `x-amz-content-sha256` must be the body's sha256 (or `UNSIGNED-PAYLOAD`); otherwise it
answers 403 `SignatureDoesNotMatch` (or `XAmzContentSHA256Mismatch`) and logs the request as
refused. A `Content-MD5` header, when sent, must be the body's MD5, else 400 `BadDigest` (AWS S3
API Reference, PutObject and UploadPart: "Content-MD5"). Buckets and objects live as files under
--root (so the Scaleway stand-in can check that an imported object exists); an object appears
whole or not at all (written beside the root, then renamed into it).

Requests are served concurrently, one thread per connection, as S3 serves them: the parts of one
multipart upload "can be uploaded independently, in any order, and in parallel" (AWS S3 User
Guide, "Uploading and copying objects using multipart upload"). Only the shared state (uploads,
ETags, faults, the log) is under a lock; hashing and writing bodies are not.

Multipart uploads follow S3's rules (AWS S3 API Reference: CreateMultipartUpload, UploadPart,
CompleteMultipartUpload, AbortMultipartUpload, ListMultipartUploads): part numbers 1 to 1000
(Scaleway's limit, "Managing multipart uploads" in Scaleway's Object Storage docs; AWS takes
10,000), every part but the last at least 5 MiB, a part sent again under the same number replaces
it, the completion lists parts in ascending order with their ETags (its XML elements in any order,
with or without S3's namespace), and an aborted upload's parts are gone. A part's ETag is the
quoted MD5 of its bytes; a multipart object's ETag is the MD5 of the concatenated binary MD5s of
its parts, a dash, and the count of parts (AWS S3 User Guide, "Checking object integrity":
multipart ETags; MinIO's `getCompleteMultipartMD5` computes it the same way), returned by the
completion and by HEAD and GET. User-defined metadata (`x-amz-meta-*` request headers of a PUT or
of the CreateMultipartUpload that makes the object) is kept with the object, replaced by the next
PUT of the key, and returned by HEAD (AWS, "Working with object metadata": user-defined metadata
is set when the object is uploaded and returned as `x-amz-meta-*` response headers; an object's
metadata cannot be changed but by replacing it).

Buckets belong to a Scaleway project (scaleway/docs-content
pages/iam/api-cli/using-api-key-object-storage.mdx): S3 tools sign with the bare access key and
"will always use [the API key's] preferred Project", and a bucket is made "inside the preferred
Project", unless the access key is given as `ACCESS_KEY@PROJECT_ID`, which signs and acts in
that project. The stand-in takes both forms of the key, and keeps each bucket's project in
ROOT.projects/BUCKET (where the Scaleway stand-in reads it: a snapshot is imported only from a
bucket of its own project); the preferred project is --preferred-project, by default one that
is not the project the tests deploy into, as for an operator whose key prefers another one.

Usage: s3_api.py --root DIR --port-file F --log F --access-key A --secret S --region R
                 [--preferred-project P]
A request whose `x-amz-date` is more than 15 minutes from the server's clock is refused 403
`RequestTimeTooSkewed` (AWS S3 API Reference, "Error responses": the difference between the
request time and the server's time is too large; AWS, "Authenticating Requests (AWS Signature
Version 4)": a signed request is valid within 15 minutes of its timestamp).

ListObjectsV2 answers as S3 does (AWS S3 API Reference, ListObjectsV2): keys in UTF-8 binary
order, at most `max-keys` (default and most 1,000) a page; a page that is not the last says
`IsTruncated` true and gives a `NextContinuationToken`, an opaque string the next request sends
back as `continuation-token` (S3's are base64 with `+`, `/` and `=`: these carry all three, so a
client that does not percent-encode them sends another token, refused 400 `InvalidArgument`).

Log: one JSON line per request once it is answered (so in the order answers went out): method,
path, query, size, status, and for a part upload `in_flight`, the parts of that upload being
received or stored at once when it arrived (itself included).
Control (unsigned): POST /__standin/faults with a list of
  {method, path (regex), query (regex, optional), status, count}: the next `count` matching
      requests are answered `status` (`SlowDown`) without being served;
  {method, path, query, hold_until (regex on the query), count}: the next `count` matching
      requests are held, before being served, until a request whose query matches `hold_until`
      has been answered (after the fault was set): parts stored out of order, whatever the timing;
  {method, path, query, gather (a number), count}: the next `count` matching part uploads are
      held until `gather` parts of their upload are in flight at once: a client's parallelism
      shown, whatever the timing.
  POST /__standin/listing with {page_size}: ListObjectsV2 pages hold at most this many keys
      from now on (S3's most, 1,000, by default), so that a test sees paging with a few objects.
  POST /__standin/clock with {offset_seconds}: the stand-in's clock runs this far from the
      machine's, as a server's clock differs from a client's that is off.
  POST /__standin/signal with {name}: counts as an answered request of query `signal=<name>`,
  so that a test releases held requests once it has seen the client react to the others.
  A held request waits HOLD_SECONDS at most, then is answered 503 `SlowDown`.
  POST /__standin/interrupt with {nth, marker}: the nth request that can change something (any
      method but GET and HEAD, counted from the stand-in's start) is served (it takes effect,
      or is refused), and is never answered: the stand-in writes "METHOD path" to the file `marker` and holds the
      connection (HOLD_SECONDS at most, then closes it unanswered), so that a test kills the
      client right after a call that was done.
"""

import argparse
import base64
import calendar
import hashlib
import hmac
import json
import os
import re
import threading
import time
import uuid
from xml.sax.saxutils import escape
import xml.etree.ElementTree as ET
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import loopback  # loopback.py, beside this script

MIN_PART = 5 * 1024 * 1024
MAX_PART_NUMBER = 1000
# A held request gives up after this long: a client that never sends what releases it (one that
# uploads one part at a time) is answered 503 and goes on.
HOLD_SECONDS = 20


def canonical_query(query):
    pairs = sorted((quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~"))
                   for k, v in parse_qsl(query, keep_blank_values=True))
    return "&".join(f"{k}={v}" for k, v in pairs)


def expected_authorization(method, path, query, headers, signed, access, secret, region, date, payload):
    creq = "\n".join([
        method,
        quote(unquote(path), safe="/-_.~"),
        canonical_query(query),
        "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed),
        ";".join(signed),
        payload,
    ])
    scope = f"{date[:8]}/{region}/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (date[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    return f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={';'.join(signed)}, Signature={sig}"


def completed_parts(body):
    """The (part number, ETag) pairs of a CompleteMultipartUpload body, in the order listed, or
    None when it is not one. S3 reads XML: element order inside <Part> and the namespace
    (http://s3.amazonaws.com/doc/2006-03-01/, which AWS's SDKs send) do not matter."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None

    def local(tag):
        return tag.rsplit("}", 1)[-1]

    if local(root.tag) != "CompleteMultipartUpload":
        return None
    listed = []
    for part in root:
        if local(part.tag) != "Part":
            continue
        fields = {local(child.tag): (child.text or "").strip() for child in part}
        if not fields.get("PartNumber", "").isdigit() or "ETag" not in fields:
            return None
        listed.append((int(fields["PartNumber"]), fields["ETag"]))
    return listed


# How far a request's x-amz-date may be from the server's clock.
SKEW_SECONDS = 15 * 60

# The bytes before the last key listed in a continuation token: with them its base64 starts
# `+/`, and the padding gives `=` when the key's length calls for it.
TOKEN_MARK = b"\xfb\xff"


def list_token(last_key):
    """The continuation token after `last_key`: opaque to the client, as S3's are."""
    return base64.b64encode(TOKEN_MARK + last_key.encode()).decode()


def list_token_key(token):
    """The key a token was made after, or None when the token is not one of ours."""
    try:
        raw = base64.b64decode(token, validate=True)
    except ValueError:
        return None
    if not raw.startswith(TOKEN_MARK):
        return None
    try:
        return raw[len(TOKEN_MARK):].decode()
    except UnicodeDecodeError:
        return None


# The API key's preferred Object Storage project, unless --preferred-project says another.
PREFERRED_PROJECT = "55555555-5555-4555-8555-555555555555"


def main():
    ap = argparse.ArgumentParser()
    for name in ("--root", "--port-file", "--log", "--access-key", "--secret", "--region"):
        ap.add_argument(name, required=True)
    ap.add_argument("--preferred-project", default=PREFERRED_PROJECT)
    args = ap.parse_args()
    os.makedirs(args.root, exist_ok=True)
    projects = args.root.rstrip("/") + ".projects"
    os.makedirs(projects, exist_ok=True)
    # Objects are written here, then renamed into the root: never seen half-written.
    staging = args.root.rstrip("/") + ".staging"
    os.makedirs(staging, exist_ok=True)
    log = open(args.log, "a", buffering=1)
    # Reentrant: an answer sent while the state is locked logs itself under the same lock.
    lock = threading.RLock()
    changed = threading.Condition(lock)  # notified when a request arrives or is answered
    uploads = {}  # upload id -> {bucket, key, meta, parts: {n: (etag, md5 digest, bytes)}, in_flight}
    objects = {}  # (bucket, key) -> {etag, meta: {x-amz-meta-*: value}} of the stored object
    faults = []
    answered_queries = []  # the query of every request answered, for holds
    listing = {"page_size": 1000}  # S3's most keys a ListObjectsV2 page
    clock = {"offset_seconds": 0}
    interrupt = {"nth": None, "marker": None, "changes": 0}

    def obj_path(bucket, key):
        return os.path.join(args.root, bucket, key.replace("/", "%2F"))

    def store(bucket, key, chunks, etag, meta):
        """Writes an object whole (staged, then renamed) and records its ETag and metadata."""
        tmp = os.path.join(staging, str(uuid.uuid4()))
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        with lock:
            os.replace(tmp, obj_path(bucket, key))
            objects[(bucket, key)] = {"etag": etag, "meta": meta}

    def stored(bucket, key, path):
        """The ETag and metadata of a stored object."""
        with lock:
            found = objects.get((bucket, key))
        if found is None:
            with open(path, "rb") as f:
                found = {"etag": '"' + hashlib.md5(f.read()).hexdigest() + '"', "meta": {}}
        return found

    class Handler(loopback.Handler):
        def answer(self, status):
            """Logs the request as answered `status`, before the answer goes out: whoever reads
            the log after the answer finds it there."""
            if self.entry is None:
                return
            entry, self.entry = self.entry, None
            entry["status"] = status
            with lock:
                up = uploads.get(self.part_of) if self.part_of else None
                if up and "in_flight" in entry:
                    up["in_flight"] -= 1
                log.write(json.dumps(entry) + "\n")
                answered_queries.append(entry["query"])
                changed.notify_all()

        def send(self, status, body=b"", headers=None):
            if isinstance(body, str):
                body = body.encode()
            self.answer(status)
            if self.interrupted():
                return
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def interrupted(self):
            """Whether this request is the one to interrupt: it was served; it is not answered."""
            if self.command in ("GET", "HEAD") or urlsplit(self.path).path.startswith("/__standin/"):
                return False
            with lock:
                interrupt["changes"] += 1
                if interrupt["changes"] != interrupt["nth"]:
                    return False
            with open(interrupt["marker"], "w") as f:
                f.write(f"{self.command} {urlsplit(self.path).path}\n")
            time.sleep(HOLD_SECONDS)
            self.close_connection = True
            return True

        def error(self, status, code, message):
            self.send(status, f"<Error><Code>{code}</Code><Message>{message}</Message></Error>",
                      {"Content-Type": "application/xml"})

        def do(self):
            url = urlsplit(self.path)
            self.entry = None
            if url.path == "/__standin/faults":
                body = self.body_bytes()
                with lock:
                    # A hold waits for an answer given after the fault was set, not for one
                    # of an earlier upload.
                    for fault in json.loads(body):
                        fault["answered_before"] = len(answered_queries)
                        faults.append(fault)
                return self.send(200, b"{}")
            if url.path == "/__standin/interrupt":
                with lock:
                    interrupt.update(json.loads(self.body_bytes()))
                    so_far = interrupt["changes"]
                return self.send(200, json.dumps({"changes_so_far": so_far}))
            if url.path == "/__standin/clock":
                with lock:
                    clock["offset_seconds"] = float(json.loads(self.body_bytes())["offset_seconds"])
                return self.send(200, b"{}")
            if url.path == "/__standin/listing":
                with lock:
                    listing["page_size"] = int(json.loads(self.body_bytes())["page_size"])
                return self.send(200, b"{}")
            if url.path == "/__standin/signal":
                name = json.loads(self.body_bytes())["name"]
                with lock:
                    answered_queries.append(f"signal={name}")
                    changed.notify_all()
                return self.send(200, b"{}")
            q = dict(parse_qsl(url.query, keep_blank_values=True))
            self.part_of = q.get("uploadId") if self.command == "PUT" and "partNumber" in q else None
            entry = {"method": self.command, "path": url.path, "query": url.query}
            if self.part_of:
                with lock:
                    up = uploads.get(self.part_of)
                    if up:
                        up["in_flight"] += 1
                        entry["in_flight"] = up["in_flight"]
                        changed.notify_all()
            self.entry = entry
            try:
                self.handle_request(url, q, entry)
            finally:
                self.answer(None)  # no answer went out (the connection broke): logged all the same

        def handle_request(self, url, q, entry):
            body = self.body_bytes()
            entry["size"] = len(body)
            with lock:
                fault = next((f for f in faults if f["count"] > 0 and f.get("method", self.command) == self.command
                              and re.search(f.get("path", ""), url.path)
                              and re.search(f.get("query", ""), url.query)), None)
                if fault:
                    fault["count"] -= 1
            if fault and "status" in fault:
                entry["fault"] = fault["status"]
                return self.error(fault["status"], "SlowDown", "stand-in fault")
            # The signature, recomputed.
            headers = {k.lower(): v for k, v in self.headers.items()}
            auth = headers.get("authorization", "")
            m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, "
                         r"SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$", auth)
            payload = headers.get("x-amz-content-sha256", "")
            date = headers.get("x-amz-date", "")
            problems = []
            if not m:
                problems.append("no AWS4-HMAC-SHA256 Authorization")
            else:
                access, _, region, signed = m.group(1), m.group(2), m.group(3), m.group(4).split(";")
                key_id, _, project = access.partition("@")
                if key_id != args.access_key:
                    problems.append(f"access key {access}")
                self.project = project or args.preferred_project
                if region != args.region:
                    problems.append(f"region {region}")
                # S3 wants every x-amz-* header of the request signed (AWS, "Signature
                # Calculations for the Authorization Header": CanonicalHeaders).
                amz = sorted(h for h in headers if h.startswith("x-amz-"))
                for needed in sorted({"host", "x-amz-content-sha256", "x-amz-date", *amz}):
                    if needed not in signed:
                        problems.append(f"{needed} is not signed")
                want = expected_authorization(self.command, url.path, url.query, headers, signed,
                                              access, args.secret, args.region, date, payload)
                if auth != want:
                    problems.append("SignatureDoesNotMatch")
            # UNSIGNED-PAYLOAD is S3's way to sign the headers only (curl uses it for uploads).
            if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
                problems.append("XAmzContentSHA256Mismatch")
            if not problems:
                try:
                    sent = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
                except ValueError:
                    sent = None
                with lock:
                    now = time.time() + clock["offset_seconds"]
                if sent is None or abs(now - sent) > SKEW_SECONDS:
                    entry["refused"] = ["RequestTimeTooSkewed"]
                    return self.error(403, "RequestTimeTooSkewed",
                                      "The difference between the request time and the current time is too large.")
            if problems:
                entry["refused"] = problems
                return self.error(403, problems[-1] if "Mismatch" in problems[-1] else "SignatureDoesNotMatch",
                                  "; ".join(problems))
            md5 = hashlib.md5(body).digest() if self.command == "PUT" else None
            if "content-md5" in headers and base64.b64decode(headers["content-md5"]) != md5:
                entry["refused"] = ["BadDigest"]
                return self.error(400, "BadDigest", "The Content-MD5 you specified did not match what we received.")
            if fault:
                with lock:
                    up = uploads.get(self.part_of) if self.part_of else None
                if "gather" in fault:
                    def release():
                        return up is not None and up["in_flight"] >= fault["gather"]
                else:
                    def release():
                        return any(re.search(fault["hold_until"], a)
                                   for a in answered_queries[fault["answered_before"]:])
                with changed:
                    released = changed.wait_for(release, HOLD_SECONDS)
                if not released:
                    entry["fault"] = "held, never released"
                    return self.error(503, "SlowDown", f"held for {fault}, which never came")
                entry["held"] = True
            self.serve(url, q, body, md5)

        def serve(self, url, q, body, md5):
            parts = url.path.lstrip("/").split("/", 1)
            bucket = parts[0]
            key = unquote(parts[1]) if len(parts) > 1 else ""
            bdir = os.path.join(args.root, bucket)
            method = self.command
            if not key:
                with lock:
                    if method == "HEAD":
                        return self.send(200 if os.path.isdir(bdir) else 404)
                    if method == "PUT":
                        if os.path.isdir(bdir):
                            return self.error(409, "BucketAlreadyOwnedByYou", "bucket exists")
                        os.makedirs(bdir)
                        with open(os.path.join(projects, bucket), "w") as f:
                            f.write(self.project)
                        return self.send(200)
                    if not os.path.isdir(bdir):
                        return self.error(404, "NoSuchBucket", "The specified bucket does not exist")
                    if method == "DELETE":
                        if os.listdir(bdir):
                            return self.error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty")
                        os.rmdir(bdir)
                        os.remove(os.path.join(projects, bucket))
                        return self.send(204)
                    prefix = q.get("prefix", "")
                    if method == "GET" and q.get("list-type") == "2":
                        keys = sorted((unquote(k).replace("%2F", "/") for k in os.listdir(bdir)),
                                      key=lambda k: k.encode())
                        keys = [k for k in keys if k.startswith(prefix)]
                        try:
                            max_keys = min(int(q.get("max-keys", "1000")), 1000)
                        except ValueError:
                            return self.error(400, "InvalidArgument", "Provided max-keys not an integer or within integer range")
                        token = q.get("continuation-token")
                        if token is not None:
                            after = list_token_key(token)
                            if after is None:
                                return self.error(400, "InvalidArgument", "The continuation token provided is incorrect")
                            keys = [k for k in keys if k.encode() > after.encode()]
                        with lock:
                            size = min(max_keys, listing["page_size"])
                        page, more = keys[:size], len(keys) > size
                        xml = "<ListBucketResult><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>{}</MaxKeys>{}<IsTruncated>{}</IsTruncated>{}{}</ListBucketResult>".format(
                            bucket, escape(prefix), len(page), max_keys,
                            f"<ContinuationToken>{escape(token)}</ContinuationToken>" if token is not None else "",
                            "true" if more else "false",
                            f"<NextContinuationToken>{list_token(page[-1])}</NextContinuationToken>" if more else "",
                            "".join(f"<Contents><Key>{escape(k)}</Key></Contents>" for k in page))
                        return self.send(200, xml, {"Content-Type": "application/xml"})
                    if method == "GET" and "uploads" in q:
                        pending = sorted((up["key"], uid) for uid, up in uploads.items()
                                         if up["bucket"] == bucket and up["key"].startswith(prefix))
                        xml = "<ListMultipartUploadsResult><Bucket>{}</Bucket><IsTruncated>false</IsTruncated>{}</ListMultipartUploadsResult>".format(
                            bucket, "".join(f"<Upload><Key>{k}</Key><UploadId>{u}</UploadId></Upload>" for k, u in pending))
                        return self.send(200, xml, {"Content-Type": "application/xml"})
                return self.error(400, "InvalidRequest", "not modelled")
            if not os.path.isdir(bdir):
                return self.error(404, "NoSuchBucket", "The specified bucket does not exist")
            path = obj_path(bucket, key)
            meta = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-amz-meta-")}
            if method == "PUT" and "uploadId" in q:
                number = q.get("partNumber", "")
                if not number.isdigit() or not 1 <= int(number) <= MAX_PART_NUMBER:
                    return self.error(400, "InvalidArgument",
                                      f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive")
                etag = '"' + md5.hex() + '"'
                with lock:
                    up = uploads.get(q["uploadId"])
                    if not up or (up["bucket"], up["key"]) != (bucket, key):
                        return self.error(404, "NoSuchUpload", "The specified upload does not exist")
                    up["parts"][int(number)] = (etag, md5, body)
                return self.send(200, b"", {"ETag": etag})
            if method == "PUT":
                etag = '"' + md5.hex() + '"'
                store(bucket, key, [body], etag, meta)
                return self.send(200, b"", {"ETag": etag})
            if method == "POST" and "uploads" in q:
                uid = str(uuid.uuid4())
                with lock:
                    uploads[uid] = {"bucket": bucket, "key": key, "meta": meta, "parts": {}, "in_flight": 0}
                xml = f"<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><Key>{key}</Key><UploadId>{uid}</UploadId></InitiateMultipartUploadResult>"
                return self.send(200, xml, {"Content-Type": "application/xml"})
            if method == "POST" and "uploadId" in q:
                listed = completed_parts(body)
                if not listed:
                    return self.error(400, "MalformedXML", "not a CompleteMultipartUpload with parts")
                numbers = [n for n, _ in listed]
                if numbers != sorted(set(numbers)):
                    return self.error(400, "InvalidPartOrder", "The list of parts was not in ascending order")
                with lock:
                    up = uploads.get(q["uploadId"])
                    if not up or (up["bucket"], up["key"]) != (bucket, key):
                        return self.error(404, "NoSuchUpload", "The specified upload does not exist")
                    chosen = []
                    for i, (n, etag) in enumerate(listed):
                        part = up["parts"].get(n)
                        if not part or part[0] != etag:
                            return self.error(400, "InvalidPart", f"part {n}")
                        if i < len(listed) - 1 and len(part[2]) < MIN_PART:
                            return self.error(400, "EntityTooSmall", f"part {n} is {len(part[2])} bytes")
                        chosen.append(part)
                    del uploads[q["uploadId"]]
                etag = '"{}-{}"'.format(hashlib.md5(b"".join(p[1] for p in chosen)).hexdigest(), len(chosen))
                store(bucket, key, (p[2] for p in chosen), etag, up["meta"])
                return self.send(200, f"<CompleteMultipartUploadResult><Key>{key}</Key><ETag>{etag}</ETag></CompleteMultipartUploadResult>",
                                 {"Content-Type": "application/xml"})
            if method == "DELETE" and "uploadId" in q:
                with lock:
                    if uploads.pop(q["uploadId"], None) is None:
                        return self.error(404, "NoSuchUpload", "The specified upload does not exist")
                return self.send(204)
            if method == "DELETE":
                with lock:
                    if os.path.exists(path):
                        os.remove(path)
                    objects.pop((bucket, key), None)
                return self.send(204)
            if method in ("GET", "HEAD"):
                if not os.path.exists(path):
                    if method == "HEAD":
                        return self.send(404)
                    return self.error(404, "NoSuchKey", "The specified key does not exist.")
                found = stored(bucket, key, path)
                if method == "HEAD":
                    self.answer(200)
                    self.send_response(200)
                    self.send_header("Content-Length", str(os.path.getsize(path)))
                    self.send_header("ETag", found["etag"])
                    for k, v in found["meta"].items():
                        self.send_header(k, v)
                    self.end_headers()
                    return
                with open(path, "rb") as f:
                    return self.send(200, f.read(), {"ETag": found["etag"], **found["meta"]})
            return self.error(400, "InvalidRequest", "not modelled")

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do

    loopback.listen(Handler, args.port_file).serve_forever()


if __name__ == "__main__":
    main()
