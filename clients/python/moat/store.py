"""The daemon's image store and snapshots (docs/API.md "Image store,
snapshots, pause"): ``Images`` and ``Snapshots``, and their value types."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, BinaryIO, Callable, Dict, List,
                    Mapping, Optional, Union)
from urllib.parse import quote

from .errors import MoatConnectionError, error_from_response

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Image", "Images", "Progress", "Snapshot", "Snapshots"]

# A pull or an import may take long; the daemon bounds it itself.
_JOB_TIMEOUT = 3600.0


@dataclass
class Progress:
    """One ``progress`` event of a pull or an import."""
    layers_done: int = 0
    layers_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0


@dataclass
class Image:
    """An image of the store.  ``id`` is the manifest digest; ``raw`` the
    daemon's whole object (``config`` and ``layers`` after ``inspect``)."""
    id: str
    names: List[str] = field(default_factory=list)
    size: int = 0
    created: str = ""
    layer_count: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """The first name, or the digest when it has none."""
        return self.names[0] if self.names else self.id

    @property
    def config(self) -> Dict[str, Any]:
        return self.raw.get("config") or {}

    @property
    def layers(self) -> List[Dict[str, Any]]:
        return self.raw.get("layers") or []

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @classmethod
    def _from(cls, obj: Mapping[str, Any]) -> "Image":
        return cls(id=obj.get("id", ""), names=list(obj.get("names") or []),
                   size=int(obj.get("size") or 0), created=obj.get("created", ""),
                   layer_count=int(obj.get("layer_count") or 0), raw=dict(obj))


@dataclass
class Snapshot:
    """A snapshot of a sandbox's filesystem."""
    id: str
    name: Optional[str] = None
    sandbox_id: Optional[str] = None
    created_at: str = ""
    size: int = 0
    backend: str = ""
    image: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def image_ref(self) -> str:
        """What a create's ``image`` takes to start from this snapshot."""
        return "snapshot:" + self.id

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @classmethod
    def _from(cls, obj: Mapping[str, Any]) -> "Snapshot":
        return cls(id=obj.get("id", ""), name=obj.get("name"),
                   sandbox_id=obj.get("sandbox_id"),
                   created_at=obj.get("created_at", ""),
                   size=int(obj.get("size") or 0), backend=obj.get("backend", ""),
                   image=obj.get("image"), raw=dict(obj))


ProgressCb = Optional[Callable[[Progress], None]]


def _client(client: Optional["Client"], url: Optional[str],
            token: Optional[str]) -> "Client":
    from .client import Client
    return client or Client(url, token)


def _seg(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("expected a non-empty name, got %r" % (name,))
    return quote(name, safe="")


def _job(client: "Client", method: str, path: str, body: Any,
         headers: Dict[str, str], progress: ProgressCb, what: str,
         params: Any = None) -> Image:
    """Send a pull or an import asking for server-sent events; call
    ``progress`` for each progress event; answer the image or raise the
    error event as its typed MoatError."""
    from .client import _raise_for, _sse
    hdrs = dict(headers)
    hdrs["Accept"] = "text/event-stream"
    conn, resp = client._open(method, path, params, body, hdrs,
                              timeout=max(client.timeout or 0, _JOB_TIMEOUT))
    try:
        if resp.status >= 400:
            _raise_for(resp.status, resp.read())
        ctype = (resp.getheader("Content-Type") or "").lower()
        if "text/event-stream" not in ctype:
            return Image._from(json.loads(resp.read() or b"{}"))
        for event, data in _sse(resp, client.url):
            try:
                obj = json.loads(data)
            except ValueError:
                obj = {}
            if event == "progress" and progress is not None:
                progress(Progress(int(obj.get("layers_done") or 0),
                                  int(obj.get("layers_total") or 0),
                                  int(obj.get("bytes_done") or 0),
                                  int(obj.get("bytes_total") or 0)))
            elif event == "image":
                return Image._from(obj)
            elif event == "error":
                e = obj.get("error") if isinstance(obj.get("error"), dict) else {}
                raise error_from_response(int(e.get("status") or 500), e.get("code"),
                                          e.get("message") or data)
        raise MoatConnectionError("moat at %s ended the stream of %s without the "
                                  "image" % (client.url, what), url=client.url)
    finally:
        conn.close()


class Images:
    """``Images(url=...)`` or ``client.images``: the daemon's image store."""

    def __init__(self, client: Optional["Client"] = None, url: Optional[str] = None,
                 token: Optional[str] = None):
        self.client = _client(client, url, token)

    def pull(self, ref: str, insecure: bool = False,
             progress: ProgressCb = None) -> Image:
        """Pull ``ref`` from its registry (``insecure``: plain http, for a
        loopback registry or one the daemon lists with --insecure-registry);
        ``progress(Progress)`` is called as layers and bytes arrive."""
        if not isinstance(ref, str) or not ref:
            raise ValueError("pull: ref must be a non-empty image reference")
        body: Dict[str, Any] = {"ref": ref}
        if insecure:
            body["insecure"] = True
        return _job(self.client, "POST", "/v1/images", json.dumps(body).encode(),
                    {"Content-Type": "application/json"}, progress, "pull " + ref)

    def import_(self, source: Union[str, "os.PathLike[str]", bytes, BinaryIO],
                name: Optional[str] = None, progress: ProgressCb = None) -> Image:
        """Import an image: ``source`` is the path of an OCI layout directory
        (sent as a tar), of an OCI archive or a ``docker save`` tar, or the
        archive's bytes or an open binary file.  ``name`` names it."""
        params = [("name", name)] if name else None
        with _archive_body(source) as (body, length):
            headers = {"Content-Type": "application/x-tar"}
            if length is not None:
                headers["Content-Length"] = str(length)
            return _job(self.client, "POST", "/v1/images/import", body, headers,
                        progress, "import", params=params)

    def list(self) -> List[Image]:
        obj = self.client.request_json("GET", "/v1/images")
        return [Image._from(o) for o in (obj or {}).get("images", [])]

    def inspect(self, name: str) -> Image:
        """An image by name or digest, with its ``config`` and ``layers``."""
        return Image._from(self.client.request_json("GET", "/v1/images/" + _seg(name)))

    get = inspect

    def remove(self, name: str) -> None:
        """Remove a name (a digest: every name of the image); the image goes
        once nothing uses it.  NotFound; Conflict while a sandbox or
        snapshot uses its last name."""
        self.client.request("DELETE", "/v1/images/" + _seg(name))


class _archive_body:
    """A context manager: (body, length) of what import_ sends."""

    def __init__(self, source: Any):
        self.source = source
        self._close: List[Any] = []

    def __enter__(self) -> Any:
        src = self.source
        if isinstance(src, (bytes, bytearray, memoryview)):
            return bytes(src), len(src)
        if hasattr(src, "read"):
            try:
                length = os.fstat(src.fileno()).st_size - src.tell()
            except (AttributeError, OSError, ValueError):
                data = src.read()
                return data, len(data)
            return src, length
        path = os.fspath(src)
        if os.path.isdir(path):
            # a layout directory: a tar of it, spooled to a temporary file
            tmp = tempfile.TemporaryFile(prefix="moat-import-")
            self._close.append(tmp)
            with tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for entry in sorted(os.listdir(path)):
                    tf.add(os.path.join(path, entry), arcname=entry,
                           filter=_anonymous)
            length = tmp.tell()
            tmp.seek(0)
            return tmp, length
        f = open(path, "rb")
        self._close.append(f)
        return f, os.fstat(f.fileno()).st_size

    def __exit__(self, *exc: Any) -> None:
        for f in self._close:
            f.close()


def _anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


class Snapshots:
    """``Snapshots(url=...)`` or ``client.snapshots``: every sandbox's
    snapshots.  A snapshot is made with :meth:`Sandbox.snapshot`."""

    def __init__(self, client: Optional["Client"] = None, url: Optional[str] = None,
                 token: Optional[str] = None):
        self.client = _client(client, url, token)

    def list(self) -> List[Snapshot]:
        obj = self.client.request_json("GET", "/v1/snapshots")
        return [Snapshot._from(o) for o in (obj or {}).get("snapshots", [])]

    def get(self, ref: Union[str, Snapshot]) -> Snapshot:
        """A snapshot by id or name (NotFound)."""
        return Snapshot._from(self.client.request_json(
            "GET", "/v1/snapshots/" + _seg(snapshot_ref(ref))))

    def delete(self, ref: Union[str, Snapshot]) -> None:
        self.client.request("DELETE", "/v1/snapshots/" + _seg(snapshot_ref(ref)))

    remove = delete

    def export(self, ref: Union[str, Snapshot],
               dest: Union[str, "os.PathLike[str]", BinaryIO]) -> int:
        """Write the snapshot as an OCI archive (``Images.import_`` on another
        daemon brings it back) to ``dest``, a path (written whole or not at
        all: ``<dest>.part`` renamed in) or a binary file.  Answers the bytes
        written.  NotFound for an unknown snapshot (nothing written)."""
        from .client import _raise_for
        path = "/v1/snapshots/" + _seg(snapshot_ref(ref)) + "/export"
        conn, resp = self.client._open("GET", path, headers={"Accept": "application/x-tar"},
                                       timeout=max(self.client.timeout or 0, _JOB_TIMEOUT))
        try:
            if resp.status >= 400:
                _raise_for(resp.status, resp.read())
            if hasattr(dest, "write"):
                return _copy(resp, dest, self.client.url)
            part = os.fspath(dest) + ".part"
            try:
                with open(part, "xb") as f:
                    n = _copy(resp, f, self.client.url)
                os.replace(part, dest)
            except BaseException:
                try:
                    os.unlink(part)
                except FileNotFoundError:
                    pass
                raise
            return n
        finally:
            conn.close()


def _copy(resp: Any, f: Any, url: str) -> int:
    import http.client
    n = 0
    while True:
        try:
            chunk = resp.read(1 << 16)
        except (OSError, http.client.HTTPException) as e:
            raise MoatConnectionError("the export from moat at %s broke: %s" % (url, e),
                                      url=url) from e
        if not chunk:
            return n
        f.write(chunk)
        n += len(chunk)


def snapshot_ref(s: Union[str, Snapshot]) -> str:
    """A snapshot's id from a Snapshot, or the id or name given."""
    if isinstance(s, Snapshot):
        return s.id
    if isinstance(s, str) and s:
        return s
    raise TypeError("expected a Snapshot or a snapshot's id or name, got %r" % (s,))


def image_ref(image: Any) -> Any:
    """A create's ``image``: a Snapshot becomes "snapshot:<sid>", an Image
    its id; anything else is sent as given."""
    if isinstance(image, Snapshot):
        return image.image_ref
    if isinstance(image, Image):
        return image.id
    return image
