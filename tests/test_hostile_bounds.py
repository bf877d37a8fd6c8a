"""Round three (issue 29 F9, F12, F15): work that hostile input cannot make unbounded.

Chat templates are the checkpoint's code: bounded in time and output, their failures one line.
A selection too large for the canvas is refused before it is tokenized, on every path that
counts it (plain canvas, chat/FIM prompts, candidates, adaptive length). The banned-token set
is built in one pass; disk offload leaves nothing behind. Promises: docs/safety.md, "Bounded work".
"""
from __future__ import annotations

import pytest

from sharpen.core.errors import ModelError


def test_banned_ids_read_the_added_tokens_once(tiny_model_dir, monkeypatch):
    """F9: the special-token set was rebuilt for every id of the vocabulary (O(vocab x added))."""
    from tokenizers import Tokenizer as HF

    from sharpen.core.models.denoiser import banned_token_ids
    from sharpen.core.models.loading import load_denoiser

    denoiser = load_denoiser(tiny_model_dir)
    calls = []
    real = HF.get_added_tokens_decoder
    hf = denoiser.tokenizer.hf

    class Counting:
        def __getattr__(self, name):
            if name == "get_added_tokens_decoder":
                calls.append(1)
                return lambda: real(hf)
            return getattr(hf, name)

    monkeypatch.setattr(denoiser.tokenizer, "hf", Counting())
    banned = banned_token_ids(denoiser.tokenizer, denoiser.spec, denoiser.model.cfg.vocab_size).tolist()
    assert len(calls) <= 2 and denoiser.spec.mask_id in banned
    assert denoiser.spec.eos_id not in banned


def test_disk_offload_leaves_nothing_behind(tiny_model_dir, tmp_path, monkeypatch, caplog):
    """F12: the offloaded weights' directory goes with the model (and at exit), not left in $TMPDIR;
    and accelerate's note about meta-device parameters is not a stray stderr line."""
    import gc
    import logging
    import tempfile

    from sharpen.core.models.loading import load_denoiser

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        denoiser = load_denoiser(tiny_model_dir, device_map={"embed": "cpu", "layers.0": "disk", "layers.1": "disk", "norm": "cpu", "output": "cpu"})
    assert not [r for r in caplog.records if r.name.startswith("accelerate")]
    assert list(tmp_path.glob("sharpen-offload-*"))
    del denoiser
    gc.collect()
    assert not list(tmp_path.glob("sharpen-offload-*"))


# -- F9/F15: chat templates are the checkpoint's code: bounded, and their failures are one line ----------

TEMPLATES = [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "recurses without end"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than 2 s"),
    ("{% set x = range(100000)|list %}{% for a in x %}{% for b in x %}{% endfor %}{% endfor %}", "more than 2 s"),
    ("{% for i in range(100000) %}{{ 'x' * 3000 }}{% endfor %}", "characters of output"),
    ("{{ 'x' * 300000000 }}", "a value of 300,000,000 items"),
    ("{{ 9 ** 99999999 }}", "a power of 99999999"),
]


@pytest.mark.parametrize("template, message", TEMPLATES, ids=[m for _, m in TEMPLATES])
def test_chat_templates_are_bounded_in_time_and_output(template, message):
    import time

    from sharpen.core.instruct import render_chat

    started = time.monotonic()
    with pytest.raises(ModelError, match="chat template") as error:
        render_chat(template, [{"role": "user", "content": "hi"}])
    assert message in str(error.value) and time.monotonic() - started < 10


def test_a_real_template_still_renders():
    from gemma_checkpoint import CHAT_TEMPLATE

    from sharpen.core.instruct import render_chat

    out = render_chat("{%- set bos_token = '<bos>' %}" + CHAT_TEMPLATE, [{"role": "user", "content": "hi"}])
    assert out == "<bos><|turn>user\nhi<turn|>\n<|turn>model\n"


# -- F9: a huge one-line selection is refused before it is tokenized ----------------------------------


def test_a_selection_too_big_for_the_canvas_is_refused_before_encoding(tiny_model_dir, monkeypatch):
    from sharpen.core import canvas
    from sharpen.core.errors import SpanError
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.spans import Span

    denoiser = load_denoiser(tiny_model_dir)
    text = "x = " + "a+" * 2_500_000 + "1\n"  # 5 MB on one line
    encoded = []
    monkeypatch.setattr(denoiser.tokenizer, "encode", lambda t: encoded.append(len(t)) or [])
    for mode in ("infill", "rewrite"):
        with pytest.raises(SpanError, match="at least .* tokens, but the model's canvas holds 512"):
            canvas.build_canvas(text, [Span(0, len(text) - 1, mode)], denoiser.tokenizer, denoiser.spec.mask_id, 256, 512)
    assert not [n for n in encoded if n > 100_000]  # never the whole selection


def test_prompted_canvases_and_context_clipping_never_encode_a_huge_line(tiny_model_dir, monkeypatch):
    """The chat/FIM prompts of instruct and block-causal runs: a 5 MB line as the selection is
    refused unencoded, and as context it is dropped unencoded."""
    from sharpen.core.errors import SpanError
    from sharpen.core.instruct import clip_lines
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.prompted import prompt_canvas
    from sharpen.core.spans import Span

    tokenizer = load_denoiser(tiny_model_dir).tokenizer
    line = "x = " + "a+" * 2_500_000 + "1\n"
    real, encoded = tokenizer.encode, []
    monkeypatch.setattr(tokenizer, "encode", lambda t: encoded.append(len(t)) or real(t))
    assert clip_lines("short = 1\n" + line, 256, tokenizer, keep_end=False) == "short = 1\n"
    with pytest.raises(SpanError, match="at least .* tokens"):
        prompt_canvas(line, Span(0, len(line) - 1, "rewrite"), tokenizer, None, "fim", 256, 512)
    assert max(encoded) < 100


def test_candidate_and_adaptive_runs_count_a_huge_selection_unencoded(tiny_model_dir, monkeypatch):
    """--candidates and --length adaptive count each selection's tokens first (core/candidates.py)."""
    from sharpen.core.candidates import selected_tokens
    from sharpen.core.errors import SpanError
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.spans import Span

    tokenizer = load_denoiser(tiny_model_dir).tokenizer
    text = "x = " + "a+" * 2_500_000 + "1\n"
    real, encoded = tokenizer.encode, []
    monkeypatch.setattr(tokenizer, "encode", lambda t: encoded.append(len(t)) or real(t))
    with pytest.raises(SpanError, match="at least .* tokens, but the model's canvas holds 512"):
        selected_tokens(text, [Span(0, 8, "infill"), Span(10, len(text) - 1, "infill")], tokenizer, 512)
    assert encoded == [8]
