"""Fast-dLLM v2's sub-block loop against the release's own `batch_sample`, token for token.

tests/golden/fast_dllm_v2_generate.json is NVlabs/Fast-dLLM's v2/generation_functions.py
(`batch_sample`) run on the release's modeling.py over the tiny checkpoint of
tests/block_checkpoints.py (tests/golden/fast_dllm_v2_generate.py says which copies, commits and
stand-ins). sharpen runs the same checkpoint through core/loops/subblock.py at the same settings
(greedy at the release's threshold 0.95, blocks of 32 in sub-blocks of 8, the whole block every
step; and a few cases at a low temperature and threshold, where steps commit several tokens).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDEN = json.loads((Path(__file__).parent / "golden" / "fast_dllm_v2_generate.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fdllm(tmp_path_factory):
    from block_checkpoints import write_fast_dllm_v2
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(write_fast_dllm_v2(tmp_path_factory.mktemp("fdllm-golden") / "Fast_dLLM_v2_7B-tiny"))


def test_the_golden_names_its_reference_and_was_run_at_the_release_settings_sharpen_uses(fdllm):
    loop, model = GOLDEN["reference"]["loop"], GOLDEN["reference"]["model"]
    assert loop["repository"] == "https://github.com/NVlabs/Fast-dLLM" and loop["path"] == "v2/generation_functions.py"
    assert len(loop["commit"]) == 40 and len(model["commit"]) == 40 and set(model["sha256"]) == {"modeling.py", "configuration.py"}
    rule = fdllm.spec.block
    assert (GOLDEN["block_size"], GOLDEN["small_block_size"], GOLDEN["default_threshold"]) == (rule.size, rule.sub_block, rule.threshold)
    assert GOLDEN["use_block_cache"] is False  # eval.py's default: every step runs the whole block, as sharpen's loop does
    assert any(c["temperature"] == 0 and c["threshold"] == rule.threshold for c in GOLDEN["cases"])  # the release's defaults
    assert any(c["denoising_passes"] < c["slots"] - 8 for c in GOLDEN["cases"])  # steps that commit several tokens at once
    assert GOLDEN["mask_id"] == fdllm.spec.mask_id
    assert {GOLDEN["stop_token"], GOLDEN["pad_token_id"]} <= set(fdllm.spec.end_ids)
    # The cases reach every path of batch_sample that sharpen shares: no prefill, a prefill whose
    # block continues with the slots, a prefill on a block boundary (the token shift), several
    # blocks, and a stop token that ends the run before its last block.
    lengths = [len(c["prompt"]) for c in GOLDEN["cases"]]
    assert min(lengths) < 32 and any(n % 32 == 0 for n in lengths) and any(n > 32 and n % 32 for n in lengths)
    assert any(len(c["output"]) < len(c["prompt"]) + c["slots"] for c in GOLDEN["cases"])


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"p{len(c['prompt'])}-n{c['slots']}-t{c['temperature']}-th{c['threshold']}")
def test_the_subblock_loop_writes_what_batch_sample_writes(fdllm, case):
    from sharpen.core.canvas import Canvas
    from sharpen.core.loops.subblock import subblock_denoise
    from sharpen.core.settings import Sampling

    denoiser = fdllm
    prompt, n, mask = case["prompt"], case["slots"], fdllm.spec.mask_id
    canvas = Canvas(ids=(*prompt, *[mask] * n), slots=(range(len(prompt), len(prompt) + n),), spans=(), window=(0, 0), mask_id=mask)
    # batch_sample's sample_with_top_p: the temperature, then top-p 0.95, then one multinomial draw
    # per position from the generator seeded with the case's seed (greedy at temperature 0).
    # The cases at other thresholds than the release's pass theirs as a user does (--threshold).
    threshold = case["threshold"] if case["threshold"] != fdllm.spec.block.threshold else None
    settings = Sampling(seed=case["seed"], temperature=case["temperature"], top_p=GOLDEN["top_p"] if case["temperature"] else None,
                        threshold=threshold)
    frames = list(subblock_denoise(denoiser, canvas, settings, ban=False))
    ours = list(frames[-1].final_ids[0][0])
    # batch_sample returns the prompt, the blocks it decoded and the first token of the next one;
    # a run its stop token ended is cut at the end of that block, padded after the stop.
    expected = case["output"][len(prompt):len(prompt) + n]
    ends = set(fdllm.spec.end_ids)
    # sharpen ends at any of the release's end ids (config.json's and generation_config.json's
    # eos), batch_sample at its one stop_token: up to the first end id both write the same, after
    # it sharpen writes padding (an end id) whatever the reference went on with.
    cut = next((i + 1 for i, t in enumerate(expected) if t in ends), len(expected))
    assert ours[:cut] == expected[:cut]
    assert all(t in ends for t in ours[cut:])
    # The same schedule, not only the same tokens: as many denoising passes (one a frame) as
    # batch_sample ran, unless sharpen's wider set of end ids ended it a block earlier.
    last = (len(prompt) + n - 1) // 32
    if cut == len(expected) or expected[cut - 1] == case["stop_token"] or (len(prompt) + cut - 1) // 32 == last:
        assert frames[-1].step == case["denoising_passes"]
    if case["stop_token"] in expected:  # the reference's own stop: the rest of its block is its pad id, later blocks never ran
        stop = expected.index(case["stop_token"])
        assert set(expected[stop + 1:]) <= {GOLDEN["pad_token_id"]} and len(expected) < n
        assert ours == expected + [fdllm.spec.end_ids[0]] * (n - len(expected))
