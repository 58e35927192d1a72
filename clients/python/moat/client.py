"""Client for the moat serve HTTP API (docs/API.md).  Standard library only."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, BinaryIO, Dict, Iterator, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Union)
from urllib.parse import quote, urlsplit

from . import backend as _backend
from .backend import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from .errors import (Conflict, MoatConnectionError, MoatError, NotFound,
                     error_from_response)
from .store import Image, Images, Snapshot, Snapshots, image_ref, snapshot_ref

if TYPE_CHECKING:  # pragma: no cover
    from .sessions import Sessions

__all__ = [
    "Client",
    "Sandbox",
    "Files",
    "FileInfo",
    "ExecResult",
    "ProcessOutput",
    "Process",
    "StreamEvent",
    "DEFAULT_URL",
]

DEFAULT_URL = "http://127.0.0.1:7070"
# HTTP timeout (seconds) of requests that do not run a command.
DEFAULT_TIMEOUT = 120.0
# Added to a command's own time bound (timeout_ms / yield_ms) for the HTTP wait.
_EXEC_SLACK = 60.0

Cmd = Union[str, Sequence[str]]
Query = Optional[Sequence[Tuple[str, str]]]


def _qs(params: Query) -> str:
    if not params:
        return ""
    return "?" + "&".join(
        "%s=%s" % (quote(k, safe=""), quote(v, safe="/")) for k, v in params)


def _text(data: Union[str, bytes, None]) -> Optional[str]:
    if data is None or isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data).decode("utf-8")
    raise TypeError("expected str or bytes, got %s" % type(data).__name__)


class _Response:
    """A finished HTTP answer: status, headers and body."""

    def __init__(self, status: int, headers: http.client.HTTPMessage,
                 body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise MoatError("moat answered %d with a body that is not JSON: %r"
                            % (self.status, self.body[:200]),
                            status=self.status, code="bad_response") from e


def _raise_for(status: int, body: bytes) -> None:
    code = None
    message = ""
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        code = obj["error"].get("code")
        message = obj["error"].get("message") or ""
    if not message:
        message = body.decode("utf-8", "replace").strip() or (
            http.client.responses.get(status, "HTTP error"))
    raise error_from_response(status, code, message)


class Client:
    """The low-level connection to one moat serve daemon.

    ``url`` defaults to ``$MOAT_URL`` or ``http://127.0.0.1:7070``; ``token`` to
    ``$MOAT_API_TOKEN`` (sent as ``Authorization: Bearer``).  Each request
    uses its own HTTP connection, so a Client may be shared between threads.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT):
        url = url or os.environ.get("MOAT_URL") or DEFAULT_URL
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("moat URL must be http:// or https://: %r" % url)
        if not parts.hostname:
            raise ValueError("moat URL has no host: %r" % url)
        self.url = url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        if token is None:
            token = os.environ.get("MOAT_API_TOKEN") or None
        self.token = token or None
        self.timeout = timeout

    def __repr__(self) -> str:
        return "Client(url=%r)" % self.url

    # -- transport ---------------------------------------------------------

    def _connect(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port,
                                               timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port,
                                          timeout=timeout)

    def _open(self, method: str, path: str, params: Query = None,
              body: Optional[bytes] = None,
              headers: Optional[Mapping[str, str]] = None,
              timeout: Union[float, None, str] = "default",
              ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request; answer the open connection and response."""
        if timeout == "default":
            timeout = self.timeout
        target = self._prefix + path + _qs(params)
        hdrs = {"Accept": "application/json", "User-Agent": "moat-python"}
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        if headers:
            hdrs.update(headers)
        if body is not None:
            hdrs.setdefault("Content-Type", "application/octet-stream")
        elif method in ("POST", "PUT"):
            body = b""
        conn = self._connect(timeout)  # type: ignore[arg-type]
        try:
            conn.request(method, target, body=body, headers=hdrs)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise MoatConnectionError(
                "timed out waiting for moat at %s (%s %s)"
                % (self.url, method, path), url=self.url) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise MoatConnectionError(
                "cannot reach moat at %s (%s %s): %s"
                % (self.url, method, path, e or type(e).__name__),
                url=self.url) from e
        return conn, resp

    def request(self, method: str, path: str, params: Query = None,
                body: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None,
                timeout: Union[float, None, str] = "default") -> _Response:
        """Send a request and read the whole answer; raise MoatError on >= 400."""
        conn, resp = self._open(method, path, params, body, headers, timeout)
        try:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise MoatConnectionError(
                    "connection to moat at %s broke while reading %s %s: %s"
                    % (self.url, method, path, e or type(e).__name__),
                    url=self.url) from e
        finally:
            conn.close()
        if resp.status >= 400:
            _raise_for(resp.status, data)
        return _Response(resp.status, resp.headers, data)

    def request_json(self, method: str, path: str, obj: Any = None,
                     params: Query = None,
                     timeout: Union[float, None, str] = "default") -> Any:
        body = None
        headers = None
        if obj is not None:
            body = json.dumps(obj).encode("utf-8")
            headers = {"Content-Type": "application/json"}
        return self.request(method, path, params, body, headers,
                            timeout).json()

    # -- service -----------------------------------------------------------

    @property
    def images(self) -> Images:
        """The daemon's image store (pull, import_, list, inspect, remove)."""
        return Images(self)

    @property
    def snapshots(self) -> Snapshots:
        """The daemon's snapshots (list, get, delete)."""
        return Snapshots(self)

    @property
    def sessions(self) -> "Sessions":
        """The daemon's control-plane sessions (create, list, get, delete,
        restart, usage, conversation, artifacts, artifact)."""
        from .sessions import Sessions
        return Sessions(self)

    def health(self) -> Dict[str, Any]:
        """``GET /healthz`` (no auth needed)."""
        return self.request_json("GET", "/healthz")

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return self.request("GET", "/metrics",
                            headers={"Accept": "text/plain"}).body.decode(
                                "utf-8", "replace")


# -- value types ---------------------------------------------------------------

@dataclass
class ExecResult:
    """A finished command."""
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    timed_out: bool = False
    truncated: bool = False
    signal: int = 0
    process_id: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def _from(cls, obj: Mapping[str, Any], stdout: Optional[str] = None,
              stderr: Optional[str] = None) -> "ExecResult":
        return cls(
            exit_code=int(obj.get("exit_code", -1)),
            stdout=obj.get("stdout", "") if stdout is None else stdout,
            stderr=obj.get("stderr", "") if stderr is None else stderr,
            duration_ms=int(obj.get("duration_ms") or 0),
            timed_out=bool(obj.get("timed_out", False)),
            truncated=bool(obj.get("truncated", False)),
            signal=int(obj.get("signal") or 0),
            process_id=obj.get("process_id"),
        )


@dataclass
class ProcessOutput:
    """Output of a running process since the last read.

    ``result`` is the ExecResult once the process has ended (then ``running``
    is False and ``exit_code`` is set).
    """
    running: bool
    process_id: Optional[int]
    stdout: str = ""
    stderr: str = ""
    result: Optional[ExecResult] = None

    @property
    def exit_code(self) -> Optional[int]:
        return None if self.result is None else self.result.exit_code

    def __str__(self) -> str:
        return self.stdout


class StreamEvent(NamedTuple):
    """One event of :meth:`Sandbox.exec_stream`: ``("stdout", text)``,
    ``("stderr", text)`` or ``("exit", ExecResult)``."""
    type: str
    data: Any


@dataclass
class FileInfo:
    """An entry of ``files.list`` / ``files.stat``."""
    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    def __getitem__(self, key: str) -> Any:
        return self.raw[key] if key in self.raw else getattr(self, key)

    @classmethod
    def _from(cls, obj: Mapping[str, Any]) -> "FileInfo":
        return cls(name=obj.get("name", ""), path=obj.get("path", ""),
                   type=obj.get("type", ""), size=obj.get("size", 0),
                   mode=obj.get("mode", 0), mtime=obj.get("mtime", 0),
                   raw=dict(obj))


# -- processes -----------------------------------------------------------------

class Process:
    """A command still running after ``exec(..., yield_ms=N)``.

    ``stdout``/``stderr`` hold everything read so far (including what the
    exec answer carried); ``result`` is set once its exit was reported.
    """

    def __init__(self, sandbox: "Sandbox", process_id: int, stdout: str = "",
                 stderr: str = ""):
        self.sandbox = sandbox
        self.process_id = process_id
        self.stdout = stdout
        self.stderr = stderr
        self.result: Optional[ExecResult] = None

    @property
    def pid(self) -> int:
        return self.process_id

    @property
    def running(self) -> bool:
        return self.result is None

    def __repr__(self) -> str:
        return "Process(sandbox=%r, process_id=%r, running=%r)" % (
            self.sandbox.id, self.process_id, self.running)

    def _path(self) -> str:
        return "%s/processes/%d" % (self.sandbox._path(), self.process_id)

    def write_stdin(self, data: Union[str, bytes] = "", yield_ms: int = 250,
                    close: bool = False) -> ProcessOutput:
        """Write ``data`` to stdin (``close`` closes it afterwards), wait up to
        ``yield_ms`` and answer the output produced since the last read."""
        body: Dict[str, Any] = {"data": _text(data) or "", "yield_ms": int(yield_ms)}
        if close:
            body["close"] = True
        obj = self.sandbox.client.request_json(
            "POST", self._path() + "/stdin", body,
            timeout=_http_timeout(yield_ms, None, self.sandbox.client.timeout))
        return self._absorb(obj)

    def read(self, yield_ms: int = 250) -> ProcessOutput:
        """Answer the output since the last read (waiting up to ``yield_ms``)."""
        return self.write_stdin("", yield_ms=yield_ms)

    def close_stdin(self, yield_ms: int = 0) -> ProcessOutput:
        """Close the process's stdin."""
        return self.write_stdin("", yield_ms=yield_ms, close=True)

    def _absorb(self, obj: Mapping[str, Any]) -> ProcessOutput:
        out = obj.get("stdout", "") or ""
        err = obj.get("stderr", "") or ""
        self.stdout += out
        self.stderr += err
        res = None
        if not obj.get("running", False):
            res = ExecResult._from(obj, stdout=self.stdout, stderr=self.stderr)
            if res.process_id is None:
                res.process_id = self.process_id
            self.result = res
        return ProcessOutput(running=res is None,
                             process_id=obj.get("process_id", self.process_id),
                             stdout=out, stderr=err, result=res)

    def wait(self, timeout: Optional[float] = None,
             poll_ms: int = 1000) -> ExecResult:
        """Wait for the process to end; answer its ExecResult whose stdout and
        stderr are everything read from it (``self.stdout``/``self.stderr``).
        ``timeout`` (seconds) raises TimeoutError while it still runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.result is None:
            wait_ms = poll_ms
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("process %d still running after %ss"
                                       % (self.process_id, timeout))
                wait_ms = max(1, min(poll_ms, int(left * 1000)))
            self.read(yield_ms=wait_ms)
        return self.result

    def kill(self, signal: Union[str, int] = "KILL") -> None:
        """Send ``signal`` (a name such as ``TERM`` or a number) to the
        process group; the exit is then reported by :meth:`wait`/:meth:`read`."""
        self.sandbox.client.request(
            "DELETE", self._path(), [("signal", str(signal))])


def _http_timeout(yield_ms: Optional[int], timeout_ms: Optional[int],
                  default: Optional[float]) -> Optional[float]:
    """How long to wait for an exec-like answer."""
    if yield_ms:
        base = yield_ms / 1000.0
        if timeout_ms:
            base = min(base, timeout_ms / 1000.0)
        return max(base + _EXEC_SLACK, default or 0)
    if timeout_ms:
        return max(timeout_ms / 1000.0 + _EXEC_SLACK, default or 0)
    return None  # a command without a bound may run as long as it likes


# -- files ---------------------------------------------------------------------

class Files:
    """``sandbox.files``: the sandbox's filesystem.  Paths are relative to
    ``/workspace`` or absolute inside the sandbox."""

    def __init__(self, sandbox: "Sandbox"):
        self._sb = sandbox

    def _req(self, method: str, sub: str, path: str,
             extra: Sequence[Tuple[str, str]] = (), **kw: Any) -> _Response:
        if not isinstance(path, str):
            path = os.fspath(path)
        return self._sb.client.request(
            method, self._sb._path() + "/files" + sub,
            [("path", path)] + list(extra), **kw)

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        return self._req("GET", "", path,
                         headers={"Accept": "application/octet-stream"}).body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str, bytearray, memoryview],
              encoding: str = "utf-8") -> None:
        """Create or replace the file (parents are created)."""
        if isinstance(data, str):
            data = data.encode(encoding)
        self._req("PUT", "", path, body=bytes(data),
                  headers={"Content-Type": "application/octet-stream"})

    def remove(self, path: str, recursive: bool = False) -> None:
        extra = [("recursive", "true")] if recursive else []
        self._req("DELETE", "", path, extra)

    def mkdir(self, path: str) -> None:
        """Create the directory and its parents."""
        self._req("POST", "/mkdir", path)

    def list(self, path: str = ".", depth: int = 1) -> List[FileInfo]:
        obj = self._req("GET", "/list", path, [("depth", str(int(depth)))]).json()
        return [FileInfo._from(e) for e in (obj or {}).get("entries", [])]

    def stat(self, path: str) -> FileInfo:
        return FileInfo._from(self._req("GET", "/stat", path).json())

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFound:
            return False
        return True


# -- sandboxes -----------------------------------------------------------------

class _class_or_instance:
    """A method with two meanings: ``on_class`` (called with the class first)
    when looked up on the class, ``on_instance`` on an instance."""

    def __init__(self, on_class: Any, on_instance: Any):
        self.on_class = on_class
        self.on_instance = on_instance
        self.__doc__ = "%s\n\nOn an instance: %s" % (
            on_class.__doc__ or "", on_instance.__doc__ or "")

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self.on_class.__get__(cls, type(cls))
        return self.on_instance.__get__(obj, cls)


class Sandbox:
    """A sandbox served by moat.  Use :meth:`create`, :meth:`connect` or
    :meth:`list`; as a context manager, leaving the block deletes it."""

    def __init__(self, client: Client, info: Mapping[str, Any]):
        self.client = client
        self.info: Dict[str, Any] = dict(info)
        self.id: str = self.info["id"]
        self.files = Files(self)
        self._deleted = False

    def __repr__(self) -> str:
        return "Sandbox(id=%r, state=%r)" % (self.id, self.info.get("state"))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._deleted:
            try:
                self.delete()
            except NotFound:
                pass

    def _path(self) -> str:
        return "/v1/sandboxes/" + quote(self.id, safe="")

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def create(cls, manifest: Optional[Mapping[str, Any]] = None,
               image: Union[str, Image, Snapshot, None] = None,
               env: Optional[Mapping[str, str]] = None,
               limits: Optional[Mapping[str, Any]] = None,
               metadata: Optional[Mapping[str, str]] = None,
               timeout_s: Optional[int] = None,
               idle_timeout_s: Optional[int] = None,
               url: Optional[str] = None, token: Optional[str] = None,
               client: Optional[Client] = None) -> "Sandbox":
        """``POST /v1/sandboxes``: only the arguments given are sent.

        ``image``: "host", a root filesystem directory, an image of the store
        (a name, a digest or an :class:`Image`: its config becomes the
        sandbox's defaults), or a snapshot (``"snapshot:<sid>"``, its name, or
        a :class:`Snapshot`): the sandbox starts with its files."""
        client = client or Client(url, token)
        image = image_ref(image)
        body: Dict[str, Any] = {}
        for key, val in (("manifest", manifest), ("image", image),
                         ("env", env), ("limits", limits),
                         ("metadata", metadata), ("timeout_s", timeout_s),
                         ("idle_timeout_s", idle_timeout_s)):
            if val is not None:
                body[key] = dict(val) if isinstance(val, Mapping) else val
        # Creating copies manifest sources and may clone repositories.
        t = None if client.timeout is None else max(client.timeout, 600.0)
        info = client.request_json("POST", "/v1/sandboxes", body, timeout=t)
        return cls(client, info)

    @classmethod
    def connect(cls, sandbox_id: str, url: Optional[str] = None,
                token: Optional[str] = None,
                client: Optional[Client] = None) -> "Sandbox":
        """Attach to an existing sandbox (NotFound if there is none)."""
        client = client or Client(url, token)
        info = client.request_json(
            "GET", "/v1/sandboxes/" + quote(sandbox_id, safe=""))
        return cls(client, info)

    @classmethod
    def list(cls, metadata: Optional[Mapping[str, str]] = None,
             url: Optional[str] = None, token: Optional[str] = None,
             client: Optional[Client] = None) -> List["Sandbox"]:
        """All sandboxes, or those whose metadata match every given pair."""
        client = client or Client(url, token)
        params = [("metadata." + k, str(v)) for k, v in (metadata or {}).items()]
        obj = client.request_json("GET", "/v1/sandboxes", params=params)
        return [cls(client, s) for s in (obj or {}).get("sandboxes", [])]

    def refresh(self) -> Dict[str, Any]:
        """Re-read the sandbox's description (``GET /v1/sandboxes/{id}``)."""
        self.info = self.client.request_json("GET", self._path())
        return self.info

    @property
    def state(self) -> Optional[str]:
        return self.info.get("state")

    @property
    def metadata(self) -> Dict[str, str]:
        return self.info.get("metadata") or {}

    @property
    def workspace(self) -> str:
        return self.info.get("workspace") or "/workspace"

    def delete(self) -> None:
        """Kill every process and remove the sandbox."""
        self.client.request("DELETE", self._path())
        self._deleted = True

    def _update(self, info: Any) -> None:
        if isinstance(info, Mapping) and info.get("id") == self.id:
            self.info = dict(info)

    # -- snapshots, fork, pause ---------------------------------------------

    def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """Freeze this sandbox's files into a snapshot (it keeps running).
        ``name``: unique (Conflict when taken).  InsufficientStorage when
        there is no room; Conflict for a ``limits.disk`` sandbox."""
        body = {} if name is None else {"name": name}
        return Snapshot._from(self.client.request_json(
            "POST", self._path() + "/snapshots", body))

    def restore(self, snapshot: Union[str, Snapshot]) -> "Sandbox":
        """Put back the files of ``snapshot`` (a Snapshot, an id or a name):
        whatever was written since is gone.  The sandbox's processes are
        restarted (none survive).  Answers self, refreshed."""
        obj = self.client.request_json("POST", self._path() + "/restore",
                                       {"snapshot": snapshot_ref(snapshot)})
        self._update((obj or {}).get("sandbox"))
        return self

    def fork(self, count: int = 1) -> List["Sandbox"]:
        """``count`` (1..32) new sandboxes whose files start as copies of this
        one's now, all or none.  Processes are not copied."""
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError("fork: count must be an int, got %r" % (count,))
        obj = self.client.request_json("POST", self._path() + "/fork",
                                       {"count": count})
        return [Sandbox(self.client, s) for s in (obj or {}).get("sandboxes", [])]

    def pause(self, release: bool = False) -> "Sandbox":
        """Freeze every process (cgroup freezer) until :meth:`resume`; its
        idle and lifetime clocks stop and other calls answer
        :class:`~moat.errors.Paused`.  ``release``: hibernate (snapshot the
        files, stop the processes, free their memory) where the daemon
        supports it.  Answers self, refreshed (``state == "paused"``)."""
        body = {"release": True} if release else None
        self._update(self.client.request_json("POST", self._path() + "/pause", body))
        return self

    def _resume_paused(self) -> "Sandbox":
        """Thaw a paused sandbox: its processes go on where they stopped.
        Answers self, refreshed."""
        self._update(self.client.request_json("POST", self._path() + "/resume"))
        return self

    # -- session state -----------------------------------------------------

    def session_state(self) -> Dict[str, Any]:
        """A JSON-able description of this sandbox to :meth:`resume` later
        (``{"type", "version", "sandbox_id", "base_url"}``).  It never holds
        the API token: the resuming side brings its own."""
        return _backend.session_state(self.id, self.client.url)

    def _resume_session(cls, state: Mapping[str, Any], url: Optional[str] = None,
               token: Optional[str] = None, client: Optional[Client] = None,
               allow_other_daemon: bool = False) -> "Sandbox":
        """Reattach to the live sandbox a :meth:`session_state` describes,
        through the caller's own daemon URL and token (``url``/``token``/
        ``client``, else ``$MOAT_URL``/``$MOAT_API_TOKEN``).  A state naming
        another daemon is refused (ValueError) unless ``allow_other_daemon``;
        a sandbox that is gone raises NotFound saying so, one that stopped
        Conflict."""
        parsed = _backend.parse_session_state(
            dict(state) if isinstance(state, Mapping) else state)
        client = client or Client(url, token)
        if not allow_other_daemon and not _backend.same_daemon(
                parsed["base_url"], client.url):
            raise ValueError(
                "session state names the moat daemon at %s, but this client "
                "talks to %s: pass that URL, or allow_other_daemon=True if the "
                "same daemon is reached by another address"
                % (parsed["base_url"], client.url))
        sid = parsed["sandbox_id"]
        try:
            sb = cls.connect(sid, client=client)
        except NotFound as e:
            raise _backend.gone_error(e, sid, client.url) from e
        if sb.state != "running":
            raise Conflict("sandbox %s of the session state is %s at %s: only "
                           "delete() is useful now" % (sid, sb.state, client.url),
                           status=409, code="conflict")
        return sb

    # Sandbox.resume(state) reattaches to a session state (a class call);
    # sb.resume() resumes a paused sandbox (an instance call).
    resume = _class_or_instance(_resume_session, _resume_paused)

    # -- Deep Agents backend -----------------------------------------------

    def execute(self, command: str, *, timeout: Optional[float] = None,
                max_output_bytes: Optional[int] = None) -> ExecuteResponse:
        """Deep Agents' ``execute``: run ``command`` with ``/bin/sh -c`` in
        the workspace, stderr merged into the output in the order written.
        Past ``timeout`` seconds (None: the default, 30 minutes, as Deep
        Agents' backends take None; 0: no limit) the process group is
        killed (exit code 137 and a note at the end of the output)."""
        if not isinstance(command, str):
            raise TypeError("execute: command must be a str, got %s"
                            % type(command).__name__)
        if timeout is None:
            timeout = _backend.DEFAULT_EXECUTE_TIMEOUT
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError("execute: timeout must be seconds >= 0, got %r"
                             % (timeout,))
        timeout_ms = None if timeout == 0 else max(1, int(timeout * 1000))
        # exec 2>&1 on the command's own line: the shell's line numbers in
        # its messages stay the command's.
        r = self.exec("exec 2>&1; " + command, timeout_ms=timeout_ms,
                      max_output_bytes=max_output_bytes)
        if not isinstance(r, ExecResult):  # only with yield_ms, never here
            raise MoatError("execute: moat answered a running process",
                            code="bad_response")
        output = r.stdout + r.stderr
        if r.timed_out:
            if output and not output.endswith("\n"):
                output += "\n"
            output += "[moat: the command was killed after %s s]" % (timeout,)
        return ExecuteResponse(output=output, exit_code=r.exit_code,
                               truncated=r.truncated)

    def upload_files(self, files: Sequence[Tuple[str, bytes]]
                     ) -> List[FileUploadResponse]:
        """Deep Agents' ``upload_files``: write each ``(path, bytes)``
        (parents created); one answer per file, in order, with an error code
        (``file_not_found``, ``permission_denied``, ``is_directory``,
        ``invalid_path``) for a file moat refused.  Arguments are checked
        before anything is written; errors that are not about a file (the
        sandbox is gone, auth) raise."""
        items = list(files)
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError("upload_files: files[%d] is not a (path, bytes) "
                                "pair" % i)
            if not isinstance(item[1], (bytes, bytearray, memoryview)):
                raise TypeError("upload_files: files[%d] (%r): content must be "
                                "bytes, got %s" % (i, item[0],
                                                   type(item[1]).__name__))
        out = []
        for path, content in items:
            if _backend.bad_path(path):
                out.append(FileUploadResponse(path, _backend.INVALID_PATH))
                continue
            try:
                self.files.write(path, bytes(content))
                out.append(FileUploadResponse(path, None))
            except MoatError as e:
                code = _backend.file_error_code(e)
                if code is None:
                    raise
                out.append(FileUploadResponse(path, code))
        return out

    def download_files(self, paths: Sequence[str]) -> List[FileDownloadResponse]:
        """Deep Agents' ``download_files``: each file's bytes, or its error
        code; one answer per path, in order."""
        if isinstance(paths, (str, bytes)):
            raise TypeError("download_files: expected a list of paths, got a "
                            "single %s" % type(paths).__name__)
        out = []
        for path in paths:
            if _backend.bad_path(path):
                out.append(FileDownloadResponse(path, None, _backend.INVALID_PATH))
                continue
            try:
                out.append(FileDownloadResponse(path, self.files.read(path), None))
            except MoatError as e:
                code = _backend.file_error_code(e)
                if code is None:
                    raise
                out.append(FileDownloadResponse(path, None, code))
        return out

    # -- processes ---------------------------------------------------------

    @staticmethod
    def _exec_body(cmd: Cmd, cwd: Optional[str], env: Optional[Mapping[str, str]],
                   stdin: Union[str, bytes, None], timeout_ms: Optional[int],
                   yield_ms: Optional[int], max_output_bytes: Optional[int],
                   tty: Optional[bool], cols: Optional[int],
                   rows: Optional[int]) -> Dict[str, Any]:
        if isinstance(cmd, (bytes, bytearray)):
            cmd = cmd.decode("utf-8")
        if isinstance(cmd, str):
            body: Dict[str, Any] = {"cmd": cmd}
        else:
            argv = [os.fspath(a) for a in cmd]
            if not argv:
                raise ValueError("cmd must not be empty")
            body = {"cmd": argv}
        for key, val in (("cwd", cwd), ("env", env), ("stdin", _text(stdin)),
                         ("timeout_ms", timeout_ms), ("yield_ms", yield_ms),
                         ("max_output_bytes", max_output_bytes), ("tty", tty),
                         ("cols", cols), ("rows", rows)):
            if val is not None:
                body[key] = dict(val) if isinstance(val, Mapping) else val
        return body

    def exec(self, cmd: Cmd, *, cwd: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None,
             stdin: Union[str, bytes, None] = None,
             timeout_ms: Optional[int] = None, yield_ms: Optional[int] = None,
             max_output_bytes: Optional[int] = None, tty: Optional[bool] = None,
             cols: Optional[int] = None, rows: Optional[int] = None,
             ) -> Union[ExecResult, Process]:
        """Run ``cmd`` (a shell string or an argv list).

        Answers an ExecResult once it finished; with ``yield_ms`` a command
        still running then answers a :class:`Process` (stdin stays open).
        """
        body = self._exec_body(cmd, cwd, env, stdin, timeout_ms, yield_ms,
                               max_output_bytes, tty, cols, rows)
        obj = self.client.request_json(
            "POST", self._path() + "/exec", body,
            timeout=_http_timeout(yield_ms, timeout_ms, self.client.timeout))
        if obj.get("running"):
            return Process(self, int(obj["process_id"]),
                           obj.get("stdout", "") or "", obj.get("stderr", "") or "")
        return ExecResult._from(obj)

    def exec_stream(self, cmd: Cmd, *, cwd: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None,
                    stdin: Union[str, bytes, None] = None,
                    timeout_ms: Optional[int] = None,
                    max_output_bytes: Optional[int] = None,
                    tty: Optional[bool] = None, cols: Optional[int] = None,
                    rows: Optional[int] = None) -> Iterator[StreamEvent]:
        """Run ``cmd`` and yield its output as it comes (server-sent events):
        ``("stdout", text)``, ``("stderr", text)``, then ``("exit", result)``
        whose stdout/stderr are the whole output streamed."""
        body = self._exec_body(cmd, cwd, env, stdin, timeout_ms, None,
                               max_output_bytes, tty, cols, rows)
        conn, resp = self.client._open(
            "POST", self._path() + "/exec", body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     "Accept": "text/event-stream"},
            timeout=_http_timeout(None, timeout_ms, self.client.timeout))
        try:
            if resp.status >= 400:
                _raise_for(resp.status, resp.read())
            ctype = (resp.getheader("Content-Type") or "").lower()
            if "text/event-stream" not in ctype:
                # Not streamed: answer the finished object as events.
                res = ExecResult._from(json.loads(resp.read() or b"{}"))
                if res.stdout:
                    yield StreamEvent("stdout", res.stdout)
                if res.stderr:
                    yield StreamEvent("stderr", res.stderr)
                yield StreamEvent("exit", res)
                return
            out: List[str] = []
            err: List[str] = []
            for event, data in _sse(resp, self.client.url):
                if event in ("stdout", "stderr"):
                    try:
                        text = json.loads(data).get("data", "")
                    except (ValueError, AttributeError):
                        text = data
                    (out if event == "stdout" else err).append(text)
                    yield StreamEvent(event, text)
                elif event == "exit":
                    res = ExecResult._from(json.loads(data), stdout="".join(out),
                                           stderr="".join(err))
                    yield StreamEvent("exit", res)
                    return
                elif event == "error":
                    try:
                        e = json.loads(data).get("error", {})
                    except (ValueError, AttributeError):
                        e = {"message": data}
                    raise error_from_response(resp.status, e.get("code"),
                                              e.get("message") or data)
            raise MoatConnectionError(
                "moat at %s ended the event stream without an exit event"
                % self.client.url, url=self.client.url)
        finally:
            conn.close()

    def processes(self) -> List[Dict[str, Any]]:
        """``[{"process_id", "cmd", "running", "tty"}, ...]``"""
        obj = self.client.request_json("GET", self._path() + "/processes")
        return (obj or {}).get("processes", [])

    def process(self, process_id: int) -> Process:
        """A handle on a running process (e.g. one listed by processes())."""
        return Process(self, int(process_id))

    def kill(self, process_id: int, signal: Union[str, int] = "KILL") -> None:
        self.process(process_id).kill(signal)

    # -- patches, images, archives -----------------------------------------

    def apply_patch(self, patch: str) -> List[Dict[str, str]]:
        """Apply a Codex-format patch (all or nothing; PatchFailed if a hunk
        does not match).  Answers ``[{"path": ..., "op": ...}, ...]``."""
        obj = self.client.request_json("POST", self._path() + "/patch",
                                       {"patch": _text(patch)})
        return (obj or {}).get("files", [])

    def view_image(self, path: str) -> Dict[str, Any]:
        """``{"mime", "width", "height", "data"}`` with ``data`` decoded bytes."""
        obj = self.client.request_json("GET", self._path() + "/image",
                                       params=[("path", path)])
        obj = dict(obj)
        obj["data"] = base64.b64decode(obj.get("data") or "")
        return obj

    def download_archive(self) -> bytes:
        """The workspace as a tar archive."""
        return self.client.request(
            "GET", self._path() + "/archive",
            headers={"Accept": "application/x-tar"}, timeout=None).body

    def upload_archive(self, data: Union[bytes, bytearray, BinaryIO]) -> None:
        """Replace the workspace contents with a tar archive (bytes or a
        binary file object; plain, gzip or zstd)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = data.read()
        self.client.request("PUT", self._path() + "/archive", body=bytes(data),
                            headers={"Content-Type": "application/x-tar"},
                            timeout=None)


def _sse(resp: http.client.HTTPResponse, url: str) -> Iterator[Tuple[str, str]]:
    """Parse a text/event-stream body into (event, data) pairs."""
    event = "message"
    data: List[str] = []
    while True:
        try:
            raw = resp.readline()
        except (OSError, http.client.HTTPException) as e:
            raise MoatConnectionError(
                "event stream from moat at %s broke: %s" % (url, e), url=url) from e
        if not raw:
            if data:
                yield event, "\n".join(data)
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)

