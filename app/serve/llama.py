"""llama.cpp's POST /infill, as llama.vim and llama.vscode send it, and its POST /completion.

The body (llama.vim's autoload/llama.vim): input_prefix (the lines above the cursor),
prompt (the cursor's line up to the cursor), input_suffix (the rest), input_extra (chunks
of other files: [{filename, text}]), n_predict, stop, n_indent, top_k, top_p, samplers,
stream, cache_prompt, t_max_prompt_ms, t_max_predict_ms, id_slot, response_fields. The
answer: content, timings, truncated, tokens_cached, ...; with response_fields only those
paths, flattened ("timings/prompt_n": ...), as llama.cpp does.

A masked-diffusion model fills the whole span at once, so:
- n_predict is the span's slot budget (pad trims what is not used); -1 (llama.cpp's "no limit")
  is the server's own bound (--max-tokens); 0 is a warm-up: the client is only priming a cache,
  and nothing runs. stop_type is "limit" when every slot held content, as when llama.cpp ran
  out of n_predict.
- t_max_predict_ms ends the run early: the answer is what was committed from the left by then,
  with stop_type "limit" (llama.cpp's own for a time limit).
- truncated is llama.cpp's: the context did not all fit (here: the canvas held only part of the
  text around the cursor), so a client can say its context is too long.
- n_indent ends the content at the first later line indented less (llama.cpp's rule).
- input_extra goes before the prefix, as context a long enough canvas may reach.
- cache_prompt, t_max_prompt_ms, samplers, id_slot are accepted and have no effect:
  sharpen keeps no prompt cache between requests (tokens_cached is 0) and its sampling
  order is its own.
"""
from __future__ import annotations

import time
from contextlib import aclosing

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .common import (SSE_HEADERS, HTTPError, cut_at_stop, error_body, field_of, point_request, prompt_of, read_json, sampling_of, server_of, split_fim,
                     sse, stop_strings, token_budget)
from .bridge import Failed
from .runs import committed_text, open_stream, run_to_end

MAX_EXTRA_CHUNKS = 64


async def infill(request: Request):
    server = server_of(request)
    body = await read_json(request)
    prefix = field_of(body, "input_prefix", str, "")
    suffix = field_of(body, "input_suffix", str, "")
    middle = field_of(body, "prompt", str, "")
    extra = _extra_context(body)
    return await _fill(request, server, body, extra + prefix + middle, suffix)


async def completion(request: Request):
    """llama.cpp's own POST /completion (Continue's llama.cpp provider, llama.cpp's web UI): a
    prompt continued, or split back into prefix and suffix when it is formatted for
    fill-in-the-middle (as /v1/completions splits one); the answer and stream are /infill's."""
    server = server_of(request)
    body = await read_json(request)
    prompt = prompt_of(body)
    before, suffix = split_fim(prompt) or (prompt, "")
    return await _fill(request, server, body, before, suffix)


async def _fill(request: Request, server, body: dict, before: str, suffix: str):
    """An infill between `before` and `suffix`, answered as llama.cpp answers (see the module's notes)."""
    n_indent = field_of(body, "n_indent", int, 0)
    stops = stop_strings(body)
    fields = _response_fields(body)
    stream = field_of(body, "stream", bool, False)
    n_predict = token_budget(server, body, "n_predict", default=server.max_tokens, endless=-1)  # llama.cpp: -1 is no limit
    predict_ms = field_of(body, "t_max_predict_ms", (int, float), 0)
    sampling = sampling_of(server, body)
    slot = field_of(body, "id_slot", int, -1)
    if n_predict == 0:  # a warm-up: llama.vim primes the server's cache this way; nothing to run
        return JSONResponse(_project(_answer("", server, 0, 0, 0.0, 0.0, False, slot, None), fields))
    edit = point_request(server, before, suffix, n_predict, sampling)
    budget = predict_ms / 1000 if predict_ms and predict_ms > 0 else None
    if stream:
        started = time.perf_counter()
        events = await open_stream(request, server, edit, seconds=budget)
        return StreamingResponse(_stream(server, events, edit, len(before), n_indent, stops, slot, started), media_type="text/event-stream", headers=SSE_HEADERS)
    outcome = await run_to_end(request, server, edit, seconds=budget, every=0.0 if budget else 3600.0)
    timed_out = False
    if outcome.done is not None:
        content = outcome.done.result.spans[0].text
        predicted = outcome.done.result.tokens
    elif outcome.stopped.reason == "deadline" and outcome.stopped.last is not None:
        content, timed_out = committed_text(outcome.stopped.last, edit.text, len(before)), True
        predicted = outcome.stopped.last.sharp
    elif outcome.stopped.reason == "deadline":
        raise HTTPError(503, "the model was busy for the whole t_max_predict_ms", {"Retry-After": "1"})
    else:
        raise HTTPError(499, "the client closed the request")
    content, word = cut_at_stop(cut_at_indent(content, n_indent), stops)
    first = outcome.first_frame or 0.0
    result = outcome.done.result if outcome.done is not None else None
    prompt_n, cut = (result.prompt_tokens, result.context_cut) if result is not None else server.estimate_context(edit)
    answer = _answer(content, server, prompt_n, predicted, first, outcome.seconds - first, cut, slot, word,
                     full=timed_out or predicted >= n_predict)
    return JSONResponse(_project(answer, fields))


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


def _answer(content, server, prompt_n, predicted_n, prompt_s, predict_s, truncated, slot, word, full: bool = False) -> dict:
    """llama.cpp's answer. stop_type as llama.cpp's: "word" (a stop string), "limit" (`full`: every
    one of the n_predict slots held content, or t_max_predict_ms ran out), else "eos" (the model
    ended it). `truncated`: the context did not all fit."""
    prompt_ms, predicted_ms = prompt_s * 1000, predict_s * 1000
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
        "tokens_cached": 0,  # no prompt cache is kept between requests
        "timings": {
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n / prompt_s if prompt_s > 0 else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": predicted_n / predict_s if predict_s > 0 else 0.0,
        },
    }


async def _stream(server, events, edit, at: int, n_indent: int, stops: list[str], slot: int, started: float):
    """stream: true: llama.cpp's chunks ({content, stop: false}) carry the text committed from
    the left as it settles; the last ({stop: true}) the rest and the timings."""
    from ...core.run import Done, Progress

    sent = ""
    first = None  # seconds from `started` (the request's) to the first frame: the canvas built and read, llama.cpp's prompt time
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Progress):
                first = time.perf_counter() - started if first is None else first
                now = cut_at_stop(cut_at_indent(committed_text(event, edit.text, at), n_indent), stops)[0]
                if now.startswith(sent) and len(now) > len(sent):
                    yield sse({"content": now[len(sent):], "stop": False, "id_slot": slot})
                    sent = now
            elif isinstance(event, Done):
                final, word = cut_at_stop(cut_at_indent(event.result.spans[0].text, n_indent), stops)
                rest = final[len(sent):] if final.startswith(sent) else ""
                seconds, prompt_s = time.perf_counter() - started, first or 0.0
                result = event.result
                yield sse(_answer(rest, server, result.prompt_tokens, result.tokens, prompt_s, seconds - prompt_s, result.context_cut, slot, word,
                                  full=result.tokens >= edit.spans[0].max_tokens))
                return
            elif isinstance(event, Failed):  # the run failed after the stream began
                yield sse(error_body(event.status, event.message))
                return
            else:  # Stopped: the time ran out; what was sent stands
                prompt_s = first or 0.0
                sharp = event.last.sharp if event.last is not None else 0
                prompt_n, cut = server.estimate_context(edit)
                yield sse(_answer("", server, prompt_n, sharp, prompt_s, time.perf_counter() - started - prompt_s, cut, slot, None, full=True))
                return
