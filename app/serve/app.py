"""The ASGI application: routes, the key check, one-line JSON errors, request counting.

    app = build_app(Server(backend, backend.load(), limits, api_key=key))

Every refusal is JSON with one plain message (`{"error": {"message", "type", "code"}}`, the
shape OpenAI and llama.cpp clients read), never a traceback; an unexpected failure is logged
with its traceback on the server's side and answered 500 in one line, and the server goes on.
"""
from __future__ import annotations

import hmac
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from . import edits, llama, next_edit, openai
from .common import HTTPError, Server, error_body, error_response, server_of

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health",)  # answered without the key: load balancers and editors probe it


async def health(request: Request):
    return JSONResponse({"status": "ok", "model": server_of(request).info.name})


async def metrics(request: Request):
    server = server_of(request)
    runner = getattr(server.backend, "runner", None)
    batcher = getattr(runner, "batcher", None)
    batching = (batcher.passes, batcher.packed_runs) if batcher is not None else None
    return PlainTextResponse(server.metrics.render(runner.waiting if runner else 0, batching), media_type="text/plain; version=0.0.4")


async def _http_error(request: Request, exc: HTTPError):
    return error_response(exc.status, exc.message, exc.headers)


async def _starlette_error(request: Request, exc: StarletteHTTPException):
    message = {404: f"no such endpoint: {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, message, getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception):
    log.exception("%s %s failed", request.method, request.url.path)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return error_response(500, f"internal error: {type(exc).__name__}{': ' + first if first else ''}")


class Guard:
    """Pure ASGI middleware (streams pass through untouched): the key, then counting answers."""

    def __init__(self, app, server: Server) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        status = {}

        async def counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.server.api_key and path not in OPEN_PATHS and not self._authorized(scope):
                await JSONResponse(error_body(401, "a valid API key is required (Authorization: Bearer KEY)"), status_code=401,
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, counted)
                return
            await self.app(scope, receive, counted)
        finally:
            self.server.metrics.answered(_route_of(path), status.get("code", 499))

    def _authorized(self, scope) -> bool:
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode("latin-1")
        token = given[7:].strip() if given[:7].lower() == "bearer " else headers.get(b"x-api-key", b"").decode("latin-1").strip()
        return hmac.compare_digest(token.encode(), self.server.api_key.encode())


ROUTES = [
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1/models", openai.models, methods=["GET"]),
    Route("/models", openai.models, methods=["GET"]),
    Route("/v1/models/{model:path}", openai.model, methods=["GET"]),
    Route("/infill", llama.infill, methods=["POST"]),
    Route("/completion", llama.completion, methods=["POST"]),
    # next-edit prompts (Zeta 2 / 2.1, Sweep) on /v1/completions are answered by app/serve/next_edit.py
    Route("/v1/completions", next_edit.completions_or(openai.completions), methods=["POST"]),
    Route("/completions", next_edit.completions_or(openai.completions), methods=["POST"]),
    Route("/v1/fim/completions", openai.fim_completions, methods=["POST"]),
    Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
    Route("/chat/completions", openai.chat_completions, methods=["POST"]),
    Route("/v1/edits", edits.edits, methods=["POST"]),
    Route("/v1/edit/completions", next_edit.edit_completions, methods=["POST"]),  # Mercury's next edit
]


def _route_of(path: str) -> str:
    """The route a path is answered by, as /metrics labels it ("/v1/models/{model:path}"); "other"
    for none, so a client probing paths cannot grow the label set."""
    return next((r.path for r in ROUTES if r.path_regex.match(path)), "other")


def build_app(server: Server) -> Starlette:
    app = Starlette(routes=ROUTES, exception_handlers={HTTPError: _http_error, StarletteHTTPException: _starlette_error, Exception: _unexpected})
    app.state.server = server
    app.add_middleware(Guard, server=server)
    return app
