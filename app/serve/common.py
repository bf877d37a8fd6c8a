"""What every endpoint shares: the server's state, bounded JSON bodies, one-line JSON errors,
server-sent events, and the request for an infill at one point."""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from ...core.constraints import Constraint
from ...core.constraints.requests import request_constraint
from ...core.errors import SharpenError, UsageError
from ...core.request import EditRequest
from ...core.settings import Editing, Sampling, SettingError
from ...core.spans import Span
from .metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one request may ask; past these it is refused (4xx) before the model sees it."""

    body_bytes: int = 8 * 2**20  # a request body (413 beyond)
    tokens: int = 512  # slots one span may ask for (n_predict, max_tokens); the model's own room caps it further
    seconds: float = 120.0  # a run's wall time, waiting in line included (then it ends: 504, or what was committed)
    waiting: int = 16  # runs in line for the model before new ones get 503 + Retry-After
    # Runs sharing one forward pass per step (core/batch.py; the others wait in line). 8: the
    # most clients bench/serve.py measures; each costs a run's KV cache, nothing more.
    batch: int = 8


class HTTPError(Exception):
    """An answer other than 200: status and one plain sentence."""

    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass
class Server:
    """The state every handler reads (Starlette's app.state.server)."""

    backend: object  # app.backend.Backend, loaded
    info: object  # core.run.ModelInfo
    limits: Limits = field(default_factory=Limits)
    sampling: Sampling = field(default_factory=Sampling)  # the server's defaults; a request overrides per field
    editing: Editing = field(default_factory=Editing)
    api_key: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        from ..backend import served

        self.backend = served(self.backend)  # what the server asks beside runs, for any backend (a remote one too)

    @property
    def max_tokens(self) -> int:
        """Slots one span may get: the limit, and half the model's canvas (room left for context)."""
        return max(1, min(self.limits.tokens, self.info.max_len // 2))

    def chat_prompt(self, messages: list[dict], slots: int) -> str:
        """The conversation rendered by the model's own chat template (400 when it has none). One
        too long for the canvas beside `slots` loses its oldest turns (system messages and the
        last turn stay), as chat clients trim a history: cutting the rendered text instead would
        start the canvas inside a turn, its template's markers gone. Turns that cannot fit even by
        their characters go before anything is rendered (a 5 MB history is never rendered whole);
        what is kept and still cannot fit is a 400 naming the room."""
        backend = self.backend
        room = max(0, min(self.editing.context_tokens, self.info.max_len - slots))

        def fits(text: str) -> bool:  # the cheap bound first: a long history is never encoded whole
            return backend.count_tokens(text, at_most=room) <= room

        droppable = [i for i, m in enumerate(messages[:-1]) if m["role"] != "system"]  # oldest first

        def without(k: int) -> list[dict]:  # the history less its k oldest droppable turns
            gone = set(droppable[:k])
            return [m for i, m in enumerate(messages) if i not in gone]

        def contents_fit(k: int) -> bool:  # the turns' own text, without the template's: fewer tokens than the render
            return fits("".join(m["content"] for m in without(k)))

        # The fewest oldest turns to drop before their text alone fits (a binary search: a 5 MB
        # history is joined a few times, never rendered whole).
        least, high = 0, len(droppable)
        if not contents_fit(high):
            raise HTTPError(400, f"the conversation's system messages and last turn are longer than this model's canvas holds "
                                 f"({room} tokens beside {slots} slots): shorten them")
        while least < high:
            middle = (least + high) // 2
            least, high = (least, middle) if contents_fit(middle) else (middle + 1, high)
        kept = without(least)
        try:
            if fits(prompt := backend.chat_text(kept)) or least == len(droppable):
                return prompt
            low, high = least + 1, len(droppable)  # the fewest turns to drop: a binary search, a render or two per halving
            while low < high:
                middle = (low + high) // 2
                low, high = (low, middle) if fits(backend.chat_text(without(middle))) else (middle + 1, high)
            return backend.chat_text(without(low))  # if even that is too long, the canvas keeps its end
        except SharpenError as exc:
            raise HTTPError(400 if isinstance(exc, UsageError) else 500, str(exc)) from None

    def estimate_context(self, text: str, at: int, slots: int) -> tuple[int, bool]:
        """About the tokens of `text` around offset `at` that the canvas can hold beside `slots`, and
        whether that text is more than it holds: for an answer with no result to count them (cut
        by its time budget, or nothing ran); a finished run's result knows (EditResult.prompt_tokens,
        .context_cut)."""
        window = self.editing.context_tokens * 8  # characters: enough for the budget, never the whole file
        around = text[max(0, at - window):at] + text[at:at + window]
        room = max(0, self.info.max_len - slots)  # the slots take their share of the canvas first
        fits = min(self.editing.context_tokens, room)
        tokens = self.backend.count_tokens(around)
        beyond = at > window or at + window < len(text)
        return min(tokens, fits), beyond or tokens > fits


def server_of(request: Request) -> Server:
    return request.app.state.server


def error_body(status: int, message: str) -> dict:
    # OpenAI's and llama.cpp's error shape: clients of both read error.message.
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 401:
        kind = "authentication_error"
    elif status == 503:
        kind = "unavailable_error"
    return {"error": {"message": message, "type": kind, "code": status}}


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def status_of(exc: SharpenError) -> int:
    """An engine error as an HTTP status: bad requests 400, a busy model 503, the rest 500."""
    from ...core.run import Busy

    if isinstance(exc, Busy):
        return 503
    if isinstance(exc, UsageError):
        return 400
    return 500


class ClientGone(Exception):
    """The client closed its connection while sending its body: nobody to answer (app.py logs
    one line at most, never a traceback: a client leaving is not a server failure)."""


async def read_body(request: Request) -> bytes:
    """The body's bytes, at most Limits.body_bytes (413); a client gone mid-body is ClientGone."""
    limit = server_of(request).limits.body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"the body is too large ({int(declared)} bytes; at most {limit})")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, f"the body is too large (more than {limit} bytes)")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


async def read_json(request: Request) -> dict:
    """The body as a JSON object (read_body's bounds), well-formed (400). A lone
    surrogate a client escaped (`"\\ud800"`) becomes U+FFFD, as a decoder reading bytes would
    make it: nothing downstream (the tokenizer, the answer's UTF-8) can carry one."""
    raw = await read_body(request)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise HTTPError(400, "the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise HTTPError(400, f"the body is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # the json module recurses per nesting level: a few KB of '[' reach Python's limit
        raise HTTPError(400, "the body is not JSON this server reads (nested too deeply)") from None
    except ValueError as exc:  # Python's int-conversion limit: a number of more than 4,300 digits
        raise HTTPError(400, f"the body is not JSON this server reads ({str(exc).split(';')[0]})") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "the body must be a JSON object")
    if _ESCAPED_SURROGATE.search(raw):
        data = _without_surrogates(data)
    return data


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # raw bytes never hold one (not UTF-8); an escape may
_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value):
    """`value` with every lone surrogate in its strings (keys too) made U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def sse(data) -> bytes:
    """One server-sent event: `data: <json>` (or a literal such as [DONE]) and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode("utf-8")


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# -- fields of the OpenAI-style and llama.cpp bodies -----------------------------------------


def field_of(body: dict, name: str, kind, default=None, where: str = ""):
    """body[name] if it has the type, else 400 naming the field; `default` when absent or null."""
    value = body.get(name)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        names = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", list: "a list", dict: "an object"}
        raise HTTPError(400, f"{where}{name} must be {' or '.join(names[k] for k in kinds)}")
    return value


CLIENT_DEFAULTS = ("temperature", "top_k", "top_p")  # what editors send unasked; sharpen's own `steps` is refused where unread


def sampling_of(server: Server, body: dict) -> Sampling:
    """The sampling settings a body asks for (OpenAI / llama.cpp names) over the server's defaults."""
    values = {
        "temperature": field_of(body, "temperature", float),
        "top_k": field_of(body, "top_k", int),
        "top_p": field_of(body, "top_p", float),
        "seed": field_of(body, "seed", int),
        "steps": field_of(body, "steps", int),  # sharpen's own: denoising steps
    }
    if values["top_k"] == 0:  # llama.cpp: 0 means off
        values["top_k"] = None
    if values["top_p"] is not None and values["top_p"] >= 1.0:
        values["top_p"] = None  # 1.0 is "all the mass": off
    if values["seed"] is not None and values["seed"] < 0:  # llama.cpp: -1 means random; ours: the default
        values["seed"] = None
    # Editors send sampling fields by default (llama.vim: top_k 40, top_p 0.9) that some loops do
    # not read (Fast-dLLM v2 and DiffusionGemma commit by threshold or entropy): where the model's
    # loop does not read one, the client's default is dropped, not refused, or those clients could
    # not use such a model; the headless CLI, where a person typed the option, refuses it instead.
    reads = server.backend.reads(server.sampling)
    for name in CLIENT_DEFAULTS:
        if values[name] is not None and reads is not None and name not in reads:
            log.debug("%s=%s dropped: this model's loop does not read it", name, values[name])
            values[name] = None
    try:
        return server.sampling.updated(values)
    except SettingError as exc:
        raise HTTPError(400, f"{exc.name} {exc.rule}") from None


def token_budget(server: Server, body: dict, *names: str, default: int, endless: int | None = None) -> tuple[int, bool]:
    """(slots, clamped): the slots asked for under the first of `names` present, clamped to the
    server's bound (clamped: it asked for more, which the answer says, as llama-server clamps to
    its own); `default` when none is. `endless`: the value that asks for no limit (llama.cpp's
    -1): the server's bound. Refused only what no bound can mean: a negative or non-whole number."""
    for name in names:
        value = field_of(body, name, int)
        if value is None:
            continue
        if value == endless:
            return server.max_tokens, False
        if value < 0:
            raise HTTPError(400, f"{name} must be at least 0{' (or -1: no limit)' if endless == -1 else ''}")
        return min(value, server.max_tokens), value > server.max_tokens
    return min(default, server.max_tokens), False


def point_request(server: Server, prefix: str, suffix: str, tokens: int, sampling: Sampling,
                  constraint: Constraint | None = None) -> EditRequest:
    """An infill of up to `tokens` slots between `prefix` and `suffix`; `constraint`: what its
    text must be (steered at every step; a model whose loop cannot steer refuses it: a 400)."""
    text = prefix + suffix
    try:
        span = Span(len(prefix), len(prefix), max_tokens=max(1, tokens), constraint=constraint)
        return EditRequest(text, (span,), sampling, server.editing)
    except SharpenError as exc:
        raise HTTPError(400, str(exc)) from None


def constraint_of(body: dict) -> Constraint | None:
    """The constraint a completion body asks (OpenAI's response_format json_object / json_schema,
    vLLM's and SGLang's regex, json_schema, ebnf / grammar; core/constraints/requests.py), None
    when none; a malformed one, or two at once, is a 400. A pattern that does not compile is the
    run's refusal before its first step (a 400 too, before a stream begins)."""
    try:
        return request_constraint(body)
    except UsageError as exc:
        raise HTTPError(400, str(exc).splitlines()[0]) from None


def prompt_of(body: dict) -> str:
    """The body's `prompt`: a string, or a list of one (OpenAI allows a list; an editor sends one)."""
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise HTTPError(400, "prompt must be a string (one prompt per request)")
    return prompt


def stop_strings(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s][:16]
    raise HTTPError(400, "stop must be a string or a list of strings")


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """`text` up to the first stop string, and which one stopped it (None: none did)."""
    best, word = len(text), None
    for s in stops:
        i = text.find(s)
        if i != -1 and i < best:
            best, word = i, s
    return text[:best], word


def stop_prefix_at_end(text: str, stops: list[str]) -> int:
    """The length of the longest end of `text` that is the beginning of a stop string (not all of
    one): text that may yet become a stop string when the next token settles (llama.cpp's
    find_partial_stop_string)."""
    longest = 0
    for stop in stops:
        i = text.find(stop[0], max(0, len(text) - len(stop) + 1))
        while i != -1 and len(text) - i > longest:
            if stop.startswith(text[i:]):
                longest = len(text) - i
                break
            i = text.find(stop[0], i + 1)
    return longest


def sendable(text: str, stops: list[str]) -> str:
    """What a stream may send of `text` that is still growing at its end (the text committed from
    the left): up to the first stop string, and never the end of it that may yet become one (a
    stop string settling over several steps, " #", " DO", "NE", never reaches the client in part;
    its held part goes out once a later token shows it is no stop string). Always the beginning
    of the answer the finished text gives (cut_at_stop), whatever settles after it."""
    cut, _ = cut_at_stop(text, stops)
    # An earlier stop string running past the end comes first: ["abcd", "c"] on "xabc" sends "x".
    return text[:min(len(cut), len(text) - stop_prefix_at_end(text, stops))]


# Fill-in-the-middle prompt formats a client may send already formatted: (pattern, prefix group, suffix group).
_FIM_FORMATS = (
    re.compile(r"^(?P<pre>.*?)<\|fim_prefix\|>(?P<p>.*)<\|fim_suffix\|>(?P<s>.*)<\|fim_middle\|>$", re.S),  # Qwen2.5-Coder, Zed
    re.compile(r"^(?P<pre>.*?)<fim_prefix>(?P<p>.*)<fim_suffix>(?P<s>.*)<fim_middle>$", re.S),  # StarCoder
    re.compile(r"^(?P<pre>.*?)<PRE> (?P<p>.*) <SUF>(?P<s>.*) <MID>$", re.S),  # CodeLlama
    re.compile(r"^(?P<pre>.*?)\[SUFFIX\](?P<s>.*)\[PREFIX\](?P<p>.*)$", re.S),  # Codestral (suffix first)
    # DeepSeek-Coder's markers are written with U+FF5C (fullwidth bar) and U+2581 (lower block), as Zed sends them
    re.compile("^(?P<pre>.*?)<\uff5cfim\u2581begin\uff5c>(?P<p>.*)<\uff5cfim\u2581hole\uff5c>(?P<s>.*)<\uff5cfim\u2581end\uff5c>$", re.S),
    re.compile(r"^(?P<pre>.*?)<\|code_prefix\|>(?P<p>.*)<\|code_suffix\|>(?P<s>.*)<\|code_middle\|>$", re.S),  # GLM (Zed's glm)
)
_CONTEXT_MARKERS = re.compile(r"<\|(?:repo_name|file_sep|fim_pad|endoftext)\|>")


def split_fim(prompt: str) -> tuple[str, str] | None:
    """(prefix, suffix) of a pre-formatted FIM prompt, or None when it is not one."""
    for pattern in _FIM_FORMATS:
        match = pattern.match(prompt)
        if match:
            context = _CONTEXT_MARKERS.sub("", match.group("pre"))  # repository context before the file: kept as text
            return context + match.group("p"), match.group("s")
    return None


def keep_prefixes(backend, megabytes: int) -> str:
    """A local block-causal model gets a prefix cache (core/prefix_cache.py); the startup line's note."""
    runner = getattr(backend, "runner", None)
    if runner is None or megabytes <= 0 or runner.denoiser.spec.loop != "block-causal":
        return ""
    from ...core import prefix_cache

    prefix_cache.attach(runner.denoiser, megabytes << 20)
    return f"; prompt prefixes reused across requests (up to {megabytes} MiB)"
