"""The console's actions: each needs an approver's own session (console.auth; the console token only looks),
checks the CSRF value, then calls the same ops/ function as the CLI as that authenticated approver — no form
field names who acts. Success redirects to the intent's timeline (POST-redirect-GET); a refusal shows the page
again with the reason."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from console.auth import ConsoleAuth, Principal
from interlock.errors import InterlockError
from ops import attention, holds, quarantine
from ops.approvers import Approver
from ops.context import OpsContext

_CSRF = PlainTextResponse("403: the form is stale or forged (CSRF check failed); reload the page", status_code=403)
_NOT_A_PERSON = PlainTextResponse("403: the console token decides nothing; log in with your own approver token "
                                  "(`interlock approver new ID`) to approve, reject or resolve", status_code=403)


async def _form(request: Request) -> tuple[Approver | None, FormData | None, Response | None]:
    """(the authenticated approver, the form) or the response refusing the request."""
    form = await request.form()
    auth: ConsoleAuth = request.app.state.auth
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None or not auth.csrf_ok(principal, _text(form, "csrf")):
        return None, None, _CSRF
    if principal.approver is None:
        return None, None, _NOT_A_PERSON
    return principal.approver, form, None


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _done(merchant_id: str, sik: str, message: str) -> Response:
    return RedirectResponse(f"/intents/{quote(merchant_id)}/{quote(sik)}?msg={quote(message)}", status_code=303)


def _refused(page: str, message: str) -> Response:
    return RedirectResponse(f"{page}?err={quote(message)}", status_code=303)


async def approve(request: Request) -> Response:
    approver, form, refusal = await _form(request)
    if refusal is not None or approver is None or form is None:
        return refusal or _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)  # that merchant's shard (SPEC §15)
    amount = _text(form, "amount_minor")
    expected = holds.Expected(amount_minor=int(amount) if amount and amount.isdigit() else None,
                              mandate_hash=_text(form, "mandate_hash"))  # fmt: skip
    try:
        released = await run_in_threadpool(
            holds.approve, ctx, sik, approver=approver, terms_digest=_text(form, "terms") or "",
            merchant_id=merchant_id, reason=_text(form, "reason") or "approved in the console", expected=expected,
            allow_payee=_text(form, "allow_payee"),  # the checkbox carries the payee digest it was drawn with
        )  # fmt: skip
    except InterlockError as exc:
        return _refused("/holds", str(exc))
    note = "" if released.enqueued else " (Redis unreachable: the reconciler will hand it to the rail worker)"
    if released.payee_allowed_seq is not None:
        note += f"; payee {released.intent.subject_id} added to the mandate's payees for later calls"
    return _done(merchant_id, sik, f"approved by {approver.approver_id}: released to the rail worker{note}")


async def reject(request: Request) -> Response:
    approver, form, refusal = await _form(request)
    if refusal is not None or approver is None or form is None:
        return refusal or _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)
    try:
        await run_in_threadpool(holds.reject, ctx, sik, approver=approver, reason=_text(form, "reason") or "",
                                merchant_id=merchant_id)  # fmt: skip
    except InterlockError as exc:
        return _refused("/holds", str(exc))
    return _done(merchant_id, sik, f"rejected by {approver.approver_id}: BLOCKED, nothing moves")


async def resolve(request: Request) -> Response:
    approver, form, refusal = await _form(request)
    if refusal is not None or approver is None or form is None:
        return refusal or _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    applied = _text(form, "outcome") == "applied"
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)
    try:
        intent = await run_in_threadpool(
            quarantine.resolve, ctx, sik, operator_id=approver.approver_id, authenticated=approver,
            applied_entity_id=_text(form, "entity_id") if applied else None, not_applied=not applied,
            evidence=_text(form, "evidence"), merchant_id=merchant_id,
        )  # fmt: skip
    except InterlockError as exc:
        return _refused("/quarantine", str(exc))
    return _done(merchant_id, sik, f"resolved by {approver.approver_id}: {intent.state.value}")


async def acknowledge(request: Request) -> Response:
    """An approver acknowledges the attention an applied intent's rail_status raised (ops/attention.py)."""
    approver, form, refusal = await _form(request)
    if refusal is not None or approver is None or form is None:
        return refusal or _CSRF
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    ctx: OpsContext = request.app.state.ctx.for_merchant(merchant_id)
    reason = _text(form, "attention") or ""
    raised = _text(form, "raised_seq")  # the raising the page showed: refused if raised again since it was drawn
    try:
        await run_in_threadpool(attention.acknowledge, ctx, sik, attention=reason, operator_id=approver.approver_id,
                                note=_text(form, "note") or "", merchant_id=merchant_id, authenticated=approver,
                                raised_seq=int(raised) if raised and raised.isdigit() else None)  # fmt: skip
    except InterlockError as exc:
        return _refused(f"/intents/{quote(merchant_id)}/{quote(sik)}", str(exc))
    return _done(merchant_id, sik, f"{reason} acknowledged by {approver.approver_id}: no money moved")
