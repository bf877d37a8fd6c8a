"""`sharpen serve --ray`: N replicas of the server on a Ray cluster, behind one address (Ray Serve).

    sharpen serve --ray --replicas 2 --gpus-per-replica 1 [--model M] [--host H --port P]

    Ray's HTTP proxy (H:P) -> Front (one, no model) -> Replica x N (each a LocalBackend and its Runner)

Each replica is the single-process server whole: it loads the model once (on its own GPUs,
`--gpus-per-replica`), builds the same Starlette app (app.py build_app: every route, the key,
/metrics) and answers the requests Front hands it through that app, its bytes streamed back as
they come, so a streamed answer reaches the client step by step as from one process.

Front reads each request's body and routes it by prompt: a hash of the first AFFINITY_CHARS
characters of its prompt (llama.vim's input_extra and input_prefix, an OpenAI prompt, a chat's
first messages, an edit's text) places it on Ray's consistent-hash ring (PrefixAffinityRouter),
so requests for the same file prefix go to the replica whose prefix cache (core/prefix_cache.py)
holds it; when that replica is busy to its limit the next on the ring takes the request, and a
replica that is dead or being replaced has left the ring. A replica that dies fails only the requests it was running (a clean one-line
error: a JSON 503 before an answer began, the stream's error event after); Ray starts a new one,
and the others answer meanwhile.

Ray is an optional extra (`pip install sharpen[ray]`); the single-process server needs none of it.
RAY_ADDRESS reaches an existing cluster; without it a local one starts.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import sys
import threading
from typing import AsyncIterator

from ...core.errors import UsageError

log = logging.getLogger(__name__)

APP_NAME = "sharpen"
AFFINITY_CHARS = 2048  # the prompt's first characters that pick a replica: a file's head, llama.vim's extra chunks
REPLICA_HEADER = "x-sharpen-replica"  # which replica answered (its process id): a client, a test, a log can tell
FRONT_CPUS = 0.5  # Front parses bodies and relays bytes: a fraction of a core


def affinity_key(body: bytes) -> str | None:
    """The hash of the first AFFINITY_CHARS characters of a request's prompt; None: no prompt (a GET, a bad body)."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    parts: list[str] = []
    for chunk in data.get("input_extra") or []:  # llama.vim: other files' chunks go first in the canvas
        if isinstance(chunk, dict) and isinstance(chunk.get("text"), str):
            parts.append(chunk["text"])
    for name in ("input_prefix", "prompt", "text"):
        if isinstance(data.get(name), str):
            parts.append(data[name])
    for message in data.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
    head = "".join(parts)[:AFFINITY_CHARS]
    return hashlib.sha256(head.encode("utf-8", "surrogatepass")).hexdigest() if head else None


def _router_class():
    from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter

    class PrefixAffinityRouter(ConsistentHashRouter):
        """Ray's consistent-hash ring (its primary replica, then its successors when that one has no
        room; a replica that is gone leaves the ring), keyed by the request's prompt head."""

        def _routing_key(self, pending_request):
            if pending_request is not None and pending_request.args and isinstance(pending_request.args[0], dict):
                key = pending_request.args[0].get("affinity")
                if key is not None:
                    return key
            return super()._routing_key(pending_request)  # no prompt: spread (a fresh id per request)

    PrefixAffinityRouter.__qualname__ = "PrefixAffinityRouter"  # Ray finds it by module and name (this module's __getattr__)
    return PrefixAffinityRouter


def __getattr__(name: str):
    """PrefixAffinityRouter, made on first use: this module imports without Ray (the single-process server needs none)."""
    if name == "PrefixAffinityRouter":
        globals()[name] = _router_class()
        return globals()[name]
    raise AttributeError(name)


class ReplicaServer:
    """One replica: the model loaded once, the single-process app, a request run through it."""

    def __init__(self, model_request, limits, sampling, editing, api_key: str | None, prefix_cache_mb: int) -> None:
        from ..backend import LocalBackend
        from .app import build_app
        from .common import Server
        from .common import keep_prefixes

        backend = LocalBackend(model_request, quiet=True, max_waiting=limits.waiting, batch=limits.batch)
        info = backend.load()
        keep_prefixes(backend, prefix_cache_mb)
        self.app = build_app(Server(backend, info, limits, sampling, editing, api_key=api_key))
        self.pid = str(os.getpid())

    async def forward(self, request: dict) -> AsyncIterator[object]:
        """The app's answer to `request` (method, path, query, headers, body): first (status,
        headers), then the body's pieces as the app sends them. Closing this generator (the
        client left, Front cancelled) is the client's disconnect: the run stops."""
        sent: asyncio.Queue = asyncio.Queue()
        gone = asyncio.Event()
        delivered = False

        async def receive():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": request["body"], "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            await sent.put(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request["method"], "scheme": "http",
                 "path": request["path"], "raw_path": request["path"].encode(), "query_string": request["query"], "root_path": "",
                 "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request["headers"]],
                 "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}
        task = asyncio.create_task(self.app(scope, receive, send))
        try:
            while True:
                getter = asyncio.create_task(sent.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if task.exception() is not None:
                        raise task.exception()
                    return  # the app ended without a body's last piece
                message = getter.result()
                if message["type"] == "http.response.start":
                    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
                    yield (message["status"], [*headers, (REPLICA_HEADER, self.pid)])
                elif message["type"] == "http.response.body":
                    if message.get("body"):
                        yield message["body"]
                    if not message.get("more_body", False):
                        return
        finally:
            gone.set()  # a client that left: the app's disconnect watcher cancels the run
            if not task.done():
                try:
                    await asyncio.wait_for(task, 5)
                except (asyncio.TimeoutError, Exception):
                    task.cancel()


def front_app(handle):
    """Front's ASGI app: every request read, its affinity key computed, handed to a replica and
    its answer relayed as it streams (a replica that dies: a one-line error, see the module's notes)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    from .common import error_body

    async def relay(request: Request):
        body = await request.body()
        forwarded = {"method": request.method, "path": request.url.path, "query": request.url.query.encode(),
                     "headers": [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"] + [("content-length", str(len(body)))],
                     "body": body, "affinity": affinity_key(body)}
        answer = handle.options(stream=True).forward.remote(forwarded)
        stream = answer.__aiter__()
        try:
            status, headers = await stream.__anext__()
        except Exception as exc:  # the replica died (or could not be reached) before answering
            log.warning("a replica failed before answering %s: %s", request.url.path, type(exc).__name__)
            return JSONResponse(error_body(503, "the replica serving this request stopped; try again"), status_code=503,
                                headers={"Retry-After": "1"})
        kind = dict((k.lower(), v) for k, v in headers).get("content-type", "")

        async def pieces():
            try:
                async for piece in stream:
                    yield piece
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # died mid-stream: what was sent stands, then one error event
                log.warning("a replica failed mid-answer on %s: %s", request.url.path, type(exc).__name__)
                if kind.startswith("text/event-stream"):
                    yield ("data: " + json.dumps(error_body(503, "the replica serving this request stopped mid-answer")) + "\n\n").encode()
            finally:
                answer.cancel()  # the client left: the replica's run stops too

        passed = [(k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding")]
        return StreamingResponse(pieces(), status_code=status, headers=dict(passed))

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
    return Starlette(routes=[Route("/{path:path}", relay, methods=methods)])


def deployments(replicas: int, gpus_per_replica: float, cpus_per_replica: float, model_request, limits, sampling, editing,
                api_key: str | None, prefix_cache_mb: int):
    """The Ray Serve application: Front (the ingress) bound to `replicas` ReplicaServers."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    replica = serve.deployment(
        ReplicaServer, name="Replica", num_replicas=replicas,
        ray_actor_options={"num_gpus": gpus_per_replica, "num_cpus": cpus_per_replica},
        max_ongoing_requests=limits.batch + limits.waiting,  # the Runner's own line: beyond it a replica answers 503 itself
        health_check_period_s=2, health_check_timeout_s=30, logging_config={"log_level": "WARNING"},
        request_router_config=RequestRouterConfig(request_router_class=__getattr__("PrefixAffinityRouter")),
    )

    @serve.deployment(name="Front", ray_actor_options={"num_cpus": FRONT_CPUS}, max_ongoing_requests=10_000,
                      logging_config={"log_level": "WARNING"})
    @serve.ingress(lambda: front_app(serve.get_deployment_handle("Replica", APP_NAME)))
    class Front:
        def __init__(self, replica_handle) -> None:
            self.replica_handle = replica_handle  # bound so Ray deploys the replicas with the front

    return Front.bind(replica.bind(model_request, limits, sampling, editing, api_key, prefix_cache_mb))


def serve_on_ray(config, limits, key: str | None, host: str, port: int, replicas: int, gpus_per_replica: float, cpus_per_replica: float,
                 prefix_cache_mb: int) -> int:
    """Start (or reach, RAY_ADDRESS) a Ray cluster, deploy the replicas, serve until interrupted."""
    try:
        import ray
        from ray import serve
    except ImportError:
        raise UsageError("--ray needs Ray Serve: pip install 'sharpen[ray]'") from None
    if replicas < 1:
        raise UsageError("--replicas must be at least 1")
    if gpus_per_replica < 0 or cpus_per_replica <= 0:
        raise UsageError("--gpus-per-replica must be 0 or more and --cpus-per-replica above 0")
    if port == 0:
        raise UsageError("--ray needs a --port of its own (Ray's proxy listens on it; 0 picks none)")
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, logging_level=logging.WARNING)
    quiet = {"log_level": "WARNING"}  # Ray's per-request INFO lines would bury the server's own log
    serve.start(http_options={"host": host, "port": port}, logging_config=quiet)
    serve.run(deployments(replicas, gpus_per_replica, cpus_per_replica, config.model, limits, config.sampling, config.editing, key,
                          prefix_cache_mb), name=APP_NAME, route_prefix="/")
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"sharpen serve: {replicas} Ray replica(s) of {config.model.model or 'the embedded model'}, "
                     f"listening on http://{shown}:{port}{' (key required)' if key else ''}\n")
    sys.stderr.flush()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()
    return 0
