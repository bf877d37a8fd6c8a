"""`sharpen serve`: load one model and answer editors over HTTP (see docs/server.md).

    sharpen serve [--model M] [--host 127.0.0.1] [--port 8012] [--api-key KEY | SHARPEN_API_KEY=KEY]

Loopback by default. Any other host needs a key: from SHARPEN_API_KEY (preferred: a command
line shows in `ps`) or --api-key. The socket is bound before the model loads, so a port in use
is one line and exit 3 at once; the model then loads once and serves every client.
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys

from ...core.errors import InputError, UsageError
from ...core.settings import Editing, ModelRequest, Sampling, SettingError
from .common import Limits

KEY_ENV = "SHARPEN_API_KEY"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8012  # llama.vim's default endpoint is http://127.0.0.1:8012/infill


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="warning", help="server log on stderr (default warning)")
    add_settings(parser, ModelRequest, "model (also [model] in the config file)")
    add_settings(parser, Sampling, "default sampling; a request overrides it per field")
    add_settings(parser, Editing, "default edit settings")
    return parser


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(argv: list[str]) -> int:
    from dataclasses import fields

    from ..config import by_section, load_config

    args = build_parser().parse_args(argv)
    key = os.environ.get(KEY_ENV) or args.api_key
    if not is_loopback(args.host) and not key:
        raise UsageError(f"--host {args.host} is reachable from other machines: set a key in ${KEY_ENV} (or --api-key)")
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be between 0 and 65535")
    for name in ("max_request_tokens", "max_body", "max_waiting", "max_batch"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.max_seconds > 0:
        raise UsageError("--max-seconds must be above 0")
    config = load_config(os.path.expanduser(args.config) if args.config else None)
    given = {f.name: getattr(args, f.name) for r in (ModelRequest, Sampling, Editing) for f in fields(r) if hasattr(args, f.name)}
    try:
        config = config.layered(by_section(given))
    except SettingError as exc:
        raise UsageError(f"--{exc.name.replace('_', '-')} {exc.rule}") from None
    limits = Limits(args.max_body, args.max_request_tokens, args.max_seconds, args.max_waiting, args.max_batch)
    sock = bind(args.host, args.port)  # before the model loads: a port in use fails at once
    logging.basicConfig(level=args.log_level.upper(), format="sharpen serve: %(levelname)s %(name)s: %(message)s")

    from ..backend import LocalBackend
    from .app import build_app
    from .common import Server

    backend = LocalBackend(config.model, quiet=False, max_waiting=limits.waiting, batch=limits.batch)
    info = backend.load()
    server = Server(backend, info, limits, config.sampling, config.editing, api_key=key)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"sharpen serve: {info.name} on {info.device}, listening on http://{shown}:{port}"
                     f"{' (key required)' if key else ''}\nsharpen serve: {sharing(backend.runner, limits.batch)}\n")
    sys.stderr.flush()
    return run_uvicorn(build_app(server), sock, args.log_level)


def sharing(runner, batch: int) -> str:
    """How concurrent requests share the model, for the startup line: a server's users should know
    whether their runs pack into one pass or queue (core.batch.batchable says which models pack)."""
    if runner.batcher is not None:
        return f"up to {batch} runs share each forward pass"
    if batch == 1:
        return "one run at a time (--max-batch 1)"
    if getattr(runner.denoiser, "compiled", False):  # CUDA graphs have their own shapes
        return f"one run at a time: a compiled step does not pack (--compile off lets up to {batch} runs share each pass)"
    return "one run at a time: this model's runs do not pack (core.batch.batchable)"


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

    config = uvicorn.Config(app, log_level=log_level, access_log=log_level in ("debug", "info"), timeout_graceful_shutdown=5,
                            lifespan="off")
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    return 0
