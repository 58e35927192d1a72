"""Python client for moat serve, the moat agent-sandbox daemon (docs/API.md).

    from moat import Sandbox
    with Sandbox.create(limits={"memory": "512M"}) as sb:
        print(sb.exec("echo hi").stdout)

Standard library only.
"""

from .backend import (ExecuteResponse, FileDownloadResponse,
                      FileUploadResponse)
from .client import (DEFAULT_URL, Client, ExecResult, FileInfo, Files, Process,
                     ProcessOutput, Sandbox, StreamEvent)
from .errors import (BudgetExceeded, Conflict, Forbidden, InsufficientStorage, InternalError,
                     InvalidImage, InvalidPath, InvalidRequest, IsDirectory,
                     LimitReached, MethodNotAllowed, MoatConnectionError,
                     MoatError, NotFound, PatchFailed, Paused, PauseUnavailable,
                     RegistryError, TooLarge, Unauthorized,
                     Unsupported, UnsupportedMediaType, UpstreamError,
                     UpstreamTimeout)
from .sessions import Artifact, Session, Sessions
from .store import Image, Images, Progress, Snapshot, Snapshots

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL", "Client", "ExecResult", "FileInfo", "Files", "Process",
    "ProcessOutput", "Sandbox", "StreamEvent",
    "ExecuteResponse", "FileUploadResponse", "FileDownloadResponse",
    "MoatError", "MoatConnectionError", "InvalidRequest", "InvalidPath",
    "IsDirectory", "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed",
    "Conflict", "TooLarge", "UnsupportedMediaType", "PatchFailed",
    "LimitReached", "InternalError", "InvalidImage", "PauseUnavailable",
    "Paused", "RegistryError", "InsufficientStorage",
    "Image", "Images", "Progress", "Snapshot", "Snapshots",
    "BudgetExceeded", "UpstreamError", "UpstreamTimeout", "Unsupported",
    "Artifact", "Session", "Sessions",
]
