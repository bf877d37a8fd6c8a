"""LLaDA2.1's editing decode (core/loops/editing.py) and LLaDA2 through the front ends.

The reference is the release's own `generate` (LLaDA2.1: token-to-token editing; LLaDA2.0: none),
run once by tests/golden/llada2_reference.py on the tiny checkpoint of tests/moe_checkpoints.py
and recorded step by step in tests/golden/llada2_tiny.json: sharpen's loop writes the same
tokens and makes the same commits and edits at every step. Then the front ends: --json counts
commits and edits, the editor draws an edit, a rewrite's kept text is never edited.
"""
import json
from pathlib import Path

import pytest

from moe_checkpoints import write_llada2
from sharpen.core.models.loading import load_denoiser

GOLDEN = json.loads((Path(__file__).parent / "golden" / "llada2_tiny.json").read_text())
TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    """The golden's checkpoint: LLaDA2.1 layout, float32, a sharpened head (so the decode edits)."""
    return {"2.1": write_llada2(tmp_path_factory.mktemp("llada2") / "llada2.1", version="2.1", head_scale=3.0)}


def _decode_passes(den, mode: str, record: dict | None = None, **knobs) -> tuple[list[int], list[dict]]:
    """sharpen's loop on the golden's prompt, block and length (mode "2.0": the block-causal loop
    without editing; else the editing loop in that mode): the result and, per model step, what it
    committed and what it edited (absolute canvas positions, as the golden)."""
    import dataclasses
    from functools import partial

    from sharpen.core.canvas import Canvas
    from sharpen.core.loops.block import block_denoise
    from sharpen.core.loops.editing import edit_denoise
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    g = record or GOLDEN["decode"]
    den.spec = dataclasses.replace(den.spec, block=dataclasses.replace(den.spec.block, size=g["block_length"]))
    prompt, length = g["prompt"], g["gen_length"]
    canvas = Canvas(ids=tuple(prompt) + (g["mask_id"],) * length, slots=(range(len(prompt), len(prompt) + length),),
                    spans=(Span(0, 0),), window=(0, 0), mask_id=g["mask_id"])
    passes, before, final = [], None, None
    loop = block_denoise if mode == "2.0" else partial(edit_denoise, mode=mode)
    for frame in loop(den, canvas, Sampling(temperature=0.0, **knobs), ban=False):
        ids = frame._ids.tolist()
        if before is not None and not frame.done:
            changed = [p for p in range(len(ids)) if ids[p] != before[p]]
            passes.append({"committed": [[p, ids[p]] for p in changed if before[p] == g["mask_id"]],
                           "edited": [[p, before[p], ids[p]] for p in changed if before[p] != g["mask_id"]]})
            span = frame.spans[0]  # the editor's view: edited slots are marked, with the token they held
            for p, old, new in passes[-1]["edited"]:
                assert span.states[p - len(prompt)] == "edited" and span.replaced[p - len(prompt)] == old
            assert all(s != "edited" for p, s in enumerate(span.states) if p + len(prompt) not in {e[0] for e in passes[-1]["edited"]})
        before = ids
        final = frame
    return list(final.final_ids[0][0]), passes, final.edit_counts


def test_llada20_decode_without_editing_equals_the_release_generate(llada2):
    """--editing off: the block-causal loop with LLaDA2.0's rule (every masked token above 0.95, at
    least one a step) writes the tokens of LLaDA2.0's own generate, step for step."""
    den = load_denoiser(llada2["2.1"])
    assert den.spec.block.threshold == 0.95
    reference = GOLDEN["decode_2.0"]["modes"]["2.0"]
    result, passes, counts = _decode_passes(den, "2.0")
    assert result == reference["result"] and counts is None
    assert passes == [{"committed": p["committed"], "edited": []} for p in reference["passes"]]


@pytest.mark.parametrize("mode", ["quality", "speed"])
def test_llada21_editing_decode_equals_the_release_generate_token_for_token_and_edit_for_edit(llada2, mode):
    den = load_denoiser(llada2["2.1"])
    reference = GOLDEN["decode"]["modes"][mode]
    result, passes, counts = _decode_passes(den, mode)
    assert result == reference["result"]
    assert passes == [{"committed": p["committed"], "edited": p["edited"]} for p in reference["passes"]]
    commits = sum(len(p["committed"]) for p in reference["passes"])
    edits = sum(len(p["edited"]) for p in reference["passes"])
    assert counts == ((commits, edits),) and edits > 0  # both modes edit on this checkpoint

def test_llada21_editing_thresholds_are_the_references_at_the_values_a_user_passes(llada2):
    """--threshold and --editing-threshold replace the mode's: quality mode at speed's thresholds
    (0.5 / 0.0) decodes as the release's generate does at those thresholds."""
    den = load_denoiser(llada2["2.1"])
    reference = GOLDEN["decode"]["modes"]["speed"]
    result, passes, _ = _decode_passes(den, "quality", threshold=reference["threshold"], editing_threshold=reference["editing_threshold"])
    assert result == reference["result"]
    assert passes == [{"committed": p["committed"], "edited": p["edited"]} for p in reference["passes"]]


def test_llada20_decode_of_an_answer_shorter_than_its_block_equals_the_release_generate(llada2):
    """LLaDA2.0's generate clamps its steps to the answer's length (`steps = min(steps, gen_length)`):
    a 3-token answer in blocks of 8 takes 3 steps a block, shares 3, 3, 2 (tests/golden/llada2_tiny.json
    decode_2.0_short); one a step, as before the clamp, took 8 passes for the last block."""
    record = GOLDEN["decode_2.0_short"]
    reference = record["modes"]["2.0"]
    assert record["gen_length"] < record["block_length"]
    result, passes, _ = _decode_passes(load_denoiser(llada2["2.1"]), "2.0", record)
    answer_end = len(record["prompt"]) + record["gen_length"]
    assert result[:len(reference["result"])] == reference["result"] and len(passes) == len(reference["passes"])
    # The block's tail past the answer is denoised and dropped (sharpen's frames show the canvas only, the
    # reference's last pass is read from the answer it returns): compare the commits inside the answer.
    inside = [[c for c in p["committed"] if c[0] < answer_end] for p in reference["passes"]]
    assert [p["committed"] for p in passes] == inside and not any(p["edited"] for p in passes)


def test_llada20_clamps_its_steps_to_the_answers_length_as_its_generate(llada2):
    """LLaDA2.0's generate runs `steps = min(steps, gen_length)`: an answer shorter than its block
    of 32 takes as many steps as it has tokens, each step a share of the block; without the clamp
    it took one token a step."""
    import copy
    import dataclasses

    from sharpen.core.engine import run_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    den = load_denoiser(llada2["2.1"])
    assert den.spec.block.size == 32 and den.spec.block.steps_within_answer
    span = Span(TEXT.index("return"), TEXT.index("return") + len("return a + b"), max_tokens=5)
    clamped = list(run_edit(den, TEXT, [span], Sampling(editing="off")))
    assert clamped[-1].result.settings["steps_per_block"] == [5]
    unclamped_model = copy.copy(den)
    unclamped_model.spec = dataclasses.replace(den.spec, block=dataclasses.replace(den.spec.block, steps_within_answer=False))
    unclamped = list(run_edit(unclamped_model, TEXT, [span], Sampling(editing="off")))
    asked = list(run_edit(unclamped_model, TEXT, [span], Sampling(editing="off", steps=5)))  # the reference's arithmetic, spelled out
    assert [f.frame.step for f in clamped] == [f.frame.step for f in asked] != [f.frame.step for f in unclamped]
    assert clamped[-1].result.text == asked[-1].result.text


@pytest.mark.parametrize("editing", ["off", "quality"])
def test_llada2_cuts_the_answer_at_its_first_end_token_in_both_modes(llada2, editing):
    from test_block_diffusion import Forced, _forced_canvas

    from sharpen.core.loops.block import block_denoise
    from sharpen.core.loops.editing import edit_denoise
    from sharpen.core.settings import Sampling

    den = load_denoiser(llada2["2.1"])
    eos = den.spec.eos_id
    canvas = _forced_canvas(den, 4, 12)
    forced = Forced(den, 4, {2: eos}, fill=60)  # the end token at slot 2, content everywhere else in the block
    loop = block_denoise if editing == "off" else edit_denoise
    final = list(list(loop(forced, canvas, Sampling(editing=editing), ban=False))[-1].final_ids[0][0])
    assert final[:3] == [60, 60, eos] and all(t in den.spec.end_ids for t in final[3:])


@pytest.mark.parametrize("settings, refused", [
    ({"steps": 4}, "--steps has no effect on"),  # LLaDA2.1's generate takes no step count
    ({"editing": "off", "editing_threshold": 0.3}, "--editing-threshold has no effect on"),
    ({"cache": "none"}, "--cache has no effect on"),
])
def test_llada2_refuses_a_knob_its_generate_lacks_in_one_line(llada2, settings, refused):
    from sharpen.core.engine import apply_edit
    from sharpen.core.errors import UsageError
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    with pytest.raises(UsageError, match=refused):
        apply_edit(load_denoiser(llada2["2.1"]), TEXT, [Span(19, 31)], Sampling(**settings))


def test_a_masked_model_refuses_the_editing_knobs(tiny_denoiser):
    from sharpen.core.engine import apply_edit
    from sharpen.core.errors import UsageError
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    for knobs, flag in (({"editing": "speed"}, "--editing "), ({"editing_threshold": 0.2}, "--editing-threshold")):
        with pytest.raises(UsageError, match=flag):
            apply_edit(tiny_denoiser, TEXT, [Span(19, 31)], Sampling(**knobs))


# --- LLaDA2.1 through the front ends -----------------------------------------------------------------


def test_llada21_headless_json_counts_commits_and_edits_and_keeps_the_text_outside(llada2, tmp_path):
    import subprocess
    import sys

    target = tmp_path / "a.py"
    target.write_text(TEXT)
    runs = {}
    for mode in ("quality", "off"):
        proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:5-2:17", "--model",
                               str(llada2["2.1"]), "--json", "--editing", mode], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs[mode] = json.loads(proc.stdout)
    out = runs["quality"]
    assert out["text"].startswith("def add(a, b):\n    ") and out["text"].endswith("\n\n\nprint(add(1, 2))\n")
    span = out["spans"][0]
    assert span["commits"] > 0 and span["edits"] > 0  # this checkpoint's decode edits in quality mode
    assert "edits" not in runs["off"]["spans"][0]  # no editing loop, no counts
    assert out["settings"] == {"decode": "editing", "block_size": 32, "threshold": 0.7, "editing_threshold": 0.5, "max_post_steps": 16}
    assert runs["off"]["settings"]["decode"] == "block" and runs["off"]["settings"]["threshold"] == 0.95
    assert target.read_text() == TEXT


def test_llada21_frames_show_an_edit(llada2):
    from sharpen.core.engine import run_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    den = load_denoiser(llada2["2.1"])
    start = TEXT.index("return")
    seen = []
    for edit_frame in run_edit(den, TEXT, [Span(start, start + len("return a + b"), mode="infill")], Sampling(editing="quality")):
        assert edit_frame.frame.step <= edit_frame.frame.total_steps  # progress never runs past its end
        span = edit_frame.frame.spans[0]
        if "edited" in span.states:
            seen.append(span)
    assert seen  # at least one step replaced a committed token
    span = seen[0]
    p = span.states.index("edited")
    assert span.replaced[p] is not None and span.replaced[p] != span.tokens[p]  # the editor draws it as an edit: the next test

async def test_llada21_in_the_editor_draws_edits_and_tab_keeps_the_text_outside(llada2, tmp_path, monkeypatch):
    """The editor runs LLaDA2.1's editing decode: some preview frame draws an edited token as an
    edit (frames paced so none is coalesced away), Tab applies the result with the text outside
    the span unchanged."""
    import sharpen.app.tui.model_runner as model_runner
    from pilot import make_app, select_line, wait_for, with_model

    from sharpen.app.config import Config
    from sharpen.app.tui.editor_pane import PREVIEW

    kinds: set[str] = set()
    draft = model_runner.draft_pieces

    def recording(progress):
        pieces = draft(progress)
        kinds.update(piece.kind for span in pieces for piece in span)
        return pieces

    monkeypatch.setattr(model_runner, "draft_pieces", recording)
    source = tmp_path / "a.py"
    source.write_text(TEXT)
    app = make_app([source], Config.of(frame_rate=240, min_step_ms=20, editing="quality"))
    async with app.run_test(size=(100, 32)) as pilot:
        await with_model(app, pilot, load_denoiser(llada2["2.1"]))
        pane = app.active_pane()
        editor = pane.editor
        select_line(editor, 1)
        start, end = editor.selected_offsets()
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW, timeout=120)
        assert "edited" in kinds and "masked" in kinds
        await pilot.press("tab")
        new = editor.buffer_text
        assert new[:start] == TEXT[:start] and new.endswith(TEXT[end:])

def test_llada21_editing_leaves_a_rewrites_kept_draft_alone(llada2):
    """A rewrite's kept tokens are the user's text, not the model's commits: the editing decode
    fills and edits the re-noised slots only (speed mode, a seed whose run edits)."""
    from sharpen.core.loops.editing import edit_denoise
    from sharpen.core.prompted import prompt_canvas
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    den = load_denoiser(llada2["2.1"])
    start = TEXT.index("return")
    span = Span(start, start + len("return a + b"), mode="rewrite", strength=0.5)
    canvas = prompt_canvas(TEXT, span, den.tokenizer, den.spec, "chat", 1024, den.max_len, seed=2)
    slots = canvas.slots[0]
    kept = {p: canvas.ids[p] for p in slots if canvas.ids[p] != den.spec.mask_id}
    assert kept and len(kept) < len(slots)
    frames = list(edit_denoise(den, canvas, Sampling(), mode="speed"))
    final = frames[-1].final_ids[0][0]
    assert all(final[p - slots.start] == token for p, token in kept.items())
    assert frames[-1].edit_counts[0][1] > 0  # it did edit its own commits
    edited = {p for f in frames for p, state in zip(slots, f.spans[0].states) if state == "edited"}
    assert edited and not edited & set(kept)
