"""`sharpen serve`: load one model and answer editors over HTTP (see docs/server.md).

    sharpen serve [--model M | --backend URL] [--host 127.0.0.1] [--port 8012] [--api-key KEY | SHARPEN_API_KEY=KEY]
    sharpen serve --ray --replicas N --gpus-per-replica G [--model M]      # Ray Serve replicas (app/serve/ray_replicas.py)

Loopback by default. Any other host needs a key: from SHARPEN_API_KEY (preferred: a command
line shows in `ps`) or --api-key. The socket is bound before the model loads, so a port in use
is one line and exit 3 at once; the model then loads once and serves every client. With
--backend the model is another server's (any app/backend.py Backend serves): this one answers
every endpoint in its clients' shapes and runs each request there.

The log goes through a bounded queue to stderr on a thread of its own: a stderr nobody reads
(a pipe left full) loses log lines, never blocks the server.
"""
from __future__ import annotations

import argparse
import atexit
import ipaddress
import logging
import logging.handlers
import os
import queue
import socket
import sys
import time

from ...core.errors import InputError, UsageError
from ...core.settings import Editing, ModelRequest, Sampling
from .common import Limits, keep_prefixes

KEY_ENV = "SHARPEN_API_KEY"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8012  # llama.vim's default endpoint is http://127.0.0.1:8012/infill


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    from ..config import Remote
    from ..flags import add_settings

    parser = _Parser(prog="sharpen serve", description="Serve one loaded model to every editor: llama.cpp /infill, "
                     "OpenAI and Mercury completions and chat (with diffusing drafts), sharpen's /v1/edits.")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}; any other needs a key)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--api-key", metavar="KEY", help=f"key clients must send (Authorization: Bearer KEY); prefer ${KEY_ENV}, which ps does not show")
    parser.add_argument("--config", metavar="PATH", help="config file whose [model], [sampling] and [edit] tables are the server's defaults")
    limits = parser.add_argument_group("limits (per request)")
    limits.add_argument("--max-request-tokens", type=int, default=Limits.tokens, metavar="N", help=f"slots one span may ask for (default {Limits.tokens})")
    limits.add_argument("--max-body", type=int, default=Limits.body_bytes, metavar="BYTES", help=f"request body size (default {Limits.body_bytes})")
    limits.add_argument("--max-seconds", type=float, default=Limits.seconds, metavar="S", help=f"a run's wall time, waiting included (default {Limits.seconds:g})")
    limits.add_argument("--max-waiting", type=int, default=Limits.waiting, metavar="N", help=f"runs in line before 503 (default {Limits.waiting})")
    limits.add_argument("--max-batch", type=int, default=Limits.batch, metavar="N",
                        help=f"runs sharing one forward pass per step; 1: one at a time (default {Limits.batch})")
    parser.add_argument("--prefix-cache-mb", type=int, default=1024, metavar="MB",
                        help="block-causal models: prompt prefixes kept for later requests, least recently used out (0: none; default 1024)")
    ray = parser.add_argument_group("Ray Serve replicas (pip install 'sharpen[ray]'; docs/server.md)")
    ray.add_argument("--ray", action="store_true", help="serve N replicas of this server on a Ray cluster (RAY_ADDRESS, else a local one) behind --host:--port")
    ray.add_argument("--replicas", type=int, default=2, metavar="N", help="replicas, each one model and its runs (default 2)")
    ray.add_argument("--gpus-per-replica", type=float, default=0.0, metavar="G", help="GPUs each replica holds (default 0: CPU)")
    ray.add_argument("--cpus-per-replica", type=float, default=1.0, metavar="C", help="CPU cores Ray reserves per replica (default 1)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="warning", help="server log on stderr (default warning)")
    add_settings(parser, ModelRequest, "model (also [model] in the config file)")
    add_settings(parser, Sampling, "default sampling; a request overrides it per field")
    add_settings(parser, Editing, "default edit settings")
    add_settings(parser, Remote, "backend: serve another server's model (the key to it only from $SHARPEN_API_KEY or backend_key_env)")
    return parser


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(argv: list[str]) -> int:
    from ..flags import config_from

    args = build_parser().parse_args(argv)
    key = os.environ.get(KEY_ENV) or args.api_key
    if not is_loopback(args.host) and not key:
        raise UsageError(f"--host {args.host} is reachable from other machines: set a key in ${KEY_ENV} (or --api-key)")
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be between 0 and 65535")
    if args.prefix_cache_mb < 0:
        raise UsageError("--prefix-cache-mb must be 0 or more")
    for name in ("max_request_tokens", "max_body", "max_waiting", "max_batch"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.max_seconds > 0:
        raise UsageError("--max-seconds must be above 0")
    config = config_from(args)  # the one argparse-to-settings step of every command line
    limits = Limits(args.max_body, args.max_request_tokens, args.max_seconds, args.max_waiting, args.max_batch)
    if args.ray:
        if config.remote.backend:
            raise UsageError("--ray serves a local model on each replica; --backend serves another server's")
        from .ray_replicas import serve_on_ray

        log_to_stderr(args.log_level)
        return serve_on_ray(config, limits, key, args.host, args.port, args.replicas, args.gpus_per_replica, args.cpus_per_replica,
                            args.prefix_cache_mb)
    sock = bind(args.host, args.port)  # before the model loads: a port in use fails at once
    log_to_stderr(args.log_level)

    from ..backend import LocalBackend
    from .app import build_app
    from .common import Server

    if config.remote.backend:
        from ..remote import RemoteBackend

        backend = RemoteBackend.from_config(config.remote)
    else:
        backend = LocalBackend(config.model, quiet=False, max_waiting=limits.waiting, batch=limits.batch)
    info = backend.load()
    cached = keep_prefixes(backend, args.prefix_cache_mb)
    server = Server(backend, info, limits, config.sampling, config.editing, api_key=key)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"sharpen serve: {info.name} on {info.device}, listening on http://{shown}:{port}"
                     f"{' (key required)' if key else ''}\nsharpen serve: {server.backend.load_report()}{cached}\n")
    sys.stderr.flush()
    return run_uvicorn(build_app(server), sock, args.log_level)


LOG_QUEUE = 10_000  # log records waiting for stderr; beyond, new ones are dropped (and the drop is logged)


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the stderr thread; a full queue (stderr not read) drops, never waits, and
    the next record that finds room is preceded by a line saying how many went."""

    def __init__(self, records: queue.Queue) -> None:
        super().__init__(records)
        self.dropped = 0

    def enqueue(self, record) -> None:
        try:
            if self.dropped:
                self.queue.put_nowait(logging.makeLogRecord({"name": __name__, "levelno": logging.WARNING, "levelname": "WARNING",
                                                             "msg": f"{self.dropped} log lines dropped: stderr was not read"}))
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def log_to_stderr(level: str) -> logging.handlers.QueueListener:
    """The server's log (its own, Starlette's, uvicorn's, warnings): records go through a bounded
    queue to a thread that writes stderr, so a stderr nobody reads blocks that thread alone."""
    records: queue.Queue = queue.Queue(LOG_QUEUE)
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("sharpen serve: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(_DroppingQueueHandler(records))
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # a library's warning too: written straight to stderr, it would block like any write
    listener = logging.handlers.QueueListener(records, stream)
    listener.start()  # its thread is a daemon: an exit never waits on a stderr nobody reads

    def drain(seconds: float = 2.0) -> None:  # at exit, what is queued gets a moment to reach stderr
        deadline = time.monotonic() + seconds
        while not records.empty() and time.monotonic() < deadline:
            time.sleep(0.02)

    atexit.register(drain)
    return listener


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run_uvicorn(app, sock: socket.socket, log_level: str) -> int:
    import uvicorn

    from .framing import JSONFramingProtocol

    # log_config None: uvicorn's loggers keep no handlers of their own and reach stderr through
    # the queue (log_to_stderr); http: h11 with broken framing answered in the JSON error shape.
    config = uvicorn.Config(app, log_level=log_level, access_log=log_level in ("debug", "info"), timeout_graceful_shutdown=5,
                            lifespan="off", log_config=None, http=JSONFramingProtocol)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    return 0
