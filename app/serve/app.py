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

from . import next_edit
from .common import ClientGone, HTTPError, Server, error_body, error_response, server_of
from .edits import Edits
from .llama import Completion, Infill
from .openai import ChatCompletions, Completions, FimCompletions, model, models
from .respond import Endpoint, handler

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health",)  # answered without the key: load balancers and editors probe it


async def health(request: Request):
    return JSONResponse({"status": "ok", "model": server_of(request).info.name})


async def metrics(request: Request):
    server = server_of(request)
    text = server.metrics.render(server.backend.waiting(), server.backend.batching())
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def _http_error(request: Request, exc: HTTPError):
    return error_response(exc.status, exc.message, exc.headers)


async def _starlette_error(request: Request, exc: StarletteHTTPException):
    message = {404: f"no such endpoint: {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, message, getattr(exc, "headers", None))


async def _client_gone(request: Request, exc: ClientGone):
    # A client that closed its connection while sending its body: no answer reaches it, and its
    # leaving is no failure of the server: one debug line, never a traceback (anyone who can
    # connect could otherwise fill the log).
    log.debug("%s %s: the client left while sending its body", request.method, request.url.path)
    return error_response(499, "the client closed the request")


async def _unexpected(request: Request, exc: Exception):
    log.exception("%s %s failed", request.method, request.url.path)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return error_response(500, f"internal error: {type(exc).__name__}{': ' + first if first else ''}")


class Guard:
    """Pure ASGI middleware (streams pass through untouched): the key, then counting answers."""

    def __init__(self, app, server: Server, routes: list[Route]) -> None:
        self.app, self.server, self.routes = app, server, routes

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
            self.server.metrics.answered(_route_of(path, self.routes), status.get("code", 499))

    def _authorized(self, scope) -> bool:
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode("latin-1")
        token = given[7:].strip() if given[:7].lower() == "bearer " else headers.get(b"x-api-key", b"").decode("latin-1").strip()
        return hmac.compare_digest(token.encode(), self.server.api_key.encode())


# The model's endpoints: a route row each, its Shape reading the body and wording the answer
# (app/serve/respond.py runs them all). A new endpoint is one Shape and one row here.
ENDPOINTS = [
    Endpoint("/infill", Infill),
    Endpoint("/completion", Completion),
    Endpoint("/v1/completions", Completions),
    Endpoint("/completions", Completions),
    Endpoint("/v1/fim/completions", FimCompletions),
    Endpoint("/v1/chat/completions", ChatCompletions),
    Endpoint("/chat/completions", ChatCompletions),
    Endpoint("/v1/edits", Edits),
]

GET_ROUTES = [
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/models", models, methods=["GET"]),
    Route("/v1/models/{model:path}", model, methods=["GET"]),
]


# Next-edit prediction (app/serve/next_edit.py): Mercury's endpoint, and the Zeta 2 / 2.1 and
# Sweep prompts Zed's edit-prediction provider sends to /v1/completions, answered in their format.
NEXT_EDIT_ROUTES = [Route("/v1/edit/completions", next_edit.edit_completions, methods=["POST"])]
NEXT_EDIT_PROMPTS_ON = {"/v1/completions", "/completions"}


def routes_of(endpoints: list[Endpoint]) -> list[Route]:
    def answer(e: Endpoint):
        return next_edit.completions_or(handler(e.shape)) if e.path in NEXT_EDIT_PROMPTS_ON else handler(e.shape)

    return [*GET_ROUTES, *NEXT_EDIT_ROUTES, *(Route(e.path, answer(e), methods=["POST"]) for e in endpoints)]


ROUTES = routes_of(ENDPOINTS)


def _route_of(path: str, routes: list[Route]) -> str:
    """The route a path is answered by, as /metrics labels it ("/v1/models/{model:path}"); "other"
    for none, so a client probing paths cannot grow the label set."""
    return next((r.path for r in routes if r.path_regex.match(path)), "other")


def build_app(server: Server, endpoints: list[Endpoint] = ENDPOINTS) -> Starlette:
    """The application; `endpoints`: its POST route rows (ENDPOINTS; a test adds one of its own)."""
    routes = ROUTES if endpoints is ENDPOINTS else routes_of(endpoints)
    app = Starlette(routes=routes, exception_handlers={HTTPError: _http_error, ClientGone: _client_gone, StarletteHTTPException: _starlette_error,
                                                       Exception: _unexpected})
    app.state.server = server
    app.add_middleware(Guard, server=server, routes=routes)
    return app
