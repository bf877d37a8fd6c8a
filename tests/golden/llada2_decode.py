"""The reference decode of LLaDA2.1 (its `generate`: block diffusion with token-to-token editing),
recorded step by step. Imported by llada2_reference.py, which loads the reference model.

The release's `generate` keeps no history, so a forward pre-hook on its backbone copies the
canvas each pass reads; consecutive canvases show, per step, which slots were committed from the mask and which
committed tokens were replaced (edits). The last pass's changes are read from the returned ids.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

# The two published modes (LLaDA2.1 model card): quality (threshold 0.7, editing 0.5) and
# speed (0.5, 0.0); block 32 and up to 16 extra editing steps in the release, block 4 here.
MODES = {"quality": (0.7, 0.5), "speed": (0.5, 0.0)}
PROMPT_LENGTH = 6
GEN_LENGTH = 10
BLOCK = 4
STEPS = 4
MAX_POST_STEPS = 16


def _special(checkpoint: Path, name: str) -> int:
    tokens = json.loads((checkpoint / "tokenizer.json").read_text())["added_tokens"]
    return next(t["id"] for t in tokens if t["content"] == name)


def _steps(canvases: list[torch.Tensor], final: torch.Tensor, mask_id: int, prompt_length: int) -> list[dict]:
    """Per pass: the slots (absolute canvas positions) it committed and those it edited."""
    out = []
    for before, after in zip(canvases, canvases[1:] + [None]):
        if after is None:  # the last pass: its changes are in the returned ids (cut at eos)
            after = before.clone()
            after[prompt_length:prompt_length + final.numel()] = final
        n = min(before.numel(), after.numel())
        changed = (before[:n] != after[:n]).nonzero().flatten().tolist()
        out.append({
            "window": before.numel(),
            "committed": [[p, int(after[p])] for p in changed if before[p] == mask_id],
            "edited": [[p, int(before[p]), int(after[p])] for p in changed if before[p] != mask_id],
        })
    return out


@torch.no_grad()
def decode_record(model, checkpoint: Path, editing: bool = True, gen_length: int = GEN_LENGTH, block: int = BLOCK,
                  steps: int = STEPS) -> dict:
    """The decode in both of LLaDA2.1's modes (`editing`), or LLaDA2.0's one (its generate has no
    editing: every masked token above 0.95 commits, at least the step's share of the block). An
    answer shorter than the block (`gen_length` < `block`) records LLaDA2.0's step clamp
    (`steps = min(steps, gen_length)`)."""
    mask_id, eos_id = _special(checkpoint, "<|mask|>"), _special(checkpoint, "<|endoftext|>")
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    prompt = torch.randint(0, mask_id - 6, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(11))  # plain BPE ids
    record = {"prompt": prompt[0].tolist(), "block_length": block, "steps": steps, "gen_length": gen_length,
              "max_post_steps": MAX_POST_STEPS, "mask_id": mask_id, "eos_id": eos_id, "vocab_size": vocab, "modes": {}}
    for mode, (threshold, editing_threshold) in (MODES.items() if editing else [("2.0", (0.95, None))]):
        canvases: list[torch.Tensor] = []

        def keep(module, args, kwargs):
            ids = args[0] if args else kwargs["input_ids"]
            canvases.append(ids[0].clone())

        # generate() calls self.forward directly (no hooks); the inner backbone is called as a module
        handle = model.model.register_forward_pre_hook(keep, with_kwargs=True)
        try:
            extra = dict(editing_threshold=editing_threshold, max_post_steps=MAX_POST_STEPS) if editing else {}
            result = model.generate(prompt, temperature=0.0, block_length=block, steps=steps, gen_length=gen_length,
                                    threshold=threshold, eos_id=eos_id, mask_id=mask_id, **extra)
        finally:
            handle.remove()
        record["modes"][mode] = {"threshold": threshold, "editing_threshold": editing_threshold, "result": result[0].tolist(),
                                 "passes": _steps(canvases, result[0], mask_id, PROMPT_LENGTH)}
    return record
