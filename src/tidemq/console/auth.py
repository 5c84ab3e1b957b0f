"""Sessions, the ACL login gate and CSRF tokens.

Every browser gets a session (a random token in an HttpOnly, SameSite=Strict cookie, kept in memory and
dropped after :data:`IDLE_EXPIRY` idle) holding a CSRF token that every state-changing form carries.

When the RocketMQ side has ACL on, a session also holds an admin account: the login form checks the
access key and secret key with one signed admin-only call (UPDATE_BROKER_CONFIG with no body, a no-op on
Java's broker and unknown to tidemq's, so it changes nothing), and every admin call of that session is
signed with those keys. "ACL on" is known from ``ConsoleSettings.acl`` (``tidemq console --acl``) or
learnt the first time a broker refuses an unsigned call with NO_PERMISSION.
"""

from __future__ import annotations

import contextlib
import contextvars
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from aiohttp import web

from tidemq.client import api
from tidemq.client.admin import Admin
from tidemq.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

COOKIE = "tidemq_console"
CSRF_FIELD = "_csrf"
IDLE_EXPIRY = 8 * 3600.0
MAX_SESSIONS = 10_000
#: Paths open without a login: the form itself and the stylesheet and script it uses.
OPEN_PATHS = ("/login", "/static/")
#: Paths with no session at all: what the browser fetches besides pages.
UNGATED_PATHS = ("/static/",)

#: The CSRF token of the request being rendered, for :func:`tidemq.console.html.page`.
current_csrf: contextvars.ContextVar[str] = contextvars.ContextVar("console_csrf", default="")
#: The logged-in access key of the request being rendered ("" without ACL), for the logout link.
current_user: contextvars.ContextVar[str] = contextvars.ContextVar("console_user", default="")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class Session:
    token: str
    csrf: str
    last_seen: float
    access_key: str = ""
    admin: Admin | None = None


@dataclass(slots=True)
class Gate:
    """The console's sessions and whether the cluster asks for an account."""

    namesrv: str
    acl: bool
    shared_admin: Admin
    #: Outside the gate: no session, no login, no CSRF check (static files, another component's routes).
    open_paths: tuple[str, ...] = ()
    sessions: dict[str, Session] = field(default_factory=dict)
    probed: bool = False

    async def probe(self) -> None:
        """Once: does a broker refuse an unsigned call? (The name server answers anyone, so the topic
        list alone would not tell.) A cluster that cannot be asked now is asked again next request."""
        if self.acl or self.probed:
            return
        try:
            await self.shared_admin.runtime_info()
        except api.BrokerError as exc:
            self.acl = exc.code == ResponseCode.NO_PERMISSION
        except Exception as exc:
            log.debug("console: could not ask the brokers whether ACL is on: %s", exc)
            return
        self.probed = True
        if self.acl:
            log.info("console: the brokers refuse unsigned calls; asking for an admin account")

    def session(self, token: str | None) -> Session | None:
        now = time.monotonic()
        found = self.sessions.get(token or "")
        if found is None or now - found.last_seen > IDLE_EXPIRY:
            return None
        found.last_seen = now
        return found

    def new_session(self) -> Session:
        self._sweep()
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.monotonic())
        self.sessions[s.token] = s
        return s

    def _sweep(self) -> None:
        now = time.monotonic()
        for token, s in list(self.sessions.items()):
            if now - s.last_seen > IDLE_EXPIRY:
                self._drop(token)
        while len(self.sessions) >= MAX_SESSIONS:
            self._drop(min(self.sessions.values(), key=lambda s: s.last_seen).token)

    def _drop(self, token: str) -> None:
        s = self.sessions.pop(token, None)
        if s is not None and s.admin is not None:
            admin, s.admin = s.admin, None
            # Closed in the background: the caller may be a plain function.
            import asyncio

            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(admin.close())

    async def log_in(self, session: Session, access_key: str, secret_key: str) -> str:
        """The broker's reason for refusing the account, or "" once the session holds it."""
        admin = Admin(self.namesrv, credentials=(access_key, secret_key))
        try:
            await admin.check_admin_account()
        except api.BrokerError as exc:
            await admin.close()
            return exc.remark or str(exc)
        except Exception as exc:
            await admin.close()
            return f"the cluster could not be asked: {exc}"
        if session.admin is not None:
            await session.admin.close()
        session.admin, session.access_key = admin, access_key
        return ""

    def sampling_admin(self) -> Admin:
        """The overview sampler's client: under ACL, the most recently active logged-in session's."""
        signed = [s for s in self.sessions.values() if s.admin is not None]
        if not signed:
            return self.shared_admin
        admin = max(signed, key=lambda s: s.last_seen).admin
        return admin if admin is not None else self.shared_admin

    def rotate(self, session: Session) -> None:
        """A new token and CSRF token once the session holds an account (no session fixation)."""
        self.sessions.pop(session.token, None)
        session.token, session.csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.sessions[session.token] = session

    def log_out(self, session: Session) -> None:
        self._drop(session.token)

    async def close(self) -> None:
        for token in list(self.sessions):
            s = self.sessions.pop(token)
            if s.admin is not None:
                await s.admin.close()


GATE = web.AppKey("gate", Gate)
SESSION_KEY = web.RequestKey("console_session", Session)


def session_of(request: web.Request) -> Session:
    return request[SESSION_KEY]


def admin_of(request: web.Request) -> Admin:
    """The admin client for this request: the session's signed one under ACL, else the shared one."""
    session = session_of(request)
    return session.admin if session.admin is not None else request.app[GATE].shared_admin


def _refused_unsigned(exc: BaseException) -> bool:
    return isinstance(exc, api.BrokerError) and exc.code == ResponseCode.NO_PERMISSION


def _set_cookie(response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(COOKIE, session.token, httponly=True, samesite="Strict", path="/")


@web.middleware
async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    g = request.app[GATE]
    if request.path.startswith(g.open_paths):
        return await handler(request)
    session = g.session(request.cookies.get(COOKIE))
    fresh = session is None
    if session is None:
        session = g.new_session()
    request[SESSION_KEY] = session
    reset = current_csrf.set(session.csrf)
    reset_user = current_user.set(session.access_key)
    try:
        response = await _guarded(request, handler, g, session)
    except web.HTTPException as exc:
        if fresh:
            _set_cookie(exc, session)
        raise
    finally:
        current_csrf.reset(reset)
        current_user.reset(reset_user)
    if fresh:
        _set_cookie(response, session)
    return response


async def _guarded(request: web.Request, handler: Handler, g: Gate, session: Session) -> web.StreamResponse:
    is_open = request.path.startswith(OPEN_PATHS)
    if not is_open:
        await g.probe()
    if g.acl and session.admin is None and not is_open:
        raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
    if request.method == "POST" and request.path != "/login":
        data = await request.post()
        sent = str(data.get(CSRF_FIELD, ""))
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise web.HTTPForbidden(text="The form is stale or came from another site; reload the page.")
    try:
        return await handler(request)
    except Exception as exc:
        if not g.acl and session.admin is None and _refused_unsigned(exc):
            log.info("console: the broker refused an unsigned call (%s); asking for an admin account", exc)
            g.acl = True
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}") from None
        raise
