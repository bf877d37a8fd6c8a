"""Syntax-aware infilling: node selections, byte/char offsets, candidate ranking, adaptive length, SPEC forms."""
import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sharpen.app.syntax_specs import colour_diff
from sharpen.core.candidates import (Candidate, CandidatePlan, candidate_rows, content_tokens, plan_canvas_spans, rank,
                                     selected_tokens, trim_filler)
from sharpen.core.canvas import build_canvas
from sharpen.core.engine import apply_edit
from sharpen.core.length import AdaptiveLength, filled_up, next_budgets, start_budget
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span
from sharpen.core.languages import PLAIN, detect_language
from sharpen.core.syntax import Offsets, body_range, enclosing, error_count, expand, parse_document, shrink

ROOT = Path(__file__).resolve().parents[1]

PY = '''import os


def add(a, b):
    """Add two numbers: café."""
    total = a + b
    return total


class Point:
    def norm(self):
        return 0
'''


def sel(text, r):
    return text[r[0]:r[1]]


# ---- selections -------------------------------------------------------------------------------

def test_python_expand_walks_out_and_shrink_walks_back():
    doc = parse_document(PY, path="m.py")
    assert doc.language == "python" and error_count(doc) == 0
    cursor = PY.index("a + b")
    seen, r = [], (cursor, cursor)
    for _ in range(5):
        r = expand(doc, *r)
        seen.append(sel(PY, r))
    assert seen[:3] == ["a", "a + b", "total = a + b"]
    assert seen[3].startswith('"""Add') and seen[3].endswith("return total")  # the function's block
    assert seen[4].startswith("def add(a, b):") and seen[4].endswith("return total")
    back = []
    for _ in range(4):
        r = shrink(doc, *r, cursor=cursor)
        back.append(sel(PY, r))
    assert back == [seen[3], "total = a + b", "a + b", "a"]
    assert shrink(doc, *r) == r  # nothing inside an identifier


def test_enclosing_roles_and_fill_body_keep_the_docstring():
    doc = parse_document(PY, path="m.py")
    cursor = PY.index("b\n    return")
    assert sel(PY, enclosing(doc, cursor, cursor, "statement")) == "total = a + b"
    assert sel(PY, enclosing(doc, cursor, cursor, "expression")) == "b"
    assert sel(PY, enclosing(doc, cursor, cursor, "function")).startswith("def add")
    body = "    total = a + b\n    return total"
    for at in (PY.index("def add"), PY.index("Add two"), cursor):  # the def line, the docstring, the body
        assert sel(PY, body_range(doc, at)) == body
    assert sel(PY, body_range(doc, PY.index("class Point"))).startswith("    def norm")  # header line: the class body
    assert sel(PY, body_range(doc, PY.index("def norm"))) == "        return 0"
    assert body_range(doc, 0) is None  # `import os`: no function or block around it


def test_javascript_nodes_and_brace_bodies():
    js = "function f(x) {\n  const y = x * 2;\n  return y;\n}\nconst g = (a) => { return a + 1; };\nfunction e() {}\n"
    doc = parse_document(js, path="a.js")
    assert doc.language == "javascript" and error_count(doc) == 0
    assert sel(js, body_range(doc, js.index("function f"))) == "  const y = x * 2;\n  return y;"
    assert sel(js, body_range(doc, js.index("a + 1"))) == "return a + 1;"
    point = body_range(doc, js.index("e()"))
    assert point[0] == point[1] == js.index("{}") + 1  # an empty body: the point between the braces
    at = js.index("x * 2")
    assert sel(js, expand(doc, at, at + 1)) == "x * 2"
    assert sel(js, enclosing(doc, at, at, "statement")) == "const y = x * 2;"


def test_plain_text_lines_and_paragraphs():
    text = "First line\nsecond line\n\nAnother paragraph\n"
    doc = parse_document(text, path="notes.txt")
    assert doc.language == PLAIN and doc.tree is None and error_count(doc) == 0
    at = text.index("second") + 2
    assert sel(text, expand(doc, at, at)) == "second line"
    assert sel(text, expand(doc, *expand(doc, at, at))) == "First line\nsecond line"
    assert expand(doc, 0, len("First line\nsecond line")) == (0, len(text))
    assert sel(text, body_range(doc, at)) == "First line\nsecond line"
    assert sel(text, shrink(doc, 0, len(text), cursor=at)) == "First line\nsecond line"
    assert sel(text, shrink(doc, 0, 22, cursor=at)) == "second line"


def test_language_detection_from_name_and_content():
    assert detect_language("x.py") == "python" and detect_language("lib.rs") == "rust"
    assert detect_language("page.html") == "html" and detect_language("Makefile", "all:\n\tcc x.c\n") == PLAIN
    assert detect_language(None, "#!/usr/bin/env python3\nprint(1)\n") == "python"
    assert detect_language(None, '{"a": [1, 2]}') == "json"
    assert detect_language(None, "def f(x):\n    return x\n") == "python"
    assert detect_language(None, "Just some prose.\n") == PLAIN


# ---- offsets ----------------------------------------------------------------------------------

def test_byte_and_character_offsets_agree_on_non_ascii_text():
    text = 'name = "東京 café"  # ☃\nemoji = "🎉"; t = name + emoji\n\r\nz = "ü"\n'
    offsets = Offsets(text)
    for i in range(len(text) + 1):
        b = len(text[:i].encode("utf-8"))
        assert offsets.to_byte(i) == b and offsets.to_char(b) == i
    inside = len('name = "東'.encode()) - 1  # a byte inside 東 maps to its start
    assert offsets.to_char(inside) == text.index("東")
    doc = parse_document(text, "python")
    at = text.index("t = name")
    assert sel(text, expand(doc, at, at)) == "t"
    assert sel(text, enclosing(doc, at, at, "statement")) == "t = name + emoji"
    at = text.index("ü")
    assert sel(text, expand(doc, at, at)) == "ü"  # the string's content node
    assert sel(text, expand(doc, *expand(doc, at, at))) == '"ü"'


# ---- candidate ranking ------------------------------------------------------------------------

def cand(row, text, confidence, new_errors, errors=None):
    return Candidate(row, (1,), (text,), text, confidence, new_errors, new_errors if errors is None else errors)


def test_a_candidate_that_breaks_the_parse_is_never_first_when_one_parses():
    ranked = rank([cand(0, "return (", -0.1, 2), cand(1, "return x", -2.0, 0), cand(2, "return x", -3.0, 0), cand(3, "ret x", -0.2, 1)])
    assert [c.text for c in ranked] == ["return x", "ret x", "return ("]  # duplicates dropped, fewer errors first
    assert ranked[0].parses and not ranked[1].parses
    only_broken = rank([cand(0, "a", -1.0, 1), cand(1, "b", -0.5, 1)])
    assert [c.text for c in only_broken] == ["b", "a"]  # none parses: confidence decides
    unchecked = rank([cand(0, "a", -1.0, None), cand(1, "b", -0.5, None)])  # no grammar: confidence only
    assert unchecked[0].text == "b"
    assert [c.text for c in rank([cand(0, "", -0.1, 0), cand(1, "x", -2.0, 0), cand(2, "(", -0.1, 1)])] == ["x", "", "("]


def test_blank_filler_at_the_end_of_a_candidate_is_trimmed_like_pad(tiny_denoiser):
    assert trim_filler("    return x\n\n\n", "\n    y = 1\n") == "    return x"  # the text after has the break
    assert trim_filler("    return x\n\n    ", "    y = 1\n") == "    return x\n"
    assert trim_filler("   \n\n", "y") == ""  # blank only: a non-answer
    assert trim_filler("a + ", "b") == "a + "  # spaces within a line may matter
    tok, end = tiny_denoiser.tokenizer, tiny_denoiser.spec.end_ids
    ids = tuple(tok.encode("x = 1\n\n\n\n")) + (end[0],) * 3
    assert content_tokens(ids, len(ids), end, tok) == len(tok.encode("x = 1"))


class ScriptedDenoiser:
    """A fake denoiser whose proposals follow a script: `script(row_key, k) -> (token, probability)`.

    k counts slots from the span's first slot; row_key is the number of pad ids a row starts
    with (its candidate length), read when a run begins (all slots still masked or padded).
    """

    supports_cache = False

    def __init__(self, tokenizer, spec, max_len, slot_start, script):
        self.tokenizer, self.spec, self.max_len = tokenizer, spec, max_len
        self.slot_start, self.script, self.keys = slot_start, script, {}
        self.vocab = tokenizer.vocab_size
        self.device = torch.device("cpu")
        self.banned_ids = torch.tensor([spec.mask_id])

    def logits(self, x, want=None, run=None, cache=None):
        want = torch.arange(x.shape[1]) if want is None else want
        out = torch.full((x.shape[0], len(want), self.vocab), -30.0)  # [B, W, V]
        blank = (x[:, want] == self.spec.mask_id) | (x[:, want] == self.spec.pad_id)  # [B, W]
        for b in range(x.shape[0]):
            if bool(blank[b].all()):  # a new run: remember the row's starting pads
                self.keys[b] = int((x[b] == self.spec.pad_id).sum())
            for j, p in enumerate(want.tolist()):
                token, prob = self.script(self.keys[b], p - self.slot_start)
                out[b, j] = torch.log(torch.tensor((1 - prob) / (self.vocab - 1)))
                out[b, j, token] = torch.log(torch.tensor(prob))
        return out


def scripted(tiny_denoiser, text, spans, plan, script, max_len=512):
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    wide, _ = plan_canvas_spans(spans, selected_tokens(text, spans, tok), plan)
    canvas = build_canvas(text, wide, tok, spec.mask_id, 1024, max_len)
    return ScriptedDenoiser(tok, spec, max_len, canvas.slots[0].start, script)


def test_engine_ranks_the_parsing_candidate_first_over_a_more_confident_broken_one(tiny_denoiser):
    tok, pad = tiny_denoiser.tokenizer, tiny_denoiser.spec.pad_id
    text = "def f(x):\n    return x\n\ny = f(1)\n"
    point = text.index("\n\ny")  # after `return x`
    good, bad = tok.encode(" + 1"), tok.encode(" +(")  # 3 and 2 tokens
    assert len(good) != len(bad)
    plan = CandidatePlan(point_lengths=(len(good), len(bad)), language="python")
    width = max(len(good), len(bad))
    script_by_key = {width - len(good): (good, 0.6), width - len(bad): (bad, 0.99)}

    def script(key, k):
        ids, prob = script_by_key[key]
        return (ids[k], prob) if 0 <= k < len(ids) else (pad, 0.9)

    spans = [Span(point, point)]
    fake = scripted(tiny_denoiser, text, spans, plan, script)
    result = apply_edit(fake, text, spans, Sampling(cache="none"), candidates=plan)
    texts = [c.texts[0] for c in result.candidates]
    assert texts == [" + 1", " +("]  # the parsing one first, though less confident
    assert result.spans[0].alternatives == tuple(texts)
    assert result.candidates[0].parses and not result.candidates[1].parses
    assert result.candidates[1].confidence > result.candidates[0].confidence
    by_confidence = apply_edit(fake, text, spans, Sampling(cache="none"), candidates=CandidatePlan(
        point_lengths=plan.point_lengths, language="python", syntax=False))
    assert by_confidence.spans[0].text == " +("  # without the parse check, confidence alone decides


def test_candidate_rows_prefill_pad_after_each_length(tiny_denoiser):
    tok, spec = tiny_denoiser.tokenizer, tiny_denoiser.spec
    text = "a = 1\nb = 22\n"
    spans = [Span(4, 5), Span(12, 12)]
    wide, lengths = plan_canvas_spans(spans, selected_tokens(text, spans, tok), CandidatePlan(scales=(1, 2, 3), point_lengths=(2, 5)))
    assert lengths == [(2, 5), (1, 2), (3, 5)]  # the middle rung first: row 0 is what the preview shows
    canvas = candidate_rows(build_canvas(text, wide, tok, spec.mask_id, 64, 512), lengths, spec.pad_id)
    for row, n in zip(canvas.rows, lengths):
        for slots, k in zip(canvas.slots, n):
            assert list(row[slots.start:slots.stop]) == [spec.mask_id] * k + [spec.pad_id] * (len(slots) - k)


def test_candidates_on_the_tiny_model_keep_the_text_outside_the_span(tiny_denoiser):
    text = "def f(x):\n    return x\n\n\nclass P:\n    y = 1\n"
    spans = [Span(21, 22), Span(43, 43)]
    plan = CandidatePlan(scales=(1, 2), point_lengths=(4, 8), language="python")
    result = apply_edit(tiny_denoiser, text, spans, Sampling(samples=2, temperature=1.0, steps=4), candidates=plan)
    assert result.candidates and len(result.samples) == len(result.candidates) == len({c.text for c in result.candidates})
    if any(c.parses for c in result.candidates):
        assert result.candidates[0].parses
    for c in result.candidates:
        assert c.text == text[:21] + c.texts[0] + text[22:43] + c.texts[1] + text[43:]
    assert [r.span for r in result.spans] == spans


def test_exact_rows_hold_their_length_even_when_the_model_wants_pad(tiny_denoiser):
    pad = tiny_denoiser.spec.pad_id
    text = "x = 1\n"
    spans = [Span(6, 6)]
    plan = CandidatePlan(point_lengths=(2, 3, 5), exact=True, syntax=False)
    fake = scripted(tiny_denoiser, text, spans, plan, lambda key, k: (pad, 0.99))
    padded = apply_edit(fake, text, spans, Sampling(cache="none"), candidates=replace(plan, exact=False))
    # Every row ends after its first slot (which never takes pad: no trained span is empty), so
    # all rows hold the same single token: one distinct candidate.
    assert len(tiny_denoiser.tokenizer.encode(padded.spans[0].text)) == 1 and len(padded.candidates) == 1
    exact = apply_edit(fake, text, spans, Sampling(cache="none"), candidates=plan)
    assert sorted(c.lengths[0] for c in exact.candidates) == [2, 3, 5]
    for c in exact.candidates:
        assert len(tiny_denoiser.tokenizer.encode(c.texts[0])) == c.lengths[0]


# ---- adaptive length --------------------------------------------------------------------------

def test_length_rules():
    policy = AdaptiveLength(point_start=16, min_start=4, max_tokens=100)
    assert start_budget(Span(0, 0), 0, policy) == 16
    assert start_budget(Span(0, 5), 2, policy) == 4 and start_budget(Span(0, 9), 12, policy) == 12
    assert start_budget(Span(0, 9, max_tokens=6), 12, policy) == 6  # an explicit max_tokens caps it
    assert start_budget(Span(0, 5, mode="rewrite"), 3, policy) is None
    assert filled_up((7, 8, 9), (0.9, 0.9, 0.8), 3, (1, 2), policy)
    assert not filled_up((7, 8, 1), (0.9, 0.9, 0.9), 3, (1, 2), policy)  # ends in pad: it fit
    assert not filled_up((7, 8, 9), (0.9, 0.2, 0.3), 3, (1, 2), policy)  # content, but the model was unsure
    assert next_budgets([16, 8, None], [16, 8, 3], [True, False, False], [100, 100, 100], 2.0) == [32, 8, None]
    assert next_budgets([64], [64], [True], [100], 2.0) == [100]


def test_adaptive_length_grows_while_the_span_fills_up_and_stops_at_pad(tiny_denoiser):
    tok, pad = tiny_denoiser.tokenizer, tiny_denoiser.spec.pad_id
    word = tok.encode(" x")[0]
    text = "value = \n"
    spans = [Span(8, 8)]

    def endless(key, k):
        return word, 0.95  # never pads: every budget fills up

    fake = scripted(tiny_denoiser, text, spans, CandidatePlan(), endless)
    result = apply_edit(fake, text, spans, Sampling(cache="none", schedule="fixed", steps=4, block_size=0), length="adaptive")
    assert result.spans[0].tokens == 64  # 16 -> 32 -> 64: three rounds, the most allowed
    assert result.steps == 12 and result.spans[0].span == spans[0]

    def five(key, k):
        return (word, 0.95) if k < 5 else (pad, 0.9)

    fake.script = five
    result = apply_edit(fake, text, spans, Sampling(cache="none", schedule="fixed", steps=4, block_size=0), length="adaptive")
    assert result.spans[0].tokens == 5 and result.steps <= 4  # one round: the model wrote pad after 5 tokens
    fixed = apply_edit(fake, text, spans, Sampling(cache="none"))
    assert fixed.spans[0].tokens == 5  # fixed length also shrinks by the pads


def test_adaptive_with_candidates_on_the_tiny_model(tiny_denoiser):
    text = "def f(x):\n    return x\n"
    spans = [Span(21, 22), Span(4, 5, mode="rewrite")]
    plan = CandidatePlan(scales=(0.5, 1), language="python")
    result = apply_edit(tiny_denoiser, text, spans, Sampling(steps=4), candidates=plan, length="adaptive")
    assert [r.span for r in result.spans] == sorted(spans, key=lambda s: s.start)
    assert result.text.startswith("def ") and result.steps >= 1


# ---- headless ---------------------------------------------------------------------------------

FILE = '''"""A module."""


def fizz(n):
    """Fizz or the number."""
    if n % 3 == 0:
        return "Fizz"
    return str(n)


print(fizz(3))
'''


def cli(*args):
    return subprocess.run([sys.executable, "-m", "sharpen.app.cli", *map(str, args)], capture_output=True, timeout=300)


def test_headless_syntax_specs_through_the_cli(tmp_path, tiny_model_dir):
    path = tmp_path / "fizz.py"
    path.write_text(FILE)
    out = cli(path, "--apply-edit", "body@4,node@11:7", "--json", "--candidates", "3", "--length", "adaptive", "--steps", "4", "--model", tiny_model_dir)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert [s["range"] for s in payload["spans"]] == ["6:1-8:18", "11:7-11:11"]  # the body after the docstring; `fizz`
    new = payload["text"]
    assert new.startswith(FILE[:FILE.index("    if n")]) and new.endswith("\n")
    assert FILE[FILE.index("return str(n)") + len("return str(n)"):FILE.index("fizz(3)")] in new
    out = cli(path, "--apply-edit", "body@4", "--diff", "--max-tokens", "4", "--model", tiny_model_dir)
    assert out.returncode == 0 and out.stdout.startswith(b"--- ") and b"\x1b[" not in out.stdout  # no colour in a pipe
    out = cli(path, "--apply-edit", "body@1", "--model", tiny_model_dir)
    assert out.returncode == 2 and out.stderr.decode().strip() == "sharpen: span body@1: no body at line 1 (python)"
    assert path.read_text() == FILE


def test_diff_is_coloured_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n"
    assert colour_diff(diff, io.StringIO()) == diff
    coloured = colour_diff(diff, Tty())
    assert "\x1b[" in coloured and "new" in coloured


def test_json_edit_lists_take_syntax_forms_too():
    from sharpen.app.specs import parse_edit_list, parse_spec
    from sharpen.core.errors import SpanError

    plain = parse_spec("body@4,node@11:7", FILE, path="fizz.py")
    listed = parse_edit_list('[{"range": "body@4"}, {"range": "node@11:7", "mode": "rewrite"}]', FILE, path="fizz.py")
    assert [(s.start, s.end) for s in listed] == [(s.start, s.end) for s in plain]
    assert listed[1].mode == "rewrite" and listed[0].label == "body@4"
    with pytest.raises(SpanError, match="no body at line 1"):
        parse_edit_list('[{"range": "body@1"}]', FILE, path="fizz.py")


def test_an_insertion_point_ladder_reaches_short_lines():
    """Most lines that pass HumanEval's single-line tests are 4-8 tokens: an exact row needs a rung
    that short. The default ladder starts at 4 and grows at most 1.5x per rung up to 64, and
    `--candidates 9` gives the same ladder."""
    from sharpen.core.candidates import DEFAULT_POINT_LENGTHS, plan_for_count

    ladder = DEFAULT_POINT_LENGTHS
    assert ladder[0] <= 4 and ladder[-1] == 64
    assert all(b / a <= 1.5 for a, b in zip(ladder, ladder[1:]))
    assert plan_for_count(9).point_lengths == ladder


def test_prose_fill_body_is_the_paragraph():
    """Markdown has a grammar but no bodies: body@L and Fill body take the paragraph, as in plain text."""
    from sharpen.core.syntax import body_range, parse_document

    text = "# Title\n\nFirst paragraph,\nstill first.\n\nSecond one.\n"
    doc = parse_document(text, path="notes.md")
    start, end = body_range(doc, text.index("still"))
    assert text[start:end].startswith("First paragraph,") and "Second" not in text[start:end]


def test_the_common_extensions_are_what_pygments_says():
    """core.languages answers the commonest extensions itself (pygments' file-name lookup costs
    0.2 s on first use); each answer is the one pygments' table gives."""
    from pygments.lexers import get_lexer_for_filename

    from sharpen.core import languages

    for suffix, name in languages.COMMON_EXTENSIONS.items():
        lexer = get_lexer_for_filename(f"file{suffix}")
        expected = next((languages._ALIASES[a] for a in lexer.aliases if a in languages._ALIASES), languages.PLAIN)
        assert name == expected, suffix
