"""Rendering a console page: its template with the CSRF value and who is signed in (used by console.app's routes
and console.pages alike, so neither imports the other)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from console.auth import ConsoleAuth, Principal


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    auth: ConsoleAuth = request.app.state.auth
    principal: Principal | None = getattr(request.state, "principal", None)
    return templates.TemplateResponse(request, name, {"csrf": auth.csrf_value(principal), "principal": principal,
                                                      **context}, status_code=status_code)  # fmt: skip
