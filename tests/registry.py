"""A minimal OCI Distribution registry, stdlib only, for the push tests.

No registry image can be pulled where lockguard's tests run, so this one speaks just what
`docker push` and `docker pull` use of the distribution API v2: the version check, blob HEAD/GET,
chunked blob uploads (POST, PATCH, PUT ?digest=, cross-repository mount falling back to an
upload), and manifests by tag or digest. Blobs are verified against their digest before they are
stored; a manifest's digest is the sha256 of the exact bytes it was PUT with. No auth, no
deletes, no catalog. It listens on 127.0.0.1, which the engine treats as an insecure (plain
HTTP) registry by default.

    with Registry(tmp_path) as registry:   # registry.host == "127.0.0.1:<port>"
        ...
        registry.fail["manifest_put"] = 500   # answer that status to every manifest PUT
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

_NAME = r"(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
_DIGEST = r"sha256:[0-9a-f]{64}"
_ROUTES = [
    ("base", re.compile(r"/v2/?")),
    ("uploads", re.compile(rf"/v2/{_NAME}/blobs/uploads/?")),
    ("upload", re.compile(rf"/v2/{_NAME}/blobs/uploads/(?P<uuid>[0-9a-f-]{{36}})")),
    ("blob", re.compile(rf"/v2/{_NAME}/blobs/(?P<digest>[^/]+)")),
    ("manifest", re.compile(rf"/v2/{_NAME}/manifests/(?P<ref>[^/]+)")),
]
_CHUNK = 1 << 20


class Registry:
    """The registry's state (a folder) and its server thread; a context manager."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("blobs", "links", "uploads", "manifests", "tags"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.fail: dict[str, int] = {}  # "manifest_put" -> status to answer instead
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status), in order
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.registry = self  # type: ignore[attr-defined]
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Registry":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- storage ---------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest.replace(":", "-")

    def has_blob(self, digest: str, name: str | None = None) -> bool:
        """Whether the blob is stored (and, with `name`, part of that repository: a blob pushed
        to one repository is in another only once it was uploaded or mounted there too)."""
        if re.fullmatch(_DIGEST, digest) is None or not self.blob_path(digest).is_file():
            return False
        return name is None or (self._link(name, digest)).is_file()

    def _link(self, name: str, digest: str) -> Path:
        return self.root / "links" / name / digest.replace(":", "-")

    def link(self, name: str, digest: str) -> None:
        self._link(name, digest).parent.mkdir(parents=True, exist_ok=True)
        self._link(name, digest).touch()

    def manifest(self, name: str, ref: str) -> tuple[bytes, str, str] | None:
        """(body, media type, digest) of `name`'s manifest `ref` (a tag or a digest)."""
        if not re.fullmatch(_DIGEST, ref):
            tag = self.root / "tags" / name / ref
            if not tag.is_file():
                return None
            ref = tag.read_text()
        body = self.root / "manifests" / name / ref.replace(":", "-")
        if not body.is_file():
            return None
        media = body.with_suffix(".type").read_text()
        return body.read_bytes(), media, ref

    def put_manifest(self, name: str, ref: str, body: bytes, media: str) -> str:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if re.fullmatch(_DIGEST, ref) and ref != digest:
            raise ValueError(f"manifest digest {digest} is not {ref}")
        folder = self.root / "manifests" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / digest.replace(":", "-")).write_bytes(body)
        (folder / digest.replace(":", "-")).with_suffix(".type").write_text(media)
        if not re.fullmatch(_DIGEST, ref):
            tag = self.root / "tags" / name / ref
            tag.parent.mkdir(parents=True, exist_ok=True)
            tag.write_text(digest)
        return digest


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the engine keeps its connections open between requests
    server_version = "lockguard-test-registry/1"

    @property
    def registry(self) -> Registry:
        return self.server.registry  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass  # quiet: `requests` keeps what a test needs

    # -- plumbing ----------------------------------------------------------------------------

    def _send(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"",
              *, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        with self.registry.lock:
            self.registry.requests.append((self.command, urlsplit(self.path).path, status))

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
        self._send(status, {"Content-Type": "application/json"}, body)

    def _body_chunks(self):
        """The request body in pieces: by Content-Length, or chunked (how the engine streams a
        layer whose compressed size it does not know yet)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                left = size
                while left:
                    piece = self.rfile.read(min(left, _CHUNK))
                    if not piece:
                        raise ConnectionError("body ended early")
                    left -= len(piece)
                    yield piece
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                piece = self.rfile.read(min(left, _CHUNK))
                if not piece:
                    raise ConnectionError("body ended early")
                left -= len(piece)
                yield piece

    def _route(self) -> tuple[str, dict[str, str], dict[str, list[str]]] | None:
        url = urlsplit(self.path)
        for kind, pattern in _ROUTES:
            match = pattern.fullmatch(url.path)
            if match:
                return kind, match.groupdict(), parse_qs(url.query)
        return None

    def _dispatch(self) -> None:
        route = self._route()
        handler = route and getattr(self, f"_{self.command.lower()}_{route[0]}", None)
        if handler is None:
            for _ in self._body_chunks():
                pass
            self._error(404 if route is None else 405, "UNSUPPORTED",
                        f"{self.command} {self.path}")
            return
        handler(route[1], route[2])

    do_GET = do_HEAD = do_POST = do_PATCH = do_PUT = do_DELETE = _dispatch

    # -- the API -----------------------------------------------------------------------------

    def _get_base(self, path: dict, query: dict) -> None:
        self._send(200, {"Content-Type": "application/json"}, b"{}")

    _head_base = _get_base

    def _head_blob(self, path: dict, query: dict) -> None:
        digest = path["digest"]
        if not self.registry.has_blob(digest, path["name"]):
            self._error(404, "BLOB_UNKNOWN", f"blob unknown: {digest}")
            return
        size = self.registry.blob_path(digest).stat().st_size
        self._send(200, {"Docker-Content-Digest": digest,
                         "Content-Type": "application/octet-stream"}, length=size)

    def _get_blob(self, path: dict, query: dict) -> None:
        if self.command == "GET" and self.registry.has_blob(path["digest"], path["name"]):
            body = self.registry.blob_path(path["digest"]).read_bytes()
            self._send(200, {"Docker-Content-Digest": path["digest"],
                             "Content-Type": "application/octet-stream"}, body)
        else:
            self._head_blob(path, query)

    def _post_uploads(self, path: dict, query: dict) -> None:
        for _ in self._body_chunks():
            pass
        name = path["name"]
        mount = (query.get("mount") or [""])[0]
        source = (query.get("from") or [""])[0]
        if mount and source and self.registry.has_blob(mount, source):
            self.registry.link(name, mount)
            self._send(201, {"Location": f"/v2/{name}/blobs/{mount}",
                             "Docker-Content-Digest": mount})
            return
        # no mount asked, or the blob is not here: an ordinary upload session
        upload = str(uuid.uuid4())
        (self.registry.root / "uploads" / upload).write_bytes(b"")
        self._send(202, {"Location": f"/v2/{name}/blobs/uploads/{upload}",
                         "Docker-Upload-UUID": upload, "Range": "0-0"})

    def _append(self, upload: str) -> int | None:
        """Append the request body to upload `upload`; its size after, or None if unknown."""
        part = self.registry.root / "uploads" / upload
        if not part.is_file():
            for _ in self._body_chunks():
                pass
            return None
        with part.open("ab") as out:
            for piece in self._body_chunks():
                out.write(piece)
        return part.stat().st_size

    def _patch_upload(self, path: dict, query: dict) -> None:
        size = self._append(path["uuid"])
        if size is None:
            self._error(404, "BLOB_UPLOAD_UNKNOWN", f"upload unknown: {path['uuid']}")
            return
        self._send(202, {"Location": f"/v2/{path['name']}/blobs/uploads/{path['uuid']}",
                         "Docker-Upload-UUID": path["uuid"], "Range": f"0-{max(size - 1, 0)}"})

    def _put_upload(self, path: dict, query: dict) -> None:
        digest = (query.get("digest") or [""])[0]
        size = self._append(path["uuid"])
        if size is None:
            self._error(404, "BLOB_UPLOAD_UNKNOWN", f"upload unknown: {path['uuid']}")
            return
        part = self.registry.root / "uploads" / path["uuid"]
        actual = _file_digest(part)
        if not re.fullmatch(_DIGEST, digest) or digest != actual:
            part.unlink()
            self._error(400, "DIGEST_INVALID", f"upload is {actual}, not {digest or '?'}")
            return
        part.replace(self.registry.blob_path(digest))
        self.registry.link(path["name"], digest)
        self._send(201, {"Location": f"/v2/{path['name']}/blobs/{digest}",
                         "Docker-Content-Digest": digest})

    def _get_manifest(self, path: dict, query: dict) -> None:
        found = self.registry.manifest(path["name"], path["ref"])
        if found is None:
            self._error(404, "MANIFEST_UNKNOWN", f"manifest unknown: {path['ref']}")
            return
        body, media, digest = found
        self._send(200, {"Content-Type": media, "Docker-Content-Digest": digest}, body)

    _head_manifest = _get_manifest

    def _put_manifest(self, path: dict, query: dict) -> None:
        body = b"".join(self._body_chunks())
        status = self.registry.fail.get("manifest_put")
        if status:
            self._error(status, "UNKNOWN", "the test registry was told to refuse manifests")
            return
        try:
            parsed = json.loads(body)
        except ValueError:
            self._error(400, "MANIFEST_INVALID", "not JSON")
            return
        media = self.headers.get("Content-Type") or parsed.get("mediaType", "")
        # An image manifest may name only blobs this repository holds (an index names
        # manifests, which this registry does not check).
        named = [parsed.get("config") or {}, *(parsed.get("layers") or [])]
        missing = [blob["digest"] for blob in named
                   if "digest" in blob and not self.registry.has_blob(blob["digest"], path["name"])]
        if missing:
            self._error(400, "MANIFEST_BLOB_UNKNOWN", f"blob unknown: {missing[0]}")
            return
        try:
            digest = self.registry.put_manifest(path["name"], path["ref"], body, media)
        except ValueError as exc:
            self._error(400, "DIGEST_INVALID", str(exc))
            return
        self._send(201, {"Location": f"/v2/{path['name']}/manifests/{digest}",
                         "Docker-Content-Digest": digest})


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as src:
        while piece := src.read(_CHUNK):
            sha.update(piece)
    return "sha256:" + sha.hexdigest()
