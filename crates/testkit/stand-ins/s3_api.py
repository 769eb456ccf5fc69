#!/usr/bin/env python3
"""Object Storage (S3 API) stand-in, path-style, on loopback, for the scw-infra tests.

Contract enforced: AWS Signature Version 4 as S3 checks it, implemented here independently of
the tool (hashlib/hmac): every request must carry `Authorization: AWS4-HMAC-SHA256` for the
expected access key, region and service `s3`, sign `host`, `x-amz-date`, every other `x-amz-*` header and
`x-amz-content-sha256`, and the `x-amz-content-sha256` must be the body's sha256 (or `UNSIGNED-PAYLOAD`); otherwise it
answers 403 `SignatureDoesNotMatch` (or `XAmzContentSHA256Mismatch`) and logs the request as
refused. Buckets and objects live as files under --root (so the Scaleway stand-in can check that
an imported object exists). Multipart uploads follow S3's rules: every part but the last is at
least 5 MiB, the completion lists parts in order with their ETags. User-defined metadata
(`x-amz-meta-*` request headers of a PUT or of the CreateMultipartUpload that makes the object)
is kept with the object, replaced by the next PUT of the key, and returned by HEAD (AWS, "Working
with object metadata": user-defined metadata is set when the object is uploaded and returned as
`x-amz-meta-*` response headers; an object's metadata cannot be changed but by replacing it).

Usage: s3_api.py --root DIR --port-file F --log F --access-key A --secret S --region R
Control: POST /__standin/faults [{method, path (regex), status, count}].
"""

import argparse
import hashlib
import hmac
import json
import os
import re
import threading
import uuid
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import loopback  # loopback.py, beside this script

MIN_PART = 5 * 1024 * 1024


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


def main():
    ap = argparse.ArgumentParser()
    for name in ("--root", "--port-file", "--log", "--access-key", "--secret", "--region"):
        ap.add_argument(name, required=True)
    args = ap.parse_args()
    os.makedirs(args.root, exist_ok=True)
    log = open(args.log, "a", buffering=1)
    lock = threading.Lock()
    uploads = {}  # upload id -> {bucket, key, meta, parts: {n: (etag, bytes)}}
    metadata = {}  # (bucket, key) -> {x-amz-meta-*: value}
    faults = []

    def obj_path(bucket, key):
        return os.path.join(args.root, bucket, key.replace("/", "%2F"))

    class Handler(loopback.Handler):
        def send(self, status, body=b"", headers=None):
            if isinstance(body, str):
                body = body.encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def error(self, status, code, message):
            self.send(status, f"<Error><Code>{code}</Code><Message>{message}</Message></Error>",
                      {"Content-Type": "application/xml"})

        def do(self):
            url = urlsplit(self.path)
            body = self.body_bytes()
            if url.path == "/__standin/faults":
                with lock:
                    faults.extend(json.loads(body))
                return self.send(200, b"{}")
            entry = {"method": self.command, "path": url.path, "query": url.query, "size": len(body)}
            with lock:
                fault = next((f for f in faults if f["count"] > 0 and f.get("method", self.command) == self.command
                              and re.search(f["path"], url.path)), None)
                if fault:
                    fault["count"] -= 1
            if fault:
                entry["fault"] = fault["status"]
                log.write(json.dumps(entry) + "\n")
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
                if access != args.access_key:
                    problems.append(f"access key {access}")
                if region != args.region:
                    problems.append(f"region {region}")
                # S3 wants every x-amz-* header of the request signed (AWS, "Signature
                # Calculations for the Authorization Header": CanonicalHeaders).
                amz = sorted(h for h in headers if h.startswith("x-amz-"))
                for needed in sorted({"host", "x-amz-content-sha256", "x-amz-date", *amz}):
                    if needed not in signed:
                        problems.append(f"{needed} is not signed")
                want = expected_authorization(self.command, url.path, url.query, headers, signed,
                                              args.access_key, args.secret, args.region, date, payload)
                if auth != want:
                    problems.append("SignatureDoesNotMatch")
            # UNSIGNED-PAYLOAD is S3's way to sign the headers only (curl uses it for uploads).
            if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
                problems.append("XAmzContentSHA256Mismatch")
            if problems:
                entry["refused"] = problems
                log.write(json.dumps(entry) + "\n")
                return self.error(403, problems[-1] if "Mismatch" in problems[-1] else "SignatureDoesNotMatch",
                                  "; ".join(problems))
            log.write(json.dumps(entry) + "\n")
            with lock:
                self.serve(url, body)

        def serve(self, url, body):
            parts = url.path.lstrip("/").split("/", 1)
            bucket = parts[0]
            key = unquote(parts[1]) if len(parts) > 1 else ""
            q = dict(parse_qsl(url.query, keep_blank_values=True))
            bdir = os.path.join(args.root, bucket)
            method = self.command
            if not key:
                if method == "HEAD":
                    return self.send(200 if os.path.isdir(bdir) else 404)
                if method == "PUT":
                    if os.path.isdir(bdir):
                        return self.error(409, "BucketAlreadyOwnedByYou", "bucket exists")
                    os.makedirs(bdir)
                    return self.send(200)
                if not os.path.isdir(bdir):
                    return self.error(404, "NoSuchBucket", "The specified bucket does not exist")
                if method == "DELETE":
                    if os.listdir(bdir):
                        return self.error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty")
                    os.rmdir(bdir)
                    return self.send(204)
                if method == "GET" and q.get("list-type") == "2":
                    prefix = q.get("prefix", "")
                    keys = sorted(unquote(k) for k in os.listdir(bdir))
                    keys = [k.replace("%2F", "/") for k in keys]
                    keys = [k for k in keys if k.startswith(prefix)]
                    xml = "<ListBucketResult><Name>{}</Name><IsTruncated>false</IsTruncated>{}</ListBucketResult>".format(
                        bucket, "".join(f"<Contents><Key>{k}</Key></Contents>" for k in keys))
                    return self.send(200, xml, {"Content-Type": "application/xml"})
                return self.error(400, "InvalidRequest", "not modelled")
            if not os.path.isdir(bdir):
                return self.error(404, "NoSuchBucket", "The specified bucket does not exist")
            path = obj_path(bucket, key)
            meta = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("x-amz-meta-")}
            if method == "HEAD":
                if not os.path.exists(path):
                    return self.send(404)
                self.send_response(200)
                self.send_header("Content-Length", str(os.path.getsize(path)))
                for k, v in metadata.get((bucket, key), {}).items():
                    self.send_header(k, v)
                self.end_headers()
                return
            if method == "PUT" and "uploadId" in q:
                up = uploads.get(q["uploadId"])
                if not up:
                    return self.error(404, "NoSuchUpload", "no such upload")
                etag = '"' + hashlib.md5(body).hexdigest() + '"'
                up["parts"][int(q["partNumber"])] = (etag, body)
                return self.send(200, b"", {"ETag": etag})
            if method == "PUT":
                with open(path, "wb") as f:
                    f.write(body)
                metadata[(bucket, key)] = meta
                return self.send(200, b"", {"ETag": '"' + hashlib.md5(body).hexdigest() + '"'})
            if method == "POST" and "uploads" in q:
                uid = str(uuid.uuid4())
                uploads[uid] = {"bucket": bucket, "key": key, "meta": meta, "parts": {}}
                xml = f"<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><Key>{key}</Key><UploadId>{uid}</UploadId></InitiateMultipartUploadResult>"
                return self.send(200, xml, {"Content-Type": "application/xml"})
            if method == "POST" and "uploadId" in q:
                up = uploads.get(q["uploadId"])
                if not up:
                    return self.error(404, "NoSuchUpload", "no such upload")
                listed = re.findall(r"<Part><PartNumber>(\d+)</PartNumber><ETag>([^<]+)</ETag></Part>", body.decode())
                numbers = [int(n) for n, _ in listed]
                if not listed or numbers != sorted(numbers):
                    return self.error(400, "InvalidPartOrder", "parts not in order")
                data = b""
                for i, (n, etag) in enumerate(listed):
                    part = up["parts"].get(int(n))
                    if not part or part[0] != etag.replace("&quot;", '"'):
                        return self.error(400, "InvalidPart", f"part {n}")
                    if i < len(listed) - 1 and len(part[1]) < MIN_PART:
                        return self.error(400, "EntityTooSmall", f"part {n} is {len(part[1])} bytes")
                    data += part[1]
                with open(path, "wb") as f:
                    f.write(data)
                metadata[(bucket, key)] = up["meta"]
                del uploads[q["uploadId"]]
                return self.send(200, f"<CompleteMultipartUploadResult><Key>{key}</Key></CompleteMultipartUploadResult>",
                                 {"Content-Type": "application/xml"})
            if method == "DELETE" and "uploadId" in q:
                uploads.pop(q["uploadId"], None)
                return self.send(204)
            if method == "DELETE":
                if os.path.exists(path):
                    os.remove(path)
                metadata.pop((bucket, key), None)
                return self.send(204)
            if method == "GET":
                if not os.path.exists(path):
                    return self.error(404, "NoSuchKey", "The specified key does not exist.")
                with open(path, "rb") as f:
                    return self.send(200, f.read())
            return self.error(400, "InvalidRequest", "not modelled")

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do

    loopback.listen(Handler, args.port_file).serve_forever()


if __name__ == "__main__":
    main()
