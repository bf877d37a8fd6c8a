"""DiffusionGemma: the family loads through transformers' own class, sharpen's step-by-step loop
equals transformers' `generate`, frames carry noise states, edits hold the text around spans.

The checkpoint is tiny and random, in the release's file layout (tests/gemma_checkpoint.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gemma_checkpoint import write_diffusion_gemma
from sharpen.core.canvas import build_canvas
from sharpen.core.engine import apply_edit, run_edit
from sharpen.core.models.families.diffusion_gemma import load_gemma
from sharpen.core.loops.random_token import NoiseCanvas, renoise, split_canvas
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

pytest.importorskip("transformers.models.diffusion_gemma")

TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
SUFFIX_START = TEXT.index("\n\n\nprint")


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory) -> Path:
    return write_diffusion_gemma(tmp_path_factory.mktemp("gemma") / "diffusiongemma-tiny", canvas_length=48)


@pytest.fixture(scope="module")
def gemma(gemma_dir):
    return load_gemma(gemma_dir)


def plain_canvas(denoiser, prompt: list[int], length: int) -> NoiseCanvas:
    """A canvas of `length` free slots after `prompt`: what `generate` denoises."""
    canvas = build_canvas("x", [Span(1, 1, max_tokens=length)], denoiser.tokenizer, denoiser.spec.mask_id, 0, denoiser.max_len)
    return NoiseCanvas(tuple(prompt), (denoiser.spec.mask_id,) * length, (range(0, length),), canvas)


def padded_after_end(tokens: tuple[int, ...], ends: tuple[int, ...], pad: int) -> tuple[int, ...]:
    """transformers' finishing rule: every token after the first end token becomes pad."""
    out, ended = [], False
    for token in tokens:
        out.append(pad if ended else token)
        ended = ended or token in ends
    return tuple(out)


class Drafts:
    """A transformers streamer that keeps the argmax canvas `generate` shows after every step."""

    def __init__(self) -> None:
        self.drafts: list[list[int]] = []

    def put(self, value) -> None:
        pass

    def put_draft(self, value) -> None:
        self.drafts.append(value[0].tolist())

    def end(self) -> None:
        pass


def reference(denoiser, prompt: list[int], seed: int, rows: int, drafts: Drafts | None = None) -> list[tuple[int, ...]]:
    torch.manual_seed(seed)
    out = denoiser.model.generate(torch.tensor([prompt] * rows), max_new_tokens=denoiser.canvas_length, streamer=drafts)
    return [tuple(r) for r in out.sequences[:, len(prompt):].tolist()]


@pytest.mark.parametrize("schedule", [
    {},  # the release's generation_config.json: 48 steps, entropy bound 0.1, temperature 0.8 -> 0.4
    {"stability_threshold": 0, "confidence_threshold": 50.0},  # the stopping rule fires at once
    {"max_denoising_steps": 7, "t_min": 0.1, "t_max": 2.0, "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 3.0}},
])
def test_the_loop_writes_what_transformers_generate_writes(tmp_path, schedule):
    denoiser = load_gemma(write_diffusion_gemma(tmp_path / "m", canvas_length=16, generation=schedule))
    prompt = [denoiser.bos_id, *denoiser.tokenizer.encode("def add(a, b):\n")]
    for seed, rows in ((0, 1), (3, 1), (11, 3)):
        frames = list(renoise(denoiser, plain_canvas(denoiser, prompt, 16), Sampling(seed=seed, samples=rows)))
        ends = tuple(json.loads((denoiser_dir := tmp_path / "m").joinpath("generation_config.json").read_text())["eos_token_id"])
        ours = [padded_after_end(sample[0], ends, denoiser.spec.pad_id) for sample in frames[-1].final_ids]
        drafts = Drafts()
        assert ours == reference(denoiser, prompt, seed, rows, drafts), (schedule, seed, rows, denoiser_dir)
        # Step by step too: the argmax canvas after every step is the one generate streams.
        assert [f._guesses.tolist() for f in frames[1:-1]] == drafts.drafts
        assert frames[-1].step == len(frames) - 2  # one frame per step, then the done frame


def test_a_changed_step_breaks_the_equivalence(gemma, monkeypatch):
    """The equivalence test can fail: a temperature schedule a hair off writes other tokens."""
    import dataclasses

    prompt = [gemma.bos_id, *gemma.tokenizer.encode("x = ")]
    drafts = Drafts()
    reference(gemma, prompt, 5, 1, drafts)
    frames = list(renoise(gemma, plain_canvas(gemma, prompt, gemma.canvas_length), Sampling(seed=5)))
    assert [f._guesses.tolist() for f in frames[1:-1]] == drafts.drafts
    monkeypatch.setattr(gemma, "schedule", dataclasses.replace(gemma.schedule, t_max=0.81))
    frames = list(renoise(gemma, plain_canvas(gemma, prompt, gemma.canvas_length), Sampling(seed=5)))
    assert [f._guesses.tolist() for f in frames[1:-1]] != drafts.drafts


def test_frames_show_noise_that_changes_and_accepted_tokens(gemma):
    frames = list(run_edit(gemma, TEXT, [Span(15, 31)], Sampling(seed=2, steps=6)))
    first = frames[0].frame.spans[0]
    assert all(t is None for t in first.tokens) and all(n is not None for n in first.noise)  # all noise at the start
    noise_seen = [tuple(f.frame.spans[0].noise) for f in frames[:-1]]
    assert len(set(noise_seen)) == len(noise_seen)  # the noise is re-drawn every step
    assert any(t is not None for f in frames[1:-1] for t in f.frame.spans[0].tokens)  # some slots accepted on the way
    last = frames[-1].frame.spans[0]
    assert all(t is not None for t in last.tokens) and frames[-1].result is not None


def test_infill_holds_the_suffix_and_runs_one_decoder_pass_per_step(gemma):
    text_after = TEXT[31:]
    canvas = build_canvas(TEXT, [Span(15, 31)], gemma.tokenizer, gemma.spec.mask_id, 1024, gemma.max_len)
    layout = split_canvas(canvas, gemma.bos_id, gemma.canvas_length)
    held = [p for p in range(len(layout.ids)) if not any(p in r for r in layout.slots)]
    assert held and gemma.tokenizer.decode([layout.ids[p] for p in held]) == text_after  # the decoder sees the suffix
    before = gemma.passes
    frames = list(renoise(gemma, layout, Sampling(seed=1, steps=9)))
    for frame in frames[:-1]:
        assert [frame._ids[p].item() for p in held] == [layout.ids[p] for p in held]  # never re-noised
    assert gemma.passes - before == frames[-1].step == 9  # one decoder pass per step
    result = apply_edit(gemma, TEXT, [Span(15, 31)], Sampling(seed=1, steps=9))
    assert result.text.startswith(TEXT[:15]) and result.text.endswith(text_after)  # byte for byte around the span


def test_rewrite_strength_zero_starts_from_the_draft_and_one_from_noise(gemma):
    span = (15, 31)
    draft = gemma.tokenizer.encode(TEXT[span[0]:span[1]])
    none = list(run_edit(gemma, TEXT, [Span(*span, mode="rewrite", strength=0.0)], Sampling(steps=3)))
    assert list(none[0].frame.spans[0].tokens) == draft  # every slot sharp: the draft itself
    whole = list(run_edit(gemma, TEXT, [Span(*span, mode="rewrite", strength=1.0)], Sampling(steps=3)))
    assert all(t is None for t in whole[0].frame.spans[0].tokens)  # every slot noise
    half = list(run_edit(gemma, TEXT, [Span(*span, mode="rewrite", strength=0.5)], Sampling(steps=3)))
    kept = [t for t in half[0].frame.spans[0].tokens if t is not None]
    assert len(kept) == len(draft) - -(-len(draft) // 2) and set(kept) <= set(draft)
    for run in (none, whole, half):
        assert run[-1].result.text.endswith(TEXT[31:])


def test_several_spans_share_one_canvas_and_an_instruction_uses_the_chat_template(gemma):
    spans = [Span(15, 31, mode="rewrite"), Span(len(TEXT) - 1, len(TEXT) - 1, max_tokens=4)]
    result = apply_edit(gemma, TEXT, spans, Sampling(steps=4))
    assert result.text.startswith(TEXT[:15]) and TEXT[31:len(TEXT) - 1] in result.text
    canvas = build_canvas(TEXT, spans, gemma.tokenizer, gemma.spec.mask_id, 1024, gemma.max_len)
    assert len(split_canvas(canvas, gemma.bos_id, gemma.canvas_length).slots) == 2
    told = apply_edit(gemma, TEXT, [Span(15, 31, instruction="return the difference")], Sampling(steps=4))
    assert told.text.startswith(TEXT[:15]) and told.text.endswith(TEXT[31:])


def test_an_end_token_ends_the_span(gemma):
    """What follows the model's end token is not part of the answer (as transformers pads it)."""
    from sharpen.core.loops.random_token import _cut_at_end

    eos = gemma.spec.eos_id
    ids = torch.tensor([[10, 11, eos, 12, 13, 14]])
    cut = _cut_at_end(ids, (range(0, 6),), gemma.spec.end_ids)
    assert cut.tolist() == [[10, 11, eos, eos, eos, eos]]


def cli(*runs: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
    """`sharpen ARGS` for each of `runs`, each in a fresh process, all at once (most of a run is
    importing torch and transformers, single-threaded: two cores take two at a time)."""
    procs = [subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in runs]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.fixture
def in_process(capfd):
    """`sharpen ARGS` as main() in this process, torch and transformers imported once:
    (exit code, stdout, stderr)."""
    from sharpen.app.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capfd.readouterr()
        code = main(list(args))
        return (code, *capfd.readouterr())

    return run


def test_the_cli_runs_infill_rewrite_and_instruction_from_the_release_layout(gemma_dir, tmp_path, in_process):
    """An infill and an int8 load each in a fresh process (where the first warning of torchao or
    transformers would reach the user's stderr), a rewrite and an instruction in this one."""
    target = tmp_path / "add.py"
    target.write_text(TEXT)
    edit = (str(target), "--apply-edit", "2:5-2:17", "--model", str(gemma_dir), "--steps", "5", "--json")
    runs = [(proc.returncode, proc.stdout, proc.stderr) for proc in cli((*edit,), (*edit, "--quantize", "int8"))]
    runs += [in_process(*edit, *extra) for extra in (["--mode", "rewrite", "--strength", "1"], ["--instruction", "use subtraction"])]
    for code, stdout, stderr in runs:
        assert code == 0, stderr
        assert stderr == ""  # nothing from torchao or transformers on the user's stderr
        out = json.loads(stdout)
        assert out["noise"] == "random" and out["steps"] == 5 and len(out["sharp_per_step"]) == 6
        assert out["text"].startswith(TEXT[:19]) and out["text"].endswith(TEXT[31:])
    assert target.read_text() == TEXT


def test_a_release_without_its_tokenizer_or_with_a_wrong_model_type_is_one_line_and_exit_4(gemma_dir, tmp_path, in_process):
    import shutil

    target = tmp_path / "add.py"
    target.write_text(TEXT)
    bare = tmp_path / "no-tokenizer"
    shutil.copytree(gemma_dir, bare)
    (bare / "tokenizer.json").unlink()
    wrong = tmp_path / "wrong-type"
    shutil.copytree(gemma_dir, wrong)
    config = json.loads((wrong / "config.json").read_text())
    config["model_type"] = "diffusion_gemma_text"
    (wrong / "config.json").write_text(json.dumps(config))
    for path, words in ((bare, "no tokenizer"), (wrong, "unknown model family")):
        code, stdout, stderr = in_process(str(target), "--apply-edit", "2:5-2:17", "--model", str(path))
        assert code == 4 and stdout == ""
        assert len(stderr.strip().splitlines()) == 1 and words in stderr, stderr
    assert target.read_text() == TEXT


def test_noise_pieces_are_the_random_tokens_drawn_faint():
    from types import SimpleNamespace

    from sharpen.app.tui.model_runner import draft_pieces
    from sharpen.app.tui.preview import MASK_GLYPH, NOISE, SURE
    from sharpen.core.run import Progress, draft_of

    shown = {1: "ab", 2: "\n", 3: "x"}
    tokenizer = SimpleNamespace(pieces=lambda ids: [shown[i] for i in ids], decode=lambda ids: "".join(shown[i] for i in ids))
    span = SimpleNamespace(tokens=(None, None, 3), confidence=(0.1, 0.1, 0.99), noise=(1, 2, None), guesses=(1, 2, 3))
    draft = draft_of(span, tokenizer, set(), mask_id=0)
    assert [s.state for s in draft.slots] == ["noise", "noise", "sharp"]
    pieces = draft_pieces(Progress(1, 4, 0.0, (draft,)))[0]
    assert [(p.text, p.kind) for p in pieces] == [("ab" + MASK_GLYPH, NOISE), ("x", SURE)]  # no line break drawn


async def test_the_editor_shows_noise_settling_and_keeps_the_suffix(gemma, tmp_path):
    from pilot import Config, make_app, wait_for, with_model

    from sharpen.app.tui.editor_pane import IDLE, PREVIEW
    from sharpen.app.tui.preview import NOISE

    path = tmp_path / "add.py"
    path.write_text(TEXT)
    app = make_app([path], Config.of(steps=6, frame_rate=60, min_step_ms=200))  # slow enough to catch frames under load
    kinds_seen: list[set[str]] = []
    async with app.run_test(size=(100, 24)) as pilot:
        await with_model(app, pilot, gemma)
        pane = app.active_pane()
        editor = pane.editor
        editor.selection = ((1, 4), (1, 16))
        start, end = editor.selected_offsets()
        await pilot.press("alt+i")
        for _ in range(400):
            kinds_seen.append({kind for styles in pane.preview.layout_shown.line_styles.values() for _, _, kind in styles})
            if pane.phase == PREVIEW:
                break
            await pilot.pause(0.01)
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert any(NOISE in kinds for kinds in kinds_seen)  # noise was drawn while the run went on
        final_kinds = {kind for styles in pane.preview.layout_shown.line_styles.values() for _, _, kind in styles}
        assert NOISE not in final_kinds  # the finished preview is text
        await pilot.press("tab")
        assert pane.phase == IDLE
        new = editor.buffer_text
        assert new[:start] == TEXT[:start] and new.endswith(TEXT[end:])


def test_sharpen_models_lists_the_release_as_usable(gemma_dir, tmp_path):
    import shutil

    from sharpen.core.models.catalog import inspect_checkpoint

    info = inspect_checkpoint(gemma_dir)
    assert info.usable and info.family == "diffusion_gemma" and info.instruct and info.params > 0
    bare = tmp_path / "bare"
    shutil.copytree(gemma_dir, bare)
    (bare / "tokenizer.json").unlink()
    assert "no tokenizer" in inspect_checkpoint(bare).problem


def test_int8_quantizes_the_experts_and_stays_close_to_float(gemma_dir):
    """torchao int8 weight-only reaches the experts' 3-D weights (most of the release's bytes)."""
    pytest.importorskip("torchao")
    quantized = load_gemma(gemma_dir, quantize="int8")
    plain = load_gemma(gemma_dir)
    experts = quantized.model.model.decoder.layers[0].experts
    assert type(experts.gate_up_proj).__name__ == "Int8Tensor" and type(experts.down_proj).__name__ == "Int8Tensor"
    prompt = torch.tensor([[plain.bos_id, *plain.tokenizer.encode("def add(a, b):\n")]])
    canvas = torch.randint(0, plain.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    ours, theirs = (d.canvas_logits(canvas, None, d.encode(prompt, 12)) for d in (quantized, plain))
    assert (ours - theirs).abs().max() < 0.05 * theirs.abs().max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).float().mean() > 0.9
    result = apply_edit(quantized, TEXT, [Span(15, 31)], Sampling(steps=3))
    assert result.text.startswith(TEXT[:15]) and result.text.endswith(TEXT[31:])
