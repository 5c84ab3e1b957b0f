"""The ACL login form and logout: an admin account (access key and secret key) for the session."""

from __future__ import annotations

from aiohttp import web

from tidemq.console import html
from tidemq.console.app import render
from tidemq.console.auth import COOKIE, GATE, session_of


def _safe_next(target: str) -> str:
    """Only a path of this console: never another site (``//host`` or a scheme)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def _form(next_path: str, access_key: str = "", error: str = "") -> str:
    return (
        "<p>The cluster has ACL on: log in with an admin account of its plain_acl.yml.</p>"
        f"{html.error_box(error)}"
        '<form method=post action="/login" id=login>'
        f'<input type=hidden name=next value="{html.e(next_path)}">'
        f'<label>Access key <input name=access_key id=access-key value="{html.e(access_key)}" '
        "autocomplete=username></label> "
        "<label>Secret key <input name=secret_key id=secret-key type=password "
        "autocomplete=current-password></label> "
        "<button type=submit id=login-submit>Log in</button></form>"
    )


async def login_form(request: web.Request) -> web.Response:
    return render("Log in", _form(_safe_next(request.query.get("next", "/"))))


async def login(request: web.Request) -> web.Response:
    data = await request.post()
    next_path = _safe_next(str(data.get("next", "/")))
    access_key = str(data.get("access_key", "")).strip()
    secret_key = str(data.get("secret_key", ""))
    if not access_key or not secret_key:
        return render(
            "Log in", _form(next_path, access_key, "enter both the access key and the secret key"), status=400
        )
    gate, session = request.app[GATE], session_of(request)
    refused = await gate.log_in(session, access_key, secret_key)
    if refused:
        return render("Log in", _form(next_path, access_key, f"refused: {refused}"), status=403)
    gate.rotate(session)
    response = web.HTTPSeeOther(next_path)
    response.set_cookie(COOKIE, session.token, httponly=True, samesite="Strict", path="/")
    raise response


async def logout(request: web.Request) -> web.Response:
    request.app[GATE].log_out(session_of(request))
    response = web.HTTPSeeOther("/login" if request.app[GATE].acl else "/")
    response.del_cookie(COOKIE, path="/")
    raise response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_get("/logout", logout)
