"""Exceptions raised by the moat client.

Every error the daemon answers with (``{"error":{"code","message"}}``) becomes
a :class:`MoatError` carrying ``status`` (the HTTP status), ``code`` (the API's
error code) and ``message``; the known codes map to subclasses so that callers
can write ``except NotFound:``.  Failures to reach the daemon at all raise
:class:`MoatConnectionError` (``status`` is ``None``) naming the URL.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "MoatError",
    "MoatConnectionError",
    "InvalidRequest",
    "InvalidPath",
    "IsDirectory",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "Conflict",
    "TooLarge",
    "UnsupportedMediaType",
    "PatchFailed",
    "LimitReached",
    "InternalError",
    "InvalidImage",
    "PauseUnavailable",
    "Paused",
    "RegistryError",
    "InsufficientStorage",
    "BudgetExceeded",
    "UpstreamError",
    "UpstreamTimeout",
    "Unsupported",
    "error_from_response",
]


class MoatError(Exception):
    """An error answered by moat serve, or a failure to talk to it."""

    def __init__(self, message: str, status: Optional[int] = None,
                 code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        return "%s: %s" % (" ".join(parts), self.message)

    def __repr__(self) -> str:
        return "%s(status=%r, code=%r, message=%r)" % (
            type(self).__name__, self.status, self.code, self.message)


class MoatConnectionError(MoatError):
    """The daemon could not be reached (refused, unresolvable, reset, timeout)."""

    def __init__(self, message: str, url: Optional[str] = None):
        super().__init__(message, status=None, code="connection_error")
        self.url = url


class InvalidRequest(MoatError):
    """400 invalid_request: malformed JSON, wrong type, unknown field, bad value."""


class InvalidPath(MoatError):
    """400 invalid_path: empty, NUL, or outside the sandbox's filesystem."""


class IsDirectory(MoatError):
    """400 is_directory: a file operation on a directory."""


class Unauthorized(MoatError):
    """401 unauthorized: missing or wrong bearer token."""


class Forbidden(MoatError):
    """403 forbidden: a host path not allowed, or a write the policy forbids."""


class NotFound(MoatError):
    """404 not_found: no such sandbox, process, file or route."""


class MethodNotAllowed(MoatError):
    """405 method_not_allowed."""


class Conflict(MoatError):
    """409 conflict: the sandbox is not running, or the process has ended."""


class TooLarge(MoatError):
    """413 too_large: a body, file, image or archive over its limit."""


class UnsupportedMediaType(MoatError):
    """415 unsupported_media_type: not a PNG/JPEG/GIF/WebP image."""


class PatchFailed(MoatError):
    """422 patch_failed: an apply_patch hunk did not match; nothing changed."""


class LimitReached(MoatError):
    """429 limit_reached: too many sandboxes or processes."""


class InternalError(MoatError):
    """500 internal."""


class InvalidImage(MoatError):
    """422 invalid_image: a blob whose digest or size is not the manifest's,
    or an archive that is not an image; nothing was stored."""


class PauseUnavailable(MoatError):
    """422 pause_unavailable: the daemon has no cgroup freezer to pause with."""


class Paused(Conflict):
    """409 paused: the sandbox is paused; resume() it first."""


class RegistryError(MoatError):
    """502 registry_error: the registry failed or answered nonsense."""


class InsufficientStorage(MoatError):
    """507 insufficient_storage: the store is over --store-max, or the disk
    is full; nothing was stored."""


class BudgetExceeded(LimitReached):
    """429 budget_exceeded: a session's budget (tokens, requests, wall_s or
    cpu_s; the message names it) is used up; no more model calls."""


class UpstreamError(MoatError):
    """502 upstream_error: the LLM upstream of a route could not be reached."""


class UpstreamTimeout(MoatError):
    """504 timeout: the LLM upstream did not answer in its route's time."""


class Unsupported(MoatError):
    """422 unsupported: a feature this daemon leaves out (a session's mcp)."""


_BY_CODE: Dict[str, Type[MoatError]] = {
    "invalid_request": InvalidRequest,
    "invalid_path": InvalidPath,
    "is_directory": IsDirectory,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "too_large": TooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "patch_failed": PatchFailed,
    "limit_reached": LimitReached,
    "internal": InternalError,
    "invalid_image": InvalidImage,
    "pause_unavailable": PauseUnavailable,
    "paused": Paused,
    "registry_error": RegistryError,
    "insufficient_storage": InsufficientStorage,
    "budget_exceeded": BudgetExceeded,
    "upstream_error": UpstreamError,
    "timeout": UpstreamTimeout,
    "unsupported": Unsupported,
}

# Used when the body carries no (known) code.
_BY_STATUS: Dict[int, Type[MoatError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: TooLarge,
    415: UnsupportedMediaType,
    422: PatchFailed,
    429: LimitReached,
    500: InternalError,
    502: RegistryError,
    504: UpstreamTimeout,
    507: InsufficientStorage,
}


def error_from_response(status: int, code: Optional[str],
                        message: str) -> MoatError:
    """Build the most specific MoatError for an error answer."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status) or MoatError
    return cls(message, status=status, code=code)
