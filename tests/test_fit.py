"""core/models/memory_fit.py and core/models/quantize.py: what a model needs, whether it fits, int8/int4."""
from __future__ import annotations

import subprocess
import sys

import torch

from sharpen.core.models import memory_fit
from sharpen.core.models.memory_fit import KNOWN_RELEASES, Machine, advice, footprint, verdict

GiB = 2**30


def test_sizes_follow_the_release_dimensions():
    _, llada = KNOWN_RELEASES["LLaDA-8B-Instruct"]
    embed, linear = memory_fit.parameter_split(llada)
    assert 8.0e9 < embed + linear < 8.05e9  # LLaDA-8B: 8.02B parameters
    bf16 = footprint(llada, "bfloat16", context_tokens=1024)
    assert bf16.weights == 2 * (embed + linear)
    assert bf16.kv_cache == 2 * 32 * 32 * 128 * (1024 + memory_fit.SLOT_ALLOWANCE) * 2
    int8, int4 = footprint(llada, "int8").weights, footprint(llada, "int4").weights
    assert int4 < int8 < bf16.weights and 7.5 * GiB < int8 < 9 * GiB and int4 < 6 * GiB


def test_verdicts_and_advice():
    assert verdict(8 * GiB, 12 * GiB) == "fits" and verdict(11 * GiB, 12 * GiB) == "tight" and verdict(13 * GiB, 12 * GiB) == "does not fit"
    _, llada = KNOWN_RELEASES["LLaDA-8B-Instruct"]
    assert "--quantize int8" in advice(llada, Machine((("RTX 3060", 11 * GiB, 12 * GiB),), 16 * GiB))
    assert "--quantize int4" in advice(llada, Machine((("RTX 3050", 7 * GiB, 8 * GiB),), 16 * GiB))
    # no GPU, 7 GiB of RAM: int8 (8 GiB) does not fit, int4 (under 6 GiB) does, on the CPU
    assert advice(llada, Machine((), 7 * GiB)) == "on the CPU (--device cpu --quantize int4), slowly"
    assert "--dtype bfloat16" in advice(llada, Machine((("RTX 4090", 23 * GiB, 24 * GiB),), 64 * GiB))
    assert "nowhere" in advice(llada, Machine((), 4 * GiB))


def _cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-c", "import sys; from sharpen.app.cli import main; sys.exit(main(sys.argv[1:]))", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_doctor_prints_a_fit_table_for_the_known_releases():
    proc = _cli("doctor")
    assert "LLaDA-8B-Instruct (release)" in proc.stdout and "INT8" in proc.stdout and "Open-dCoder-0.5B" in proc.stdout
    assert any(word in proc.stdout for word in ("ok", "tight", "does not fit"))


def test_a_load_that_cannot_fit_is_refused_before_it_starts(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """One line with the advice, exit 4, the file untouched; --force-load loads anyway."""
    from sharpen.app.cli import main

    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    monkeypatch.setattr(memory_fit, "this_machine", lambda: Machine((), 1024))
    assert main([str(target), "--apply-edit", "1:5-1:5", "--model", str(tiny_model_dir), "--in-place"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than the 1.0 KiB free in CPU memory" in err and "--force-load" in err
    assert target.read_text() == "x = 1\n"
    assert main([str(target), "--apply-edit", "1:5-1:5", "--model", str(tiny_model_dir), "--force-load", "--steps", "2"]) == 0


def test_int8_quantized_model_is_smaller_and_close(tiny_model_dir):
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.models.quantize import weight_bytes

    full = load_denoiser(tiny_model_dir)
    small = load_denoiser(tiny_model_dir, quantize="int8")
    ids = torch.arange(40)[None] % full.tokenizer.vocab_size
    reference, quantized = full.logits(ids), small.logits(ids)
    assert (reference - quantized).abs().max() < 0.05 * reference.abs().max()
    assert (reference.argmax(-1) == quantized.argmax(-1)).float().mean() > 0.9
    linear = sum(m.weight.numel() for m in full.model.modules() if isinstance(m, torch.nn.Linear))
    assert weight_bytes(small.model) < weight_bytes(full.model) - 2.5 * linear  # 4 bytes -> 1 byte per linear weight


def test_doctor_sizes_every_release_and_the_model_it_was_given(tiny_model_dir):
    """The fit table names the block-diffusion releases and DiffusionGemma (by its weights, a
    floor), and --model DIR itself comes first."""
    from sharpen.app.subcommands import fit_report
    from sharpen.core.models.memory_fit import KNOWN_RELEASES, Machine, WeightsOnly, footprint

    for name in ("SDAR-1.7B-Chat", "SDAR-8B-Chat", "Stable-DiffCoder-8B-Instruct", "Fast_dLLM_v2_7B", "DiffusionGemma-26B-A4B-it"):
        assert name in KNOWN_RELEASES
    gemma = KNOWN_RELEASES["DiffusionGemma-26B-A4B-it"][1]
    assert isinstance(gemma, WeightsOnly) and footprint(gemma, "bfloat16").total == 52_000_000_000
    machine = Machine(gpus=(), ram_available=64 * 2**30)
    report = fit_report([("mine", WeightsOnly(10**9)), ("DiffusionGemma-26B-A4B-it", gemma)], machine)
    assert "mine (1.0B; weights only)" in report
    gemma_row = next(line for line in report.splitlines() if "DiffusionGemma" in line)
    assert "GPU only" in gemma_row and gemma_row.rstrip().endswith("on the CPU (--device cpu --quantize int8), slowly")


def test_doctor_lists_a_diffusion_gemma_model_dir_in_the_fit_table(tmp_path, capsys):
    from gemma_checkpoint import write_diffusion_gemma

    from sharpen.app.subcommands import doctor

    path = tmp_path / "gemma"
    write_diffusion_gemma(path)
    doctor(["--model", str(path)])
    out = capsys.readouterr().out
    table = out[out.index("memory at"):]
    assert f"{path.name} (" in table.splitlines()[2] and "weights only" in table.splitlines()[2]
