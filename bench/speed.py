"""Speed and quality of denoising: the naive loop, sharpen's default, and autoregression.

    python bench/speed.py                      # embedded model, CPU, HumanEval multi-line spans
    python bench/speed.py --device cuda --shapes llada-8b,qwen2-0.5b   # random weights, GPU

Rows: model, span length, method (policy / schedule / cache), tokens/s, steps, wall time,
and quality on a held-out infill set (HumanEval-Infilling multi-line middles, never in the
training corpus): token accuracy and exact match at the oracle length, whether the completed
program still parses, and the share of tokens identical to exact decoding's (what the cache
and parallel commits changed). All rows of one
run are on the same machine, items and span lengths; the methods take turns item by item
(each warmed up once first), so a slow spell of the machine costs every method alike.

Methods:
  naive      LLaDA's reference loop: full forward every step, full-vocabulary logits for
             every position, one token committed per step (lowest step count = span length).
  default    sharpen's default: dual KV cache per block + confidence-threshold commits.
  exact      sharpen with no cache and one token per step (what the cache and threshold buy).
  cfg        exact with classifier-free guidance (--cfg-scale 1, LLaDA's reference knob): each
             step also runs the unconditional canvas, in one batch of two (LLaDA checkpoints only:
             `--model DIR --methods exact,cfg`; the last lines give the cost per step against exact).
  ar         a causal transformer of the same dimensions (transformers' LlamaForCausalLM,
             random weights: speed only) decoding the same number of tokens with its KV cache
             through `generate`.
  ar-loop    the same model in a bare greedy loop over its forward (generate's per-token
             bookkeeping left out): the strictest autoregressive baseline here.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "humaneval-infilling" / "HumanEval-MultiLineInfilling.jsonl.gz"


@dataclass
class Item:
    prefix: str
    middle: str
    suffix: str


def load_items(path: Path, tokenizer, lo: int, hi: int, limit: int) -> list[Item]:
    """Deterministic held-out items whose middle has between lo and hi tokens."""
    items = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            n = len(tokenizer.encode(row["canonical_solution"]))
            if lo < n <= hi:
                items.append(Item(row["prompt"], row["canonical_solution"], row["suffix"]))
    items.sort(key=lambda it: (len(it.middle), it.middle))
    step = max(1, len(items) // limit) if limit else 1
    return items[::step][:limit] if limit else items


@torch.inference_mode()
def naive_loop(denoiser, ids: torch.Tensor, slots: range) -> tuple[torch.Tensor, int]:
    """LLaDA's generate(): every step a full forward over the canvas and all its logits."""
    x = ids.clone()[None]  # [1, T]
    mask_id = denoiser.spec.mask_id
    steps = 0
    for _ in range(len(slots)):  # one commit per step, as LLaDA's steps = gen_length
        logits = denoiser.logits(x)  # [1, T, V], every position projected (compiled too, with --compile)
        # Never the mask itself: a trained model does not propose it, but random weights with a
        # tied head do (a masked position's own embedding scores highest), and would loop forever.
        logits[..., mask_id] = float("-inf")
        p = logits.softmax(-1)
        conf, pred = p.max(-1)  # [1, T]
        masked = x == mask_id
        conf = torch.where(masked, conf, torch.tensor(-1.0))
        pos = int(conf[0].argmax())
        x[0, pos] = pred[0, pos]
        steps += 1
    return x[0, slots.start:slots.stop], steps


def run_item(method: str, denoiser, item: Item, context: int, settings_cls, engine, canvas_mod) -> dict:
    """One item by one method: tokens, steps, wall seconds, correct tokens, exact match."""
    tok, spec = denoiser.tokenizer, denoiser.spec
    text = item.prefix + item.middle + item.suffix
    target = tok.encode(item.middle)
    span = engine.Span(len(item.prefix), len(item.prefix) + len(item.middle), max_tokens=len(target))
    started = time.perf_counter()
    if method == "naive":
        canvas = canvas_mod.build_canvas(text, [span], tok, spec.mask_id, context, denoiser.max_len)
        out, n = naive_loop(denoiser, torch.tensor(canvas.ids, device=denoiser.device), canvas.slots[0])
        out = out.tolist()
    else:
        settings = method_settings(method, settings_cls)
        per_step = _per_step(method)
        if per_step:  # a step budget relative to the span: at least this many commits per step
            settings = dataclasses.replace(settings, steps=math.ceil(len(target) / per_step))
        # The span's length is given (the oracle's), so every method decodes all of its slots: the
        # expected-length cut would pad some of them and make the same span less work.
        from sharpen.core.loops.masked import LoopRules

        same_length = LoopRules(expected_length=False)
        frames = list(engine.run_edit(denoiser, text, [span], settings, context_tokens=context, rules=same_length))
        out = list(frames[-1].frame.final_ids[0][0])
        n = frames[-1].result.steps
    wall = time.perf_counter() - started
    written = tok.decode([t for t in out if t not in (*spec.end_ids, spec.mask_id)])
    return {"tokens": len(target), "steps": n, "wall": wall, "correct": sum(a == b for a, b in zip(out, target)),
            "exact": written.strip() == item.middle.strip(), "parses": parses(item.prefix + written + item.suffix), "ids": out}


def parses(program: str) -> bool:
    """The completed program parses (tree-sitter, no ERROR/MISSING node): the quality signal that
    parallel commits lose first on a weak model, long before token accuracy or exact match move."""
    from sharpen.core.syntax import error_count, parse_document

    return error_count(parse_document(program, "python")) == 0


def run_methods(methods: list[str], denoiser, items: list[Item], context: int, settings_cls, engine, canvas_mod) -> dict:
    """Every method on every item, interleaved item by item (a slow spell of the machine then hits
    every method alike, which keeps the ratios of one run honest on a noisy VM); each method runs
    the first item once untimed first (allocator, oneDNN and cache warm-up)."""
    def one(method: str, item: Item) -> dict:
        if method in ("ar", "ar-loop"):
            return run_ar_item(denoiser, item, context, loop=method == "ar-loop")
        return run_item(method, denoiser, item, context, settings_cls, engine, canvas_mod)

    for method in methods:
        one(method, items[0])
    totals = {m: {"tokens": 0, "steps": 0, "wall": 0.0, "correct": 0, "exact": 0, "parses": 0, "same": 0} for m in methods}
    for item in items:
        outputs = {method: one(method, item) for method in methods}
        reference = outputs.get("exact", {}).get("ids")
        for method, result in outputs.items():
            ids = result.pop("ids", None)
            if reference is not None and ids is not None:  # tokens identical to exact decoding's
                result["same"] = sum(a == b for a, b in zip(ids, reference))
            for key, value in result.items():
                totals[method][key] += value
    for method, row in totals.items():
        quality = not method.startswith("ar")  # random weights: speed only
        row["acc"] = row["correct"] / max(row["tokens"], 1) if quality else None
        row["em"] = row["exact"] / len(items) if quality else None
        row["parse"] = row["parses"] / len(items) if quality else None
        row["agree"] = row["same"] / max(row["tokens"], 1) if quality and "exact" in totals else None
    return totals


def _changes(method: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in method.split("@", 1)[1].split("/")) if "@" in method else {}


def _per_step(method: str) -> int | None:
    value = _changes(method).get("per_step")
    return int(value) if value else None


def method_settings(method: str, settings_cls):
    """default, exact, or default@FIELD=VALUE/...: the default with some Sampling changed
    (e.g. default@threshold=0.7/block_size=16); per_step=K sets steps to ceil(span / K)."""
    if method.startswith("default@"):
        changes = {k: v for k, v in _changes(method).items() if k != "per_step"}
        types = {f.name: f.type for f in dataclasses.fields(settings_cls)}
        return settings_cls(**{k: _parse(v, types[k]) for k, v in changes.items()})
    return {"default": settings_cls(), "exact": settings_cls(cache="none", schedule="fixed"),
            "cfg": settings_cls(cache="none", schedule="fixed", cfg_scale=1.0)}[method]


def _parse(value: str, annotation: str):
    if "int" in annotation:
        return None if value == "none" else int(value)
    if "float" in annotation:
        return None if value == "none" else float(value)
    if "bool" in annotation:
        return value.lower() in ("1", "true", "yes")
    return value


def describe_settings(settings, per_step: int | None = None) -> str:
    from sharpen.core.settings import MASKED_THRESHOLD  # an unset threshold is the masked loop's

    threshold = MASKED_THRESHOLD if settings.threshold is None else settings.threshold
    schedule = f"threshold {threshold}" if settings.schedule == "threshold" else "fixed"
    if per_step:
        schedule += f", >= {per_step} per step"
    block = f", blocks of {settings.block_size}" if settings.block_size else ""
    block += ", block refresh" if settings.refresh == "block" and settings.cache != "none" else ""
    return f"{settings.policy} / {schedule} / {settings.cache}{block}"


@functools.cache
def causal_twin(denoiser):
    """The causal twin of `denoiser`, built once per run."""
    return build_causal_lm(denoiser.model.cfg, denoiser.device, denoiser.model.embed.weight.dtype)


def build_causal_lm(cfg, device, dtype):
    """A causal LM of the same dimensions (transformers' LlamaForCausalLM, random weights: speed only)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_hidden, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=max(cfg.max_seq_len, 4096),  # prompt + span may pass the denoiser's canvas; no warning per call
        rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, pad_token_id=0, eos_token_id=None, bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):  # built where it runs: an 8B twin never passes through host memory
        return LlamaForCausalLM(config).to(dtype).eval()


def run_ar_item(denoiser, item: Item, context: int, loop: bool = False) -> dict:
    """The same number of tokens decoded by the causal twin with its KV cache: through `generate`
    (the issue's baseline), or with `loop` by a bare greedy loop over the model's forward (no
    logits processors or stopping criteria: the cheapest autoregression transformers offers)."""
    model, tok = causal_twin(denoiser), denoiser.tokenizer
    n = len(tok.encode(item.middle))
    prompt = tok.encode(item.prefix)[-(context // 2):] or [0]
    ids = torch.tensor([prompt], device=denoiser.device)
    started = time.perf_counter()
    with torch.inference_mode():
        if loop:
            out = model(input_ids=ids, use_cache=True)
            for _ in range(n - 1):
                ids = out.logits[:, -1:].argmax(-1)  # [1, 1]
                out = model(input_ids=ids, cache=out.cache, use_cache=True)
        else:
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True)
    return {"tokens": n, "steps": n, "wall": time.perf_counter() - started, "correct": 0, "exact": 0, "parses": 0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="checkpoint dir (default: the embedded model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--lengths", default="32,64,128", help="span-length buckets (upper bounds, tokens)")
    parser.add_argument("--limit", type=int, default=12, help="items per bucket")
    parser.add_argument("--context", type=int, default=512, help="context tokens around the span")
    parser.add_argument("--methods", default="naive,exact,default,ar", help="also default@FIELD=VALUE/...: the default with changed settings, e.g. default@threshold=0.7/block_size=16")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"held-out data not found: {args.data} (the shared HumanEval-Infilling files beside the checkout; or --data FILE)")
    if args.threads:
        torch.set_num_threads(args.threads)

    from sharpen.core import canvas as canvas_mod
    from sharpen.core import engine
    from sharpen.core.models.loading import load_denoiser
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    engine.Span = Span
    denoiser = load_denoiser(args.model, device=args.device)
    name = denoiser.spec.name
    cfg = denoiser.model.cfg
    params = sum(p.numel() for p in denoiser.model.parameters()) / 1e6
    print(f"# {name}: {params:.1f}M params, dim {cfg.dim}, {cfg.n_layers} layers, vocab {cfg.vocab_size}, {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"# held-out set: {args.data.name}, oracle span length (every method fills every slot), context {args.context} tokens\n")
    header = "| model | span len | method | policy / schedule / cache | tokens/s | steps | wall s | token acc | exact match | parses | same as exact |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    describe = {
        "naive": "confidence / 1 per step / none (full logits)",
        "exact": "confidence / 1 per step / none",
        "cfg": "confidence / 1 per step / none, cfg_scale 1 (two passes a step)",
        "default": describe_settings(Sampling()),
        "ar": "causal LM, greedy, KV cache (generate)",
        "ar-loop": "causal LM, greedy, KV cache (bare forward loop)",
    }
    lo = 0
    summary, per_step = {}, {}
    for hi in (int(v) for v in args.lengths.split(",")):
        items = load_items(args.data, denoiser.tokenizer, lo, hi, args.limit)
        lo = hi
        if not items:
            continue
        context = min(args.context, denoiser.max_len - hi)
        mean_len = statistics.mean(len(denoiser.tokenizer.encode(it.middle)) for it in items)
        results = run_methods(args.methods.split(","), denoiser, items, context, Sampling, engine, canvas_mod)
        for method, row in results.items():
            rate = row["tokens"] / row["wall"]
            described = describe.get(method) or describe_settings(method_settings(method, Sampling), _per_step(method))
            summary[(hi, method)] = rate, row["em"]
            per_step[(hi, method)] = row["wall"] / max(row["steps"], 1)
            acc, em, parse, agree = ("n/a" if row[k] is None else f"{100 * row[k]:.1f}%" for k in ("acc", "em", "parse", "agree"))
            print(f"| {name} | {mean_len:.0f} (<= {hi}, n={len(items)}) | {method} | {described} | {rate:.1f} | {row['steps']} | {row['wall']:.2f} | {acc} | {em} | {parse} | {agree} |")
            sys.stdout.flush()
    print()
    for hi in (int(v) for v in args.lengths.split(",")):
        if (hi, "default") in summary:
            d = summary[(hi, "default")][0]
            ratios = [f"vs {m}: {d / summary[(hi, m)][0]:.1f}x" for m in ("naive", "ar", "ar-loop") if (hi, m) in summary]
            em = summary[(hi, "default")][1]
            ratios += [f"exact match {100 * (em - summary[(hi, m)][1]):+.1f} points vs {m}" for m in ("naive", "exact") if (hi, m) in summary]
            print(f"# span <= {hi}: default {d:.1f} tok/s, " + ", ".join(ratios))
        if (hi, "cfg") in per_step and (hi, "exact") in per_step:
            guided, plain = per_step[(hi, "cfg")], per_step[(hi, "exact")]
            print(f"# span <= {hi}: a guided step (cfg) {1000 * guided:.2f} ms, an exact step {1000 * plain:.2f} ms: {guided / plain:.2f}x per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
