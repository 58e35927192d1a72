"""Sessions of the control plane (docs/control-plane.md, docs/API.md
"Sessions and the control plane"): an agent that lives in a sandbox and
holds only a session token.  ``Sessions`` and its value type ``Session``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Dict, List, Mapping, Optional,
                    Sequence, Union)
from urllib.parse import quote

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Session", "Sessions", "Artifact"]

# A route as a session asks for it: "name", or (name, [models]).
Route = Union[str, Mapping[str, Any], Sequence[Any]]


@dataclass
class Artifact:
    """A file the agent uploaded through a one-time URL."""
    name: str
    size: int = 0
    sha256: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, obj: Mapping[str, Any]) -> "Artifact":
        return cls(name=obj.get("name", ""), size=int(obj.get("size") or 0),
                   sha256=obj.get("sha256", ""), raw=dict(obj))


@dataclass
class Session:
    """A session object: ``state`` is "running", "exited" or "ended";
    ``usage``, ``budget`` and ``budget_left`` as the daemon counts them;
    ``raw`` the daemon's whole object."""
    id: str
    sandbox_id: Optional[str] = None
    state: str = ""
    created_at: str = ""
    ended_at: Optional[str] = None
    ended_reason: Optional[str] = None
    restarts: int = 0
    agent: Dict[str, Any] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    usage: Dict[str, Any] = field(default_factory=dict)
    budget: Dict[str, Any] = field(default_factory=dict)
    budget_left: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def exit_code(self) -> Optional[int]:
        """The agent command's exit status, once it has exited."""
        return self.agent.get("exit_code")

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @classmethod
    def _from(cls, obj: Mapping[str, Any]) -> "Session":
        return cls(id=obj.get("id", ""), sandbox_id=obj.get("sandbox_id"),
                   state=obj.get("state", ""), created_at=obj.get("created_at", ""),
                   ended_at=obj.get("ended_at"), ended_reason=obj.get("ended_reason"),
                   restarts=int(obj.get("restarts") or 0),
                   agent=dict(obj.get("agent") or {}),
                   metadata=dict(obj.get("metadata") or {}),
                   usage=dict(obj.get("usage") or {}),
                   budget=dict(obj.get("budget") or {}),
                   budget_left=dict(obj.get("budget_left") or {}), raw=dict(obj))


def _seg(s: Any) -> str:
    if isinstance(s, Session):
        s = s.id
    if not isinstance(s, str) or not s:
        raise ValueError("expected a session or a non-empty session id, got %r" % (s,))
    return quote(s, safe="")


def _route(r: Route) -> Any:
    """One entry of llm.routes: "name" or {"route", "models"}."""
    if isinstance(r, str):
        return r
    if isinstance(r, Mapping):
        return dict(r)
    if isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], str):
        return {"route": r[0], "models": list(r[1])}
    raise TypeError("a route is a name, (name, [models]) or {'route', 'models'}: %r"
                    % (r,))


class Sessions:
    """``Sessions(url=...)`` or ``client.sessions``: the daemon's sessions.

    Errors are the client's typed MoatErrors: InvalidRequest for a bad body
    (an unknown route, a budget that is not a positive integer), NotFound
    for an unknown session, Unsupported for ``mcp``.  A budget that is used
    up ends the agent's model calls with BudgetExceeded (429) inside the
    sandbox; here it shows in ``usage()``'s ``budget_left``."""

    def __init__(self, client: Optional["Client"] = None, url: Optional[str] = None,
                 token: Optional[str] = None):
        from .client import Client
        self.client = client or Client(url, token)

    def create(self, cmd: Sequence[str], *, routes: Sequence[Route] = (),
               image: Any = None, manifest: Optional[Mapping[str, Any]] = None,
               limits: Optional[Mapping[str, Any]] = None,
               network: Optional[Mapping[str, Any]] = None,
               metadata: Optional[Mapping[str, str]] = None,
               env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
               sdk_env: bool = False, env_fd: bool = False,
               budget: Optional[Mapping[str, int]] = None) -> Session:
        """Create a session: a sandbox with ``cmd`` (the agent) started in it.
        ``routes``: the ``--llm-route`` names it may call, each a name or
        (name, [models]); ``budget``: tokens, requests, wall_s, cpu_s."""
        if isinstance(cmd, str) or not cmd:
            raise ValueError("cmd must be a non-empty list of strings (an argv)")
        agent: Dict[str, Any] = {"cmd": list(cmd)}
        if env:
            agent["env"] = dict(env)
        if cwd is not None:
            agent["cwd"] = cwd
        if sdk_env:
            agent["sdk_env"] = True
        if env_fd:
            agent["env_fd"] = True
        body: Dict[str, Any] = {"agent": agent,
                                "llm": {"routes": [_route(r) for r in routes]}}
        from .store import image_ref
        for key, val in (("image", image_ref(image) if image is not None else None),
                         ("manifest", manifest), ("limits", limits),
                         ("network", network), ("metadata", metadata),
                         ("budget", budget)):
            if val is not None:
                body[key] = dict(val) if isinstance(val, Mapping) else val
        return Session._from(self.client.request_json("POST", "/v1/sessions", body))

    def list(self, state: Optional[str] = None) -> List[Session]:
        params = [("state", state)] if state else None
        obj = self.client.request_json("GET", "/v1/sessions", params=params)
        return [Session._from(o) for o in (obj or {}).get("sessions", [])]

    def get(self, session: Union[str, Session]) -> Session:
        return Session._from(self.client.request_json("GET", "/v1/sessions/" + _seg(session)))

    def delete(self, session: Union[str, Session], purge: bool = False) -> Session:
        """End a session: its sandbox is deleted and its token revoked;
        ``purge`` removes its conversation and artifacts too.  Answers the
        ended session."""
        params = [("purge", "true")] if purge else None
        return Session._from(self.client.request_json(
            "DELETE", "/v1/sessions/" + _seg(session), params=params))

    remove = delete

    def restart(self, session: Union[str, Session]) -> Session:
        """A fresh sandbox and a new token for the same session (the
        conversation, usage and artifacts carry on)."""
        return Session._from(self.client.request_json(
            "POST", "/v1/sessions/" + _seg(session) + "/restart"))

    def usage(self, session: Union[str, Session]) -> Dict[str, Any]:
        """``{"usage", "budget", "budget_left"}``."""
        return self.client.request_json("GET", "/v1/sessions/" + _seg(session) + "/usage")

    def conversation(self, session: Union[str, Session]) -> Dict[str, Any]:
        """``{"session", "messages": [...], "turns": N}``."""
        return self.client.request_json(
            "GET", "/v1/sessions/" + _seg(session) + "/conversation")

    def artifacts(self, session: Union[str, Session]) -> List[Artifact]:
        obj = self.client.request_json("GET", "/v1/sessions/" + _seg(session) + "/artifacts")
        return [Artifact._from(o) for o in (obj or {}).get("artifacts", [])]

    def artifact(self, session: Union[str, Session], name: str) -> bytes:
        """The bytes of one artifact (NotFound)."""
        if not isinstance(name, str) or not name:
            raise ValueError("expected an artifact name, got %r" % (name,))
        return self.client.request(
            "GET", "/v1/sessions/%s/artifacts/%s" % (_seg(session), quote(name, safe="")),
            headers={"Accept": "*/*"}).body

    def delete_artifact(self, session: Union[str, Session], name: str) -> None:
        self.client.request(
            "DELETE", "/v1/sessions/%s/artifacts/%s" % (_seg(session), quote(name, safe="")))
