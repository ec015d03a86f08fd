#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub on 127.0.0.1, for tests/e2e/weights.sh
(Python's standard library only).

    fake_hub.py ROOT PORT_FILE LOG_FILE

serves ROOT/ORG/NAME/FILE the way the hub serves a file stored in LFS:
GET /ORG/NAME/resolve/REVISION/FILE answers 302 with the file's SHA-256 in
X-Linked-Etag and its size in X-Linked-Size, and the Location of the storage
(/cdn/..., on the host "localhost", so a client must not send it the hub's
token); the storage honours "Range: bytes=N-" with 206. The port it listens
on is written to PORT_FILE; one line per hub and storage request to LOG_FILE.

It also serves ROOT/ORG/NAME/TAG/FILE the way GitHub serves a release's
asset (Ultralytics' weights): GET /ORG/NAME/releases/download/TAG/FILE
answers 302 to the storage (on "localhost" too) with no SHA-256 and no size
in any header, the storage's Content-Length being the only size; and
ROOT/torchvision/models/FILE the way download.pytorch.org serves
torchvision's weights: GET /models/FILE answers 200 with the file.

What goes wrong is chosen by words in the repository's NAME:
  gated     401 without "Authorization: Bearer secret"
  flaky     the first two resolve requests answer 503
  badhash   X-Linked-Etag announces another SHA-256
  chain     the redirect goes through a second hop (307)
  truncate  the first storage response ends after half the file
  stall     the first storage response sends half, then nothing for 30 s
  trickle   every storage response sends 16 bytes, then 1 byte every 0.2 s
            for 30 s (a server that never makes real progress)
  slow      the file is sent in 8 parts, 0.1 s apart
  crawl     the file is sent in 8 parts, 0.5 s apart (~75 kB/s: above the
            minimum rate, too slow for a deadline of 1 s)
"""
import hashlib
import http.server
import os
import sys
import threading
import time

ROOT, PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2], sys.argv[3]
counts = {}
lock = threading.Lock()


def count(key):
    with lock:
        counts[key] = counts.get(key, 0) + 1
        return counts[key]


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        parts = self.path.split("/")
        if len(parts) == 7 and parts[3:5] == ["releases", "download"]:
            return self.release(parts[1], parts[2], parts[5], parts[6])
        if len(parts) == 3 and parts[1] == "models":
            return self.storage("torchvision", "models", parts[2])
        if len(parts) >= 6 and parts[3] == "resolve":
            return self.resolve(parts[1], parts[2], "/".join(parts[5:]))
        if parts[1] in ("hop", "cdn") and len(parts) >= 5:
            if parts[1] == "hop":
                return self.reply(307, [("Location", "/cdn/" + "/".join(parts[2:]))])
            return self.storage(parts[2], parts[3], "/".join(parts[4:]))
        self.reply(404, body=b"no such page")

    def resolve(self, org, name, file):
        path = os.path.join(ROOT, org, name, file)
        with open(LOG_FILE, "a") as log:
            log.write(f"resolve {org}/{name}/{file}\n")
        if "gated" in name and self.headers.get("Authorization") != "Bearer secret":
            return self.reply(401, [("X-Error-Code", "GatedRepo")], b"gated")
        if "flaky" in name and count("flaky " + file) <= 2:
            return self.reply(503, body=b"busy")
        if not os.path.isfile(path):
            return self.reply(404, [("X-Error-Code", "EntryNotFound")], b"not found")
        data = open(path, "rb").read()
        sha256 = hashlib.sha256(data).hexdigest()
        if "badhash" in name:
            sha256 = hashlib.sha256(data + b"x").hexdigest()
        port = self.server.server_address[1]
        hop = "hop" if "chain" in name else "cdn"
        self.reply(302, [("Location", f"http://localhost:{port}/{hop}/{org}/{name}/{file}"),
                         ("X-Linked-Etag", f'"{sha256}"'), ("X-Linked-Size", str(len(data))),
                         ("X-Repo-Commit", "0" * 40), ("ETag", f'"{sha256}"')])

    def release(self, org, name, tag, file):
        with open(LOG_FILE, "a") as log:
            log.write(f"release {org}/{name}/{tag}/{file}\n")
        if not os.path.isfile(os.path.join(ROOT, org, name, tag, file)):
            return self.reply(404, body=b"Not Found")
        port = self.server.server_address[1]
        self.reply(302, [("Location", f"http://localhost:{port}/cdn/{org}/{name}/{tag}/{file}")])

    def storage(self, org, name, file):
        key = f"{org}/{name}/{file}"
        attempt = count("storage " + key)
        range_header = self.headers.get("Range", "")
        with open(LOG_FILE, "a") as log:
            log.write(f"storage {key} attempt={attempt} range={range_header or '-'} "
                      f"auth={'yes' if self.headers.get('Authorization') else 'no'}\n")
        if self.headers.get("Authorization"):
            return self.reply(400, body=b"storage got the hub token")
        data = open(os.path.join(ROOT, org, name, file), "rb").read()
        start = int(range_header[6:-1]) if range_header.startswith("bytes=") else 0
        if start >= len(data) and data:
            return self.reply(416, [("Content-Range", f"bytes */{len(data)}")])
        body = data[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        broken = attempt == 1 and ("truncate" in name or "stall" in name)
        if broken:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if "stall" in name:
                time.sleep(30)
            self.close_connection = True
            return
        if "trickle" in name:
            self.wfile.write(body[:16])
            self.wfile.flush()
            for offset in range(16, min(len(body), 16 + 150)):
                time.sleep(0.2)
                self.wfile.write(body[offset:offset + 1])
                self.wfile.flush()
            self.close_connection = True
            return
        pieces = 8 if "slow" in name or "crawl" in name else 1
        step = (len(body) + pieces - 1) // pieces or 1
        for offset in range(0, len(body), step):
            self.wfile.write(body[offset:offset + step])
            self.wfile.flush()
            if pieces > 1:
                time.sleep(0.5 if "crawl" in name else 0.1)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hangs up on a stalled or cut transfer is expected


server = Server(("127.0.0.1", 0), Hub)
with open(PORT_FILE + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
