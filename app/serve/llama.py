"""llama.cpp's POST /infill, as llama.vim and llama.vscode send it, and its POST /completion.

The body (llama.vim's autoload/llama.vim): input_prefix (the lines above the cursor),
prompt (the cursor's line up to the cursor), input_suffix (the rest), input_extra (chunks
of other files: [{filename, text}]), n_predict, stop, n_indent, top_k, top_p, samplers,
stream, cache_prompt, t_max_prompt_ms, t_max_predict_ms, id_slot, response_fields. The
answer: content, timings, truncated, tokens_cached, ...; with response_fields only those
paths, flattened ("timings/prompt_n": ...), as llama.cpp does.

A masked-diffusion model fills the whole span at once, so:
- n_predict is the span's slot budget (pad trims what is not used); -1 (llama.cpp's "no limit")
  is the server's own bound (--max-request-tokens); more than that bound is clamped to it, as
  llama-server clamps to its own (Continue sends 4096 by default), and the answer says
  `truncated: true`; 0 is a warm-up: the client is only priming a cache, and nothing runs.
  stop_type is "limit" when every slot held content, as when llama.cpp ran out of n_predict.
- t_max_predict_ms ends the run early: the answer is what was committed from the left by then,
  with stop_type "limit" (llama.cpp's own for a time limit). The server's --max-seconds, when it
  comes first, is a 504 (a stream ends with its last chunk, stop_type "limit").
- truncated is llama.cpp's: the context did not all fit (here: the canvas held only part of the
  text around the cursor), so a client can say its context is too long; or n_predict was clamped.
- n_indent ends the content at the first later line indented less (llama.cpp's rule).
- A stream sends the text committed from the left less what may yet be taken back: an end of it
  that begins a stop string (llama.cpp holds back a partial stop string the same way) and a last
  line n_indent may yet cut (only blanks so far, fewer than n_indent columns).
- regex, json_schema (llama.cpp's own field), ebnf / grammar (Lark, not llama.cpp's GBNF) and
  OpenAI's response_format steer every step (common.constraint_of; docs/constraints.md).
- input_extra goes before the prefix, as context a long enough canvas may reach.
- cache_prompt: a block-causal model's server keeps a prefix cache whatever the request says
  (core/prefix_cache.py; --prefix-cache-mb): a run starts from the longest run of whole prompt
  blocks an earlier run prefilled. tokens_cached and timings.cache_n are the prompt tokens this
  run took from it (llama.cpp's tokens_cached counts its slot's whole cache), timings.prompt_n
  the ones it computed; a masked model reuses nothing, and says 0.
- t_max_prompt_ms, samplers, id_slot are accepted and have no effect: sharpen's sampling order
  is its own.
"""
from __future__ import annotations

from .common import (HTTPError, constraint_of, cut_at_stop, field_of, point_request, prompt_of, sampling_of, sendable,
                     split_fim, stop_strings, token_budget)
from .respond import Plan, Shape, committed_text

MAX_EXTRA_CHUNKS = 64


class Infill(Shape):
    """POST /infill: llama.vim's and llama.vscode's body (see the module's notes)."""

    done_marker = False  # llama.cpp's /infill and /completion streams end with their stop: true chunk

    @classmethod
    def read(cls, server, body: dict) -> Plan:
        prefix = field_of(body, "input_prefix", str, "")
        suffix = field_of(body, "input_suffix", str, "")
        middle = field_of(body, "prompt", str, "")
        return cls.fill(server, body, _extra_context(body) + prefix + middle, suffix)

    @classmethod
    def fill(cls, server, body: dict, before: str, suffix: str) -> Plan:
        """An infill between `before` and `suffix`, answered as llama.cpp answers."""
        n_indent = field_of(body, "n_indent", int, 0)
        stops = stop_strings(body)
        fields = _response_fields(body)
        stream = field_of(body, "stream", bool, False)
        # llama.cpp: -1 is no limit; more than the server's bound is clamped to it, and the answer says so
        n_predict, clamped = token_budget(server, body, "n_predict", default=server.max_tokens, endless=-1)
        predict_ms = field_of(body, "t_max_predict_ms", (int, float), 0)
        sampling = sampling_of(server, body)
        constraint = constraint_of(body)
        slot = field_of(body, "id_slot", int, -1)
        shape = cls(server, before, suffix, n_indent, stops, fields, slot, n_predict, clamped)
        shape.budget = predict_ms / 1000 if predict_ms and predict_ms > 0 else None
        if n_predict == 0:  # a warm-up: llama.vim primes the server's cache this way; nothing to run
            return Plan(None, shape, stream)
        return Plan(point_request(server, before, suffix, n_predict, sampling, constraint), shape, stream)

    def __init__(self, server, before, suffix, n_indent, stops, fields, slot, n_predict, clamped) -> None:
        self.server, self.text, self.at = server, before + suffix, len(before)
        self.n_indent, self.stops, self.fields, self.slot = n_indent, stops, fields, slot
        self.n_predict, self.clamped = n_predict, clamped
        self.sent = ""  # what the stream has sent: the text committed from the left

    def _cut(self, content: str) -> tuple[str, str | None]:
        return cut_at_stop(cut_at_indent(content, self.n_indent), self.stops)

    def step(self, progress) -> list:
        # What is sure to begin the answer: a last line that may yet end it (n_indent) and the
        # end of the text that may yet become a stop string are held back until they settle.
        now = sendable(settled_at_indent(committed_text(progress, self.text, self.at), self.n_indent), self.stops)
        if now.startswith(self.sent) and len(now) > len(self.sent):
            chunk, self.sent = now[len(self.sent):], now
            return [{"content": chunk, "stop": False, "id_slot": self.slot}]
        return []

    def final(self, done) -> list:
        if done is None:  # a streamed warm-up
            return [self._answer("", 0, None, full=False, counts=(0, False, 0))]
        content, word = self._cut(done.result.spans[0].text)
        rest = content[len(self.sent):] if content.startswith(self.sent) else ""
        return [self._answer(rest, done.result.tokens, word, full=done.result.tokens >= self.n_predict,
                             counts=(done.result.prompt_tokens, done.result.context_cut, done.result.cached_tokens))]

    def cut(self, stopped, server) -> list:
        """The time ran out mid-stream (the request's budget or the server's): what was sent stands;
        the last chunk has the rest of what was committed (held back while it might have become a
        stop string: the answer without a stream, whole_cut, is the same text), the counts,
        stop_type "limit"."""
        if stopped.last is None:
            return [self._answer("", 0, None, full=True)]
        content, word = self._cut(committed_text(stopped.last, self.text, self.at))
        rest = content[len(self.sent):] if content.startswith(self.sent) else ""
        return [self._answer(rest, stopped.last.sharp, word, full=True)]

    def whole(self, done) -> dict:
        if done is None:
            return _project(self._answer("", 0, None, full=False, counts=(0, False, 0)), self.fields)
        content, word = self._cut(done.result.spans[0].text)
        result = done.result
        return _project(self._answer(content, result.tokens, word, full=result.tokens >= self.n_predict,
                                     counts=(result.prompt_tokens, result.context_cut, result.cached_tokens)), self.fields)

    def whole_cut(self, stopped) -> dict:
        """t_max_predict_ms ran out: what was committed from the left, stop_type "limit"."""
        if stopped.last is None:
            raise HTTPError(503, "the model was busy for the whole t_max_predict_ms", {"Retry-After": "1"})
        content, word = self._cut(committed_text(stopped.last, self.text, self.at))
        return _project(self._answer(content, stopped.last.sharp, word, full=True), self.fields)

    def _answer(self, content: str, predicted: int, word: str | None, full: bool, counts: tuple[int, bool, int] | None = None) -> dict:
        """`counts`: (prompt tokens, context cut, of them from the prefix cache), a result's; None: estimated."""
        prompt_n, cut, cached = counts if counts is not None else (*self.server.estimate_context(self.text, self.at, self.n_predict), 0)
        first = self.timing.first or 0.0
        # truncated: the context did not all fit, or n_predict asked more than this server's bound (then clamped to it)
        return _answer(content, self.server, prompt_n, predicted, first, self.timing.seconds() - first, cut or self.clamped, self.slot, word,
                       full=full, cached=cached)


class Completion(Infill):
    """llama.cpp's own POST /completion (Continue's llama.cpp provider, llama.cpp's web UI): a
    prompt continued, or split back into prefix and suffix when it is formatted for
    fill-in-the-middle (as /v1/completions splits one); the answer and stream are /infill's."""

    @classmethod
    def read(cls, server, body: dict) -> Plan:
        prompt = prompt_of(body)
        before, suffix = split_fim(prompt) or (prompt, "")
        return cls.fill(server, body, before, suffix)


def _extra_context(body: dict) -> str:
    chunks = field_of(body, "input_extra", list, [])
    if len(chunks) > MAX_EXTRA_CHUNKS:
        raise HTTPError(400, f"input_extra has too many chunks ({len(chunks)}; at most {MAX_EXTRA_CHUNKS})")
    out = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict):
            raise HTTPError(400, f"input_extra[{i}] must be an object with filename and text")
        text = field_of(chunk, "text", str, "", where=f"input_extra[{i}].")
        field_of(chunk, "filename", str, "", where=f"input_extra[{i}].")
        out.append(text if text.endswith("\n") or not text else text + "\n")
    return "".join(out)


def _response_fields(body: dict) -> list[str] | None:
    fields = field_of(body, "response_fields", list, None)
    if fields is None or not fields:
        return None
    if not all(isinstance(f, str) for f in fields):
        raise HTTPError(400, "response_fields must be a list of strings")
    return fields


def _project(answer: dict, fields: list[str] | None) -> dict:
    """llama.cpp's response_fields: only the paths asked for, each under its path ("timings/prompt_n")."""
    if fields is None:
        return answer
    out = {}
    for path in fields:
        value, found = answer, True
        for key in path.split("/"):
            if isinstance(value, dict) and key in value:
                value = value[key]
            else:
                found = False
                break
        if found and path:
            out[path] = value
    return out


def cut_at_indent(content: str, n_indent: int) -> str:
    """llama.cpp's n_indent: the content ends before the first later line indented less than
    n_indent columns (blank lines do not count)."""
    if n_indent <= 0:
        return content
    lines = content.split("\n")
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() and len(line) - len(line.lstrip(" \t")) < n_indent:
            return "\n".join(lines[:i]) + "\n"
    return content


def settled_at_indent(content: str, n_indent: int) -> str:
    """cut_at_indent of text still growing at its end (a stream's committed text): the part sure
    to begin the answer. A last line (not the first) holding only blanks, fewer than n_indent
    columns so far, may yet be a line indented less (the answer ends before it) or a blank line
    (kept): it waits. Its newline, kept either way, does not."""
    cut = cut_at_indent(content, n_indent)
    if n_indent <= 0 or cut != content:  # no rule, or the line that ends the answer is here: known
        return cut
    start = content.rfind("\n") + 1
    last = content[start:]
    if start > 0 and not last.strip() and len(last) < n_indent:
        return content[:start]
    return content


def _answer(content, server, prompt_n, predicted_n, prompt_s, predict_s, truncated, slot, word, full: bool = False, cached: int = 0) -> dict:
    """llama.cpp's answer. stop_type as llama.cpp's: "word" (a stop string), "limit" (`full`: every
    one of the n_predict slots held content, or t_max_predict_ms ran out), else "eos" (the model
    ended it). `truncated`: the context did not all fit. `cached`: of the prompt's `prompt_n`
    tokens, those taken from the prefix cache (llama.cpp's timings: prompt_n computed, cache_n reused)."""
    prompt_ms, predicted_ms = prompt_s * 1000, predict_s * 1000
    computed = prompt_n - cached
    return {
        "content": content,
        "id_slot": slot,
        "stop": True,
        "model": server.info.name,
        "tokens_predicted": predicted_n,
        "tokens_evaluated": prompt_n,
        "truncated": truncated,
        "stop_type": "word" if word else "limit" if full else "eos",
        "stopping_word": word or "",
        "tokens_cached": cached,  # prompt tokens this run took from the prefix cache (core/prefix_cache.py)
        "timings": {
            "cache_n": cached,
            "prompt_n": computed,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / computed if computed else 0.0,
            "prompt_per_second": computed / prompt_s if prompt_s > 0 else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": predicted_n / predict_s if predict_s > 0 else 0.0,
        },
    }
