"""A small stand-in for the Hugging Face Hub, served on 127.0.0.1 for the tests.

It implements only what the real ``huggingface_hub`` client (2.x) touches for a
minimal upload and download of a dataset repo:

    POST /api/repos/create                          create (409 when it exists)
    POST /api/validate-yaml                         README metadata check (parses the YAML front matter)
    POST /api/datasets/{id}/branch/{name}           create a branch
    POST /api/datasets/{id}/preupload/{rev}         every file answered "regular" (inline upload)
    POST /api/datasets/{id}/commit/{rev}            NDJSON commit with base64 files
    GET  /api/datasets/{id}[/revision/{rev}]        repo info (sha, siblings)
    GET  /api/datasets/{id}/tree/{rev}[/{path}]     file listing
    HEAD/GET /datasets/{id}/resolve/{rev}/{path}    file bytes with X-Repo-Commit, ETag, Content-Length

Test hooks: ``tokens`` (accepted bearer tokens), ``fail_commit`` (HTTP status returned by
the next commit), ``corrupt`` (repo path -> bytes transform applied when serving),
``requests`` (log of (method, path)), ``unhandled`` (requests it did not know).
Not part of kbench.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id: str, private: bool):
        self.repo_id = repo_id
        self.private = private
        self.commits: dict[str, dict] = {}
        self.refs: dict[str, str] = {}
        self.new_commit("main", None, {".gitattributes": GITATTRIBUTES}, "initial commit")

    def new_commit(self, branch: str, parent: str | None, files: dict, message: str) -> str:
        oid = hashlib.sha1(f"{self.repo_id}{parent}{message}{time.time_ns()}{len(self.commits)}".encode()).hexdigest()
        self.commits[oid] = {"parent": parent, "files": files, "message": message}
        self.refs[branch] = oid
        return oid

    def resolve(self, rev: str) -> str | None:
        rev = unquote(rev)
        if rev in self.refs:
            return self.refs[rev]
        return rev if rev in self.commits else None


class HubServer:
    """``with HubServer() as hub: ... hub.endpoint ...``"""

    def __init__(self, tokens=("hf_test_token",)):
        self.tokens = set(tokens)
        self.repos: dict[str, Repo] = {}
        self.fail_commit: int | None = None
        self.corrupt: dict[str, callable] = {}
        self.requests: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self.connections: set = set()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:  # also drop kept-alive connections: the Hub is really gone
            for conn in list(self.connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.thread.join(5)

    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def setup(self):
                super().setup()
                with hub.lock:
                    hub.connections.add(self.connection)

            def finish(self):
                with hub.lock:
                    hub.connections.discard(self.connection)
                super().finish()

            def do_GET(self):
                hub._dispatch(self, "GET")

            def do_HEAD(self):
                hub._dispatch(self, "HEAD")

            def do_POST(self):
                hub._dispatch(self, "POST")

        return Handler

    # -- responses -------------------------------------------------------------------
    @staticmethod
    def _send(h, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
        h.send_response(status)
        headers = {"Content-Type": "application/json", **(headers or {})}
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if not head and body:
            h.wfile.write(body)

    def _json(self, h, status: int, obj, headers: dict | None = None):
        self._send(h, status, json.dumps(obj).encode(), headers)

    def _error(self, h, status: int, message: str, code: str | None = None, head: bool = False):
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, status, b"" if head else json.dumps({"error": message}).encode(), headers, head=head)

    def _authorized(self, h) -> bool:
        auth = h.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and auth[len("Bearer "):] in self.tokens

    # -- routing ---------------------------------------------------------------------
    def _dispatch(self, h, method: str):
        url = urlsplit(h.path)
        path, query = url.path, parse_qs(url.query)
        body = b""
        if method == "POST":
            body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self.lock:
            self.requests.append((method, path))
        parts = path.strip("/").split("/")
        try:
            if method == "POST" and path == "/api/repos/create":
                return self._create(h, json.loads(body))
            if method == "POST" and path == "/api/validate-yaml":
                return self._validate_yaml(h, json.loads(body))
            if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
                repo_id = "/".join(parts[2:4])
                rest = parts[4:]
                if method == "GET" and not rest:
                    return self._info(h, repo_id, "main")
                if method == "GET" and rest[0] == "revision" and len(rest) == 2:
                    return self._info(h, repo_id, rest[1])
                if method == "GET" and rest[0] == "tree" and len(rest) >= 2:
                    return self._tree(h, repo_id, rest[1], "/".join(unquote(p) for p in rest[2:]), query)
                if method == "POST" and rest[0] == "preupload" and len(rest) == 2:
                    return self._preupload(h, repo_id, rest[1], json.loads(body))
                if method == "POST" and rest[0] == "commit" and len(rest) == 2:
                    return self._commit(h, repo_id, rest[1], body)
                if method == "POST" and rest[0] == "branch" and len(rest) == 2:
                    return self._branch(h, repo_id, unquote(rest[1]), json.loads(body or b"{}"))
            if parts[0] == "datasets" and len(parts) >= 6 and parts[3] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(h, "/".join(parts[1:3]), parts[4], "/".join(unquote(p) for p in parts[5:]),
                                     head=method == "HEAD")
        except Exception as exc:  # a bug here should show up as a clear 500 in the test
            return self._error(h, 500, f"hubserver error: {type(exc).__name__}: {exc}")
        with self.lock:
            self.unhandled.append((method, path))
        return self._error(h, 404, f"hubserver: no route for {method} {path}", head=method == "HEAD")

    def _repo(self, h, repo_id: str, write: bool = False, head: bool = False) -> Repo | None:
        if h.headers.get("Authorization") and not self._authorized(h):
            self._error(h, 401, "Invalid credentials in Authorization header", head=head)
            return None
        repo = self.repos.get(repo_id)
        if repo is None or ((write or repo.private) and not self._authorized(h)):
            self._error(h, 401 if not self._authorized(h) else 404, "Repository not found", "RepoNotFound", head)
            return None
        return repo

    # -- endpoints -------------------------------------------------------------------
    def _create(self, h, payload):
        if not self._authorized(h):
            return self._error(h, 401, "Invalid credentials in Authorization header")
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        if payload.get("type") != "dataset":
            return self._error(h, 400, "hubserver serves dataset repos only")
        url = f"{self.endpoint}/datasets/{repo_id}"
        with self.lock:
            if repo_id in self.repos:
                return self._json(h, 409, {"error": "You already created this dataset repo", "url": url})
            self.repos[repo_id] = Repo(repo_id, payload.get("visibility") == "private")
        return self._json(h, 200, {"url": url, "name": repo_id})

    def _validate_yaml(self, h, payload):
        content = payload.get("content", "")
        errors = []
        if content.startswith("---\n"):
            try:
                meta = yaml.safe_load(content[4:content.index("\n---", 3)]) or {}
                for cfg in meta.get("configs", []):
                    if not cfg.get("config_name") or not cfg.get("data_files"):
                        errors.append({"message": f"configs: bad entry {cfg!r}"})
            except (yaml.YAMLError, ValueError) as exc:
                errors.append({"message": f"invalid YAML: {exc}"})
        if errors:
            return self._json(h, 400, {"errors": errors})
        return self._json(h, 200, {"errors": [], "warnings": []})

    def _info(self, h, repo_id, rev):
        repo = self._repo(h, repo_id)
        if repo is None:
            return
        oid = repo.resolve(rev)
        if oid is None:
            return self._error(h, 404, f"Invalid rev id: {unquote(rev)}", "RevisionNotFound")
        files = repo.commits[oid]["files"]
        return self._json(h, 200, {
            "_id": repo_id, "id": repo_id, "author": repo_id.split("/")[0], "sha": oid,
            "private": repo.private, "disabled": False, "gated": False, "downloads": 0, "likes": 0,
            "tags": [], "lastModified": "2025-01-01T00:00:00.000Z", "createdAt": "2025-01-01T00:00:00.000Z",
            "siblings": [{"rfilename": p} for p in sorted(files)],
        })

    def _tree(self, h, repo_id, rev, prefix, query):
        repo = self._repo(h, repo_id)
        if repo is None:
            return
        oid = repo.resolve(rev)
        if oid is None:
            return self._error(h, 404, f"Invalid rev id: {unquote(rev)}", "RevisionNotFound")
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        files = repo.commits[oid]["files"]
        out, dirs = [], set()
        for p in sorted(files):
            if prefix and not p.startswith(prefix.rstrip("/") + "/"):
                continue
            rel = p[len(prefix.rstrip("/")) + 1:] if prefix else p
            if "/" in rel:
                d = (prefix.rstrip("/") + "/" if prefix else "") + rel.split("/")[0]
                if d not in dirs:
                    dirs.add(d)
                    out.append({"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest(),
                                "size": 0})
                if not recursive:
                    continue
            out.append({"type": "file", "path": p, "size": len(files[p]), "oid": git_blob_sha1(files[p])})
        return self._json(h, 200, out)

    def _preupload(self, h, repo_id, rev, payload):
        repo = self._repo(h, repo_id, write=True)
        if repo is None:
            return
        if repo.resolve(rev) is None:
            return self._error(h, 404, f"Invalid rev id: {unquote(rev)}", "RevisionNotFound")
        return self._json(h, 200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                             for f in payload["files"]], "commitOid": repo.resolve(rev)})

    def _branch(self, h, repo_id, branch, payload):
        repo = self._repo(h, repo_id, write=True)
        if repo is None:
            return
        with self.lock:
            if branch in repo.refs:
                return self._error(h, 409, "Reference already exists")
            repo.refs[branch] = repo.resolve(payload.get("startingPoint") or "main")
        return self._json(h, 200, {})

    def _commit(self, h, repo_id, rev, body):
        repo = self._repo(h, repo_id, write=True)
        if repo is None:
            return
        if self.fail_commit is not None:
            status, self.fail_commit = self.fail_commit, None
            return self._error(h, status, "hubserver: simulated failure while committing")
        branch = unquote(rev)
        if branch not in repo.refs:
            return self._error(h, 404, f"Invalid rev id: {branch}", "RevisionNotFound")
        with self.lock:
            parent = repo.refs[branch]
            files = dict(repo.commits[parent]["files"])
            summary = ""
            for line in body.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    summary = value["summary"]
                elif key == "file":
                    if value.get("encoding") != "base64":
                        return self._error(h, 400, "hubserver: only base64 files")
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                else:
                    return self._error(h, 400, f"hubserver: unsupported commit operation {key!r}")
            oid = repo.new_commit(branch, parent, files, summary)
        return self._json(h, 200, {"success": True, "commitOid": oid,
                                   "commitUrl": f"{self.endpoint}/datasets/{repo_id}/commit/{oid}"})

    def _resolve(self, h, repo_id, rev, path, head):
        repo = self._repo(h, repo_id, head=head)
        if repo is None:
            return
        oid = repo.resolve(rev)
        if oid is None:
            return self._error(h, 404, f"Invalid rev id: {unquote(rev)}", "RevisionNotFound", head)
        files = repo.commits[oid]["files"]
        if path not in files:
            return self._error(h, 404, "Entry not found", "EntryNotFound", head)
        data = files[path]
        etag = git_blob_sha1(data)
        if path in self.corrupt:
            data = self.corrupt[path](data)
        self._send(h, 200, data, {"Content-Type": "application/octet-stream", "X-Repo-Commit": oid,
                                  "ETag": f'"{etag}"', "Content-Length": str(len(data))}, head=head)
