"""A local stand-in for the Hugging Face hub (a helper module for tests, threading + http.server).

It answers the requests huggingface_hub makes for a download, with the headers it reads:
  GET  /api/models/REPO[/revision/REV]?blobs=true   model info: siblings with size and lfs sha256
  HEAD /REPO/resolve/REV/FILE                        X-Repo-Commit, X-Linked-Etag, X-Linked-Size,
                                                     ETag, Content-Length
  GET  /REPO/resolve/REV/FILE                        the bytes; Range: bytes=N- gives 206
Errors carry X-Error-Code as the hub's do (RepoNotFound, EntryNotFound, GatedRepo).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "c0ffee" + "0" * 34


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)  # files served with one byte changed
    ranges: list[str] = field(default_factory=list)  # Range headers of the GETs, in order
    gets: int = 0

    def start(self) -> str:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._resolve(self, body=False)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path.startswith("/api/models/"):
                    hub._model_info(self, unquote(path[len("/api/models/"):]))
                else:
                    hub._resolve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _model_info(self, h: BaseHTTPRequestHandler, rest: str) -> None:
        repo = rest.split("/revision/")[0]
        if repo not in self.repos:
            return _error(h, 404, "RepoNotFound")
        siblings = []
        for name, data in self.repos[repo].items():
            sha = hashlib.sha256(data).hexdigest()
            siblings.append({"rfilename": name, "size": len(data), "blobId": sha[:40],
                             "lfs": {"size": len(data), "sha256": sha, "pointerSize": 134}})
        body = json.dumps({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                           "gated": repo in self.gated, "siblings": siblings}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _resolve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        match = re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", unquote(urlsplit(h.path).path))
        if match is None or match[1] not in self.repos:
            return _error(h, 404, "RepoNotFound")
        repo, filename = match[1], match[3]
        if repo in self.gated:
            return _error(h, 401, "GatedRepo")
        data = self.repos[repo].get(filename)
        if data is None:
            return _error(h, 404, "EntryNotFound", commit=True)
        sha = hashlib.sha256(data).hexdigest()
        if filename in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        if body:
            self.gets += 1
            wanted = h.headers.get("Range")
            self.ranges.append(wanted or "")
            ranged = re.fullmatch(r"bytes=(\d+)-", wanted or "")
            start = int(ranged[1]) if ranged else 0
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("X-Linked-Etag", f'"{sha}"')
        h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("ETag", f'"{sha}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if body:
            h.wfile.write(data[start:])


def _error(h: BaseHTTPRequestHandler, status: int, code: str, commit: bool = False) -> None:
    body = json.dumps({"error": code}).encode()
    h.send_response(status)
    h.send_header("X-Error-Code", code)
    if commit:
        h.send_header("X-Repo-Commit", COMMIT)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)
