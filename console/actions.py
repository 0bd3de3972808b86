"""The console's actions: each checks the CSRF value, then calls the same ops/ function as the CLI.
Success redirects to the intent's timeline (POST-redirect-GET); a refusal shows the page again with
the reason and status 409."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from console.auth import ConsoleAuth
from interlock.errors import InterlockError
from ops import holds, quarantine
from ops.context import OpsContext


async def _form(request: Request) -> FormData | None:
    form = await request.form()
    auth: ConsoleAuth = request.app.state.auth
    return form if auth.csrf_ok(_text(form, "csrf")) else None


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _done(merchant_id: str, sik: str, message: str) -> Response:
    return RedirectResponse(f"/intents/{quote(merchant_id)}/{quote(sik)}?msg={quote(message)}", status_code=303)


def _refused(page: str, message: str) -> Response:
    return RedirectResponse(f"{page}?err={quote(message)}", status_code=303)


_CSRF = PlainTextResponse("403: the form is stale or forged (CSRF check failed); reload the page", status_code=403)


async def approve(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        return _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)  # that merchant's shard (SPEC §15)
    amount = _text(form, "amount_minor")
    expected = holds.Expected(amount_minor=int(amount) if amount and amount.isdigit() else None,
                              terms_digest=_text(form, "terms"))  # fmt: skip
    try:
        released = await run_in_threadpool(
            holds.approve, ctx, sik, approver=_text(form, "approver") or "", merchant_id=merchant_id,
            reason=_text(form, "reason") or "approved in the console", expected=expected,
        )  # fmt: skip
    except InterlockError as exc:
        return _refused("/holds", str(exc))
    note = "" if released.enqueued else " (Redis unreachable: the reconciler will hand it to the rail worker)"
    return _done(merchant_id, sik, f"approved: released to the rail worker{note}")


async def reject(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        return _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)
    try:
        await run_in_threadpool(holds.reject, ctx, sik, approver=_text(form, "approver") or "",
                                reason=_text(form, "reason") or "", merchant_id=merchant_id)  # fmt: skip
    except InterlockError as exc:
        return _refused("/holds", str(exc))
    return _done(merchant_id, sik, "rejected: BLOCKED, nothing moves")


async def resolve(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        return _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    applied = _text(form, "outcome") == "applied"
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)
    try:
        intent = await run_in_threadpool(
            quarantine.resolve, ctx, sik, operator_id=_text(form, "operator") or "",
            applied_entity_id=_text(form, "entity_id") if applied else None, not_applied=not applied,
            evidence=_text(form, "evidence"), merchant_id=merchant_id,
        )  # fmt: skip
    except InterlockError as exc:
        return _refused("/quarantine", str(exc))
    return _done(merchant_id, sik, f"resolved: {intent.state.value}")
