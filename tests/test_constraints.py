"""Controllable generation (core/constraints/): automata against Python's own matcher, the
per-step steering over random canvases (every step completable, every result matching), the
loops on the embedded model, a batch of constrained and unconstrained runs, and the headless
surfaces end to end."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from sharpen.core.canvas import Canvas
from sharpen.core.constraints import Constraint, ConstraintError
from sharpen.core.constraints.automaton import constraint_dfa, regex_dfa, words_dfa
from sharpen.core.constraints.tokens import token_automaton
from sharpen.core.constraints.requests import request_constraint
from sharpen.core.constraints.steering import Steering
from sharpen.core.errors import UsageError
from sharpen.core.spans import Span
from sharpen.core.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = Tokenizer.from_file(ROOT / "core/embedded/tokenizer.json")
MASK, PAD, EOS = 0, 1, 2

# Patterns from real use (dates, versions, identifiers, a SQL fragment) and ones that trip
# leftmost-first automata ((x|xy)*, an optional tail after a greedy run).
PATTERNS = [
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"v?[0-9]+\.[0-9]+\.[0-9]+(-rc[0-9])?",
    r"[a-z_][a-z0-9_]{0,12}",
    r"(x|xy)*z",
    r"[a-z]+( [a-z]+)?",
    r"(ab|ba)+",
    r"SELECT [a-z]+ FROM [a-z]+( WHERE [a-z]+ = [0-9]+)?",
    r"(true|false|null|[0-9]+)",
    r"é+|[^a-z]{2}",
]
ALPHABET = "0123456789-._abxyz é€ SELCTFROMWHE=rv"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=14))
def test_the_byte_automaton_accepts_exactly_what_re_fullmatch_matches(pattern, text):
    dfa = regex_dfa(pattern)
    assert dfa.matches(text.encode("utf-8")) == bool(re.fullmatch(pattern, text))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["ab", "ba", "aab", "é"]), min_size=0, max_size=2, unique=True),
       st.lists(st.sampled_from(["bb", "aaa", "€"]), min_size=0, max_size=2, unique=True),
       st.text(alphabet="abé€", max_size=10))
def test_the_words_automaton_accepts_exactly_the_texts_with_every_required_and_no_forbidden_word(required, forbidden, text):
    if not required and not forbidden:
        return
    dfa = words_dfa(tuple(required), tuple(forbidden))
    expected = all(w in text for w in required) and not any(w in text for w in forbidden)
    assert dfa.matches(text.encode("utf-8")) == expected


def _token_text(ids) -> str:
    return TOKENIZER.decode([i for i in ids if i not in (PAD, EOS)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS[:6]), st.text(alphabet=ALPHABET, max_size=12))
def test_the_token_automaton_accepts_a_token_sequence_iff_its_text_matches(pattern, text):
    automaton = token_automaton(TOKENIZER, Constraint(regex=pattern), (PAD, EOS), frozenset({MASK}))
    ids = TOKENIZER.encode(text)
    q = 0
    for t in ids:
        q = int(automaton.table[q, automaton.token_class[t]]) if q >= 0 else -1
    assert (q >= 0 and bool(automaton.final[q])) == bool(re.fullmatch(pattern, text))


def _fake_denoiser():
    return SimpleNamespace(spec=SimpleNamespace(mask_id=MASK, end_ids=(PAD, EOS)), tokenizer=TOKENIZER,
                           banned_ids=torch.tensor([MASK]))


def _canvas(S: int, constraint: Constraint, mode: str = "infill", draft: list[int] | None = None) -> Canvas:
    prefix = TOKENIZER.encode("x = ")
    body = draft if draft is not None else [MASK] * S
    ids = (*prefix, *body, *TOKENIZER.encode("\n"))
    span = Span(4, 4 if mode == "infill" else 5, mode=mode, max_tokens=S if mode == "infill" else None, constraint=constraint)
    return Canvas(ids=ids, slots=(range(len(prefix), len(prefix) + len(body)),), spans=(span,), window=(0, 5), mask_id=MASK)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS), st.integers(6, 14), st.integers(0, 2**31), st.booleans())
def test_random_steps_over_a_canvas_keep_it_completable_and_the_result_matches(pattern, S, seed, opening_banned):
    """Slots fill in random order, several per step, tokens drawn from random logits through
    constrain and settle: the canvas stays completable after every step and ends matching."""
    constraint = Constraint(regex=pattern)
    canvas = _canvas(S, constraint)
    steer = Steering.for_canvas(_fake_denoiser(), canvas, rows=1, opening_banned=opening_banned)
    x = torch.tensor(canvas.ids)[None]
    try:
        steer.prepare(x)
    except ConstraintError:
        assert token_automaton(TOKENIZER, constraint, (PAD, EOS), frozenset({MASK})).min_tokens() > S
        return
    rng = np.random.default_rng(seed)
    slots = list(canvas.slots[0])
    V = TOKENIZER.vocab_size
    while (x[0, slots] == MASK).any():
        masked = [p for p in slots if x[0, p] == MASK]
        block = sorted(rng.choice(masked, size=min(len(masked), int(rng.integers(1, 5))), replace=False).tolist())
        logits = torch.tensor(rng.normal(size=(1, len(block), V)), dtype=torch.float32)
        logits[..., MASK] = float("-inf")
        logits = steer.constrain(logits, x, block)
        proposal = logits.argmax(-1)  # [1, P]
        p_token = logits.softmax(-1).gather(-1, proposal[..., None]).squeeze(-1)
        commit = torch.tensor(rng.random(len(block)) < 0.7)[None]
        commit[0, 0] = True
        proposal, p_token = steer.settle(x, block, proposal, commit, p_token, logits)
        x[0, block] = torch.where(commit[0], proposal[0], x[0, block])
        assert steer.completable(x) == [[True]], f"step left {x[0, slots].tolist()} uncompletable"
    ids = x[0, slots].tolist()
    ends = [i for i, t in enumerate(ids) if t in (PAD, EOS)]
    assert ends == list(range(len(ids) - len(ends), len(ids)))  # pads only at the tail
    if opening_banned:
        assert ids[0] not in (PAD, EOS)
    assert re.fullmatch(pattern, _token_text(ids)), _token_text(ids)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS[:4]), st.integers(0, 2**31))
def test_a_slot_may_take_a_token_exactly_when_the_canvas_stays_completable_with_it(pattern, seed):
    """constrain's allowed set (forward and backward sets) against the full completability test
    of the canvas with each token put in (checked on every allowed and 300 random other tokens)."""
    constraint = Constraint(regex=pattern)
    canvas = _canvas(8, constraint)
    steer = Steering.for_canvas(_fake_denoiser(), canvas, rows=1, opening_banned=False)
    x = torch.tensor(canvas.ids)[None]
    steer.prepare(x)
    rng = np.random.default_rng(seed)
    slots = list(canvas.slots[0])
    for p in rng.permutation(slots)[:3].tolist():  # a few committed slots first, kept completable
        logits = steer.constrain(torch.tensor(rng.normal(size=(1, 1, TOKENIZER.vocab_size)), dtype=torch.float32), x, [p])
        x[0, p] = int(logits.argmax())
    target = next(p for p in slots if x[0, p] == MASK)
    allowed = torch.isfinite(steer.constrain(torch.zeros(1, 1, TOKENIZER.vocab_size), x, [target]))[0, 0]
    candidates = set(allowed.nonzero().flatten().tolist()) | set(rng.integers(1, TOKENIZER.vocab_size, 300).tolist())
    for t in sorted(candidates):
        trial = x.clone()
        trial[0, target] = t
        fresh = Steering.for_canvas(_fake_denoiser(), canvas, rows=1, opening_banned=False)
        assert fresh.completable(trial) == [[bool(allowed[t])]], (t, TOKENIZER.decode([t]))


def test_commits_that_clash_are_settled_one_at_a_time():
    """`ab|ba`, two masked slots, both proposing `a`: each allowed alone, not together."""
    constraint = Constraint(regex="ab|ba")
    canvas = _canvas(2, constraint)
    steer = Steering.for_canvas(_fake_denoiser(), canvas, rows=1, opening_banned=True)
    x = torch.tensor(canvas.ids)[None]
    steer.prepare(x)
    a, b = TOKENIZER.token_id("a"), TOKENIZER.token_id("b")
    block = list(canvas.slots[0])
    logits = torch.full((1, 2, TOKENIZER.vocab_size), -5.0)
    logits[0, :, a] = 5.0
    logits[0, 1, b] = 4.0
    logits = steer.constrain(logits, x, block)
    proposal = torch.tensor([[a, a]])
    p_token = torch.tensor([[0.9, 0.6]])
    settled, p = steer.settle(x, block, proposal, torch.tensor([[True, True]]), p_token, logits)
    assert settled.tolist() == [[a, b]]  # the surer slot keeps `a`, the other takes its best allowed token
    assert 0 < float(p[0, 1]) < 1


def test_a_constraint_no_canvas_of_the_length_can_meet_is_refused_before_the_run():
    canvas = _canvas(3, Constraint(regex="[0-9]{40}"))
    steer = Steering.for_canvas(_fake_denoiser(), canvas, rows=1)
    with pytest.raises(ConstraintError, match="shortest match takes .* tokens and the span has 3 slots"):
        steer.prepare(torch.tensor(canvas.ids)[None])


def test_a_rewrite_whose_draft_the_constraint_rules_out_is_masked_whole():
    draft = TOKENIZER.encode("hello")
    canvas = _canvas(len(draft), Constraint(regex="[0-9]+"), mode="rewrite", draft=draft)
    steer = Steering.for_canvas(_fake_denoiser(), canvas, rows=1)
    x = torch.tensor(canvas.ids)[None]
    steer.prepare(x)
    assert x[0, list(canvas.slots[0])].tolist() == [MASK] * len(draft)


def test_grammar_matches_are_sentences_lark_parses():
    from lark import Lark

    from sharpen.core.constraints.grammar import grammar_regex

    grammar = 'start: expr\nexpr: NUMBER | "(" expr "+" expr ")" | NAME\n%import common.INT -> NUMBER\n%import common.CNAME -> NAME\n'
    pattern = grammar_regex(grammar)
    parser = Lark(grammar)
    for sentence in ["1", "(1+x)", "((a+2)+(3+b))"]:
        assert re.fullmatch(pattern, sentence)
        parser.parse(sentence)
    for broken in ["(1+", "1+2", "()"]:
        assert not re.fullmatch(pattern, broken)
    # A random walk through the automaton gives sentences Lark parses (soundness).
    dfa = constraint_dfa(Constraint(grammar=grammar))
    rng = np.random.default_rng(0)
    for _ in range(30):
        q, out = 0, bytearray()
        for _ in range(30):
            if dfa.accept[q] and rng.random() < 0.3:
                break
            moves = np.flatnonzero(dfa.table[q] >= 0)
            b = int(rng.choice(moves))
            out.append(b)
            q = int(dfa.table[q, b])
        if dfa.accept[q]:
            parser.parse(out.decode())


def test_server_fields_become_constraints():
    assert request_constraint({}) is None
    assert request_constraint({"response_format": {"type": "text"}}) is None
    assert request_constraint({"regex": "[0-9]+"}) == Constraint(regex="[0-9]+")
    assert request_constraint({"guided_regex": "a"}) == Constraint(regex="a")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert request_constraint({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}) == \
        Constraint(json_schema=json.dumps(schema))
    assert request_constraint({"json_schema": json.dumps(schema)}).json_schema == json.dumps(schema)
    assert request_constraint({"response_format": {"type": "json_object"}}).pattern().startswith("\\{")
    assert request_constraint({"ebnf": 'start: "a"'}).grammar == 'start: "a"'
    with pytest.raises(UsageError, match="one constraint per request"):
        request_constraint({"regex": "a", "json_schema": "{}"})
    with pytest.raises(UsageError, match="not supported"):
        request_constraint({"response_format": {"type": "yaml"}})


def test_constraints_travel_in_an_edit_request_and_an_edit_list():
    from sharpen.app.specs import parse_edit_list
    from sharpen.core.request import EditRequest

    text = "a = \nb = \n"
    c = Constraint(regex="[0-9]+", require=("7",))
    request = EditRequest(text, (Span(4, 4, max_tokens=6, constraint=c),))
    assert EditRequest.from_json(json.loads(json.dumps(request.to_json()))).spans[0].constraint == c
    spans = parse_edit_list(json.dumps([{"range": "1:5-1:5", "regex": "[0-9]+"}, {"range": "2:5-2:5", "json_schema": {"type": "integer"},
                                         "forbid": "0"}]), text)
    assert spans[0].constraint == Constraint(regex="[0-9]+")
    assert spans[1].constraint.json_schema == '{"type": "integer"}' and spans[1].constraint.forbid == ("0",)
    with pytest.raises(UsageError, match="one pattern per span"):
        parse_edit_list(json.dumps([{"range": "1:5-1:5", "regex": "a", "grammar": "start: A"}]), text)


# -- the loops, on the embedded model -------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATTERNS[:7]), st.integers(0, 1000), st.sampled_from([0.0, 1.0]), st.sampled_from([None, 4]))
def test_the_masked_loop_keeps_every_frame_completable_and_the_result_matches(embedded, pattern, seed, temperature, block):
    from sharpen.core.engine import run_edit
    from sharpen.core.settings import Sampling

    text = 'value = ""\n'
    span = Span(9, 9, max_tokens=14, constraint=Constraint(regex=pattern))
    canvas_steer = None
    last = None
    for update in run_edit(embedded, text, [span], Sampling(seed=seed, temperature=temperature, block_size=block)):
        frame = update.frame
        ids = frame._ids[None]
        if canvas_steer is None:
            canvas_steer = _steer_for_frame(embedded, frame, span)
        assert canvas_steer.completable(ids) == [[True]], frame.step
        last = update
    assert re.fullmatch(pattern, last.result.spans[0].text), last.result.spans[0].text


def _steer_for_frame(denoiser, frame, span):
    r = frame._slots[0]
    canvas = Canvas(ids=tuple(frame._ids.tolist()), slots=(r,), spans=(span,), window=(0, 0), mask_id=denoiser.spec.mask_id)
    return Steering.for_canvas(denoiser, canvas, rows=1)


def test_json_schema_outputs_are_json_the_schema_accepts(embedded):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "port": {"type": "integer"}},
              "required": ["name", "port"], "additionalProperties": False}
    for seed in range(3):
        result = apply_edit(embedded, "config = \n", [Span(9, 9, max_tokens=32, constraint=Constraint(json_schema=json.dumps(schema)))],
                            Sampling(seed=seed, temperature=1.0))
        value = json.loads(result.spans[0].text)
        assert set(value) == {"name", "port"} and isinstance(value["name"], str) and len(value["name"]) <= 6
        assert isinstance(value["port"], int)


def test_required_and_forbidden_words_hold_in_a_rewrite(embedded):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling

    text = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n"
    start = text.index("    s = 0")
    span = Span(start, len(text) - 1, mode="rewrite", strength=0.6, constraint=Constraint(require=("sum",), forbid=("for",)))
    result = apply_edit(embedded, text, [span], Sampling(seed=1))
    assert "sum" in result.spans[0].text and "for" not in result.spans[0].text


def test_a_batch_of_constrained_and_unconstrained_runs_equals_each_alone(embedded):
    import threading
    from contextlib import contextmanager

    from sharpen.core.request import EditRequest
    from sharpen.core.run import Runner
    from sharpen.core.settings import Sampling

    text = 'when = ""\nname = ""\n'
    requests = [
        EditRequest(text, (Span(8, 8, max_tokens=12, constraint=Constraint(regex=DATE)),), Sampling(seed=4)),
        EditRequest(text, (Span(8, 8, max_tokens=12),), Sampling(seed=4)),
        EditRequest(text, (Span(8, 8, max_tokens=10), Span(18, 18, max_tokens=10, constraint=Constraint(regex="[a-z_]+"))),
                    Sampling(seed=9, temperature=0.8)),
    ]
    def fingerprint(done):
        return done.result.text, done.result.steps, done.sharp_per_step

    alone = [fingerprint(Runner(embedded).result(r)) for r in requests]
    runner = Runner(embedded, batch=3)
    assert runner.batcher is not None
    runner.batcher.max_wait, runner.batcher.rows = 1.0, 10**6
    member, gate = runner.batcher.member, threading.Barrier(3)

    @contextmanager
    def joined():
        with member() as view:
            gate.wait(60)
            yield view

    runner.batcher.member = joined
    out: list = [None] * 3

    def one(i):
        out[i] = runner.result(requests[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [fingerprint(d) for d in out] == alone
    assert max(runner.batcher.runs_per_pass) == 3
    assert re.fullmatch(DATE, out[0].result.spans[0].text) and re.fullmatch("[a-z_]+", out[2].result.spans[1].text)


# -- headless, end to end ------------------------------------------------------------------------


def sharpen(*args):
    return subprocess.run([sys.executable, "-m", "sharpen.app.cli", *map(str, args)], capture_output=True, timeout=300)


def test_headless_date_pattern_matches_and_the_same_seed_without_it_does_not(tmp_path):
    path = tmp_path / "release.toml"
    path.write_text('released = ""\n')
    common = [path, "--apply-edit", "1:13-1:13", "--max-tokens", "12", "--seed", "3", "-q", "--json"]
    steered = sharpen(*common, "--regex", DATE)
    free = sharpen(*common)
    assert steered.returncode == 0 and free.returncode == 0, (steered.stderr, free.stderr)
    assert re.fullmatch(DATE, json.loads(steered.stdout)["spans"][0]["text"])
    assert not re.fullmatch(DATE, json.loads(free.stdout)["spans"][0]["text"])


def test_headless_refuses_bad_constraints_with_documented_exits_and_leaves_the_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text('x = ""\n')
    before = path.read_bytes()
    cases = [
        (["--regex", "[0-9]{400}"], 2, "cannot be met"),
        (["--regex", "(["], 2, "cannot compile the pattern"),
        (["--json-schema", tmp_path / "missing.json"], 3, "cannot read the JSON schema"),
        (["--regex", "a", "--require", "b", "--forbid", "b"], 2, "cannot be met"),
    ]
    for extra, code, message in cases:
        proc = sharpen(path, "--apply-edit", "1:6-1:6", "--max-tokens", "8", "--in-place", "-q", *extra)
        assert proc.returncode == code, (extra, proc.stderr)
        assert message in proc.stderr.decode() and len(proc.stderr.decode().strip().splitlines()) == 1
        assert path.read_bytes() == before


def test_headless_json_schema_file_and_words(tmp_path):
    path = tmp_path / "app.py"
    path.write_text("settings = \n")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"debug": {"type": "boolean"}}, "required": ["debug"]}))
    proc = sharpen(path, "--apply-edit", "1:12-1:12", "--max-tokens", "16", "-q", "--json", "--json-schema", schema)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(json.loads(proc.stdout)["spans"][0]["text"])["debug"], bool)


# -- the block-causal loops, on release-layout fixtures --------------------------------------------


@pytest.fixture(scope="module")
def block_models(tmp_path_factory):
    from block_checkpoints import write_fast_dllm_v2, write_sdar
    from moe_checkpoints import write_llada2

    from sharpen.core.models.loading import load_denoiser

    root = tmp_path_factory.mktemp("constrained")
    return {"sdar": load_denoiser(write_sdar(root / "SDAR-8B-Chat-tiny")),
            "llada2.1": load_denoiser(write_llada2(root / "LLaDA2.1-mini-tiny", version="2.1")),
            "fast-dllm-v2": load_denoiser(write_fast_dllm_v2(root / "Fast_dLLM_v2_7B-tiny"))}


@pytest.mark.parametrize("name", ["sdar", "llada2.1", "fast-dllm-v2"])
def test_block_causal_editing_and_subblock_loops_steer_every_span(block_models, name):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling

    model = block_models[name]
    pattern = r"[0-9]{2}-[0-9]{2}"
    for seed in range(3):
        spans = [Span(4, 4, max_tokens=10, constraint=Constraint(regex=pattern)), Span(10, 10, max_tokens=8, constraint=Constraint(require=("ab",)))]
        result = apply_edit(model, "x = \ny = \n", spans, Sampling(seed=seed, temperature=1.0))
        assert re.fullmatch(pattern, result.spans[0].text) and "ab" in result.spans[1].text
        free = apply_edit(model, "x = \ny = \n", [Span(4, 4, max_tokens=10), Span(10, 10, max_tokens=8)], Sampling(seed=seed, temperature=1.0))
        assert not re.fullmatch(pattern, free.spans[0].text)


def test_candidate_rows_of_every_length_match_even_where_a_match_cannot_take_the_row_exactly(embedded):
    """--candidates: rows of exact lengths (pad banned inside each, core/candidates.py ExactRows).
    A row no match fits exactly becomes "at most its length"; every alternative matches."""
    from sharpen.core.candidates import plan_for_count
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling

    for seed in range(2):
        result = apply_edit(embedded, 'released = ""\n', [Span(12, 12, constraint=Constraint(regex=DATE))],
                            Sampling(seed=seed, temperature=1.0, samples=2), candidates=plan_for_count(4))
        assert result.spans[0].alternatives and all(re.fullmatch(DATE, t) for t in result.spans[0].alternatives)


# -- the editor's palette -------------------------------------------------------------------------


async def test_palette_infill_with_pattern_and_rewrite_keeping_words(tmp_path, embedded):
    from pilot import make_app, top_command, wait_for, with_model

    from sharpen.app.tui.editor_pane import IDLE, PREVIEW

    path = tmp_path / "release.py"
    path.write_text('released = ""\n\ndef total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n')
    app = make_app([path])
    async with app.run_test(size=(100, 32)) as pilot:
        await with_model(app, pilot, embedded)
        pane = app.active_pane()
        editor = pane.editor
        editor.selection = ((0, 12), (0, 12))
        await pilot.press("ctrl+p")
        await pilot.press(*"Infill with pattern")
        await wait_for(pilot, lambda: top_command(app) == "Infill with pattern")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press(*DATE)
        await pilot.press("enter")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        await pilot.press("tab")
        assert pane.phase == IDLE
        line = editor.buffer_text.splitlines()[0]
        assert re.fullmatch(DATE, line[len('released = "'):-1]), line

        editor.selection = ((3, 0), (6, 12))
        await pilot.press("ctrl+p")
        await pilot.press(*"Rewrite keeping words")
        await wait_for(pilot, lambda: top_command(app) == "Rewrite keeping words")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press(*"total sum")
        await pilot.press("enter")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        rewritten = pane.preview.text
        await pilot.press("tab")
        body = editor.buffer_text.split("def total(xs):\n", 1)[1]
        assert "total" in body and "sum" in body, (rewritten, body)
