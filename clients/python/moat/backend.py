"""Deep Agents' sandbox-backend shapes for :class:`moat.Sandbox`.

Deep Agents (the ``deepagents`` package, JS and Python) drives a sandbox
through ``execute(command)``, ``upload_files([(path, bytes)])`` and
``download_files([path])``, with one answer per file and a small set of
per-file error codes.  This module holds those answer types and the mapping
of moat's errors onto the codes; :class:`moat.Sandbox` exposes the methods,
and ``session_state()``/``resume()`` (a JSON-able description of a sandbox,
without the token, to reattach later).  Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from .errors import Forbidden, InvalidPath, IsDirectory, MoatError, NotFound

__all__ = [
    "ExecuteResponse", "FileUploadResponse", "FileDownloadResponse",
    "FILE_NOT_FOUND", "PERMISSION_DENIED", "IS_DIRECTORY", "INVALID_PATH",
    "file_error_code", "SESSION_STATE_TYPE",
]

# Deep Agents' FileOperationError codes.
FILE_NOT_FOUND = "file_not_found"
PERMISSION_DENIED = "permission_denied"
IS_DIRECTORY = "is_directory"
INVALID_PATH = "invalid_path"

# execute's time limit when none is given (seconds), as Deep Agents' own
# sandbox backends default to.
DEFAULT_EXECUTE_TIMEOUT = 30 * 60

SESSION_STATE_TYPE = "moat.sandbox"
SESSION_STATE_VERSION = 1
_ID = re.compile(r"^[a-z0-9]{1,64}$")


@dataclass
class ExecuteResponse:
    """A finished command as Deep Agents sees it: stdout and stderr merged
    in the order written, the exit code (128+N after signal N), and whether
    output was dropped past the cap."""
    output: str
    exit_code: Optional[int]
    truncated: bool = False


@dataclass
class FileUploadResponse:
    """One file of ``upload_files``: ``error`` is None or one of the codes."""
    path: str
    error: Optional[str] = None


@dataclass
class FileDownloadResponse:
    """One file of ``download_files``: ``content`` (bytes) or ``error``."""
    path: str
    content: Optional[bytes] = None
    error: Optional[str] = None


def is_sandbox_gone(e: BaseException) -> bool:
    """moat's 404 for the sandbox itself, rather than for a path in it."""
    return isinstance(e, NotFound) and e.message.startswith("no sandbox ")


def file_error_code(e: BaseException) -> Optional[str]:
    """The Deep Agents code for a moat error about one file; None when the
    error is not about the file (the sandbox is gone, auth, the daemon)."""
    if isinstance(e, NotFound):
        return None if is_sandbox_gone(e) else FILE_NOT_FOUND
    if isinstance(e, IsDirectory):
        return IS_DIRECTORY
    if isinstance(e, InvalidPath):
        return INVALID_PATH
    if isinstance(e, Forbidden):
        return PERMISSION_DENIED
    return None


def bad_path(path: Any) -> bool:
    """A path moat would refuse before looking: not a string, empty, NUL."""
    return not isinstance(path, str) or path == "" or "\0" in path


def same_daemon(a: str, b: str) -> bool:
    """Whether two base URLs name the same daemon (scheme, host, port, path)."""
    def norm(u: str):
        if "://" not in u:
            u = "http://" + u
        p = urlsplit(u)
        port = p.port or (443 if p.scheme == "https" else 80)
        return (p.scheme, (p.hostname or "").lower(), port, p.path.rstrip("/"))
    try:
        return norm(a) == norm(b)
    except ValueError:
        return False


def session_state(sandbox_id: str, base_url: str) -> Dict[str, Any]:
    return {"type": SESSION_STATE_TYPE, "version": SESSION_STATE_VERSION,
            "sandbox_id": sandbox_id, "base_url": base_url}


def parse_session_state(state: Any) -> Dict[str, str]:
    """Check a session state; answer its sandbox_id and base_url.  Raises
    ValueError naming what is wrong."""
    if not isinstance(state, dict):
        raise ValueError("session state must be a dict (from session_state()), "
                         "got %s" % type(state).__name__)
    if state.get("type") != SESSION_STATE_TYPE:
        raise ValueError("session state: type must be %r, got %r"
                         % (SESSION_STATE_TYPE, state.get("type")))
    if state.get("version") != SESSION_STATE_VERSION:
        raise ValueError("session state: unsupported version %r (this client "
                         "reads %d)" % (state.get("version"), SESSION_STATE_VERSION))
    sid = state.get("sandbox_id")
    if not isinstance(sid, str) or not _ID.match(sid):
        raise ValueError("session state: sandbox_id must be a moat sandbox id "
                         "(lowercase letters and digits), got %r" % (sid,))
    url = state.get("base_url")
    if not isinstance(url, str) or not url:
        raise ValueError("session state: base_url must be a non-empty string, "
                         "got %r" % (url,))
    extra = sorted(set(state) - {"type", "version", "sandbox_id", "base_url"})
    if extra:
        raise ValueError("session state: unknown field %r" % extra[0])
    return {"sandbox_id": sid, "base_url": url}


def gone_error(e: MoatError, sandbox_id: str, url: str) -> NotFound:
    return NotFound("sandbox %s of the session state is gone from moat at %s "
                    "(deleted, timed out or idle): %s" % (sandbox_id, url, e.message),
                    status=e.status, code=e.code)
