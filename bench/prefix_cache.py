"""A repeated-prefix /infill with and without the prefix cache (core/prefix_cache.py), on a tiny SDAR.

    python bench/prefix_cache.py [--lines 120] [--requests 6] [--tokens 8]

An editor sends the same file prefix again and again with a different cursor line: each round
asks /infill for the same file above the cursor and a new line at its end. Printed: the median
answer time of the requests after the first (which fills the cache), the prompt tokens and the
tokens taken from the cache, and the ratio. A tiny random model, so the prefill is a large share
of an answer's time only for long prompts: --lines sets the prompt's length.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def file_of(lines: int) -> str:
    return "".join(f"def step_{i}(state, value):\n    state[{i}] = value * {i} + len(state)\n" for i in range(lines // 2))


async def rounds(denoiser, prefix: str, requests: int, tokens: int, cache_mb: int) -> tuple[list[float], list[dict]]:
    import httpx

    from sharpen.app.backend import LocalBackend
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Server
    from sharpen.app.serve.common import keep_prefixes
    from sharpen.core import prefix_cache

    backend = LocalBackend.of(denoiser)
    prefix_cache.attach(denoiser, 0)
    keep_prefixes(backend, cache_mb)
    app = build_app(Server(backend, backend.describe()))
    times, answers = [], []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=600) as client:
        for i in range(requests):
            body = {"input_prefix": prefix, "prompt": f"    total_{i} = ", "input_suffix": "\n", "n_predict": tokens, "seed": 1, "cache_prompt": True}
            started = time.perf_counter()
            answer = (await client.post("/infill", json=body)).json()
            times.append(time.perf_counter() - started)
            answers.append(answer)
    prefix_cache.attach(denoiser, 0)
    return times, answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=120)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=8)
    args = parser.parse_args(argv)

    from block_checkpoints import write_sdar
    from sharpen.core.models.loading import load_denoiser

    with tempfile.TemporaryDirectory() as tmp:
        denoiser = load_denoiser(write_sdar(Path(tmp) / "SDAR-8B-Chat-tiny"))
    prefix = file_of(args.lines)
    rows = {}
    for name, mb in (("no cache", 0), ("prefix cache", 256)):
        times, answers = asyncio.run(rounds(denoiser, prefix, args.requests, args.tokens, mb))
        rows[name] = (statistics.median(times[1:]), answers[-1]["tokens_evaluated"], statistics.median(a["tokens_cached"] for a in answers[1:]),
                      [a["content"] for a in answers])
    same = rows["no cache"][3] == rows["prefix cache"][3]
    print(f"repeated-prefix /infill, tiny SDAR (block 4), {args.lines} lines above the cursor, {args.requests} requests, n_predict {args.tokens}")
    print(f"{'':14}{'median s (2nd on)':>19}{'prompt tokens':>15}{'tokens_cached':>15}{'x no cache':>12}")
    base = rows["no cache"][0]
    for name, (seconds, prompt, cached, _) in rows.items():
        print(f"{name:14}{seconds:>19.3f}{prompt:>15}{cached:>15.0f}{base / seconds:>11.2f}x")
    print(f"answers equal with and without the cache: {same}")


if __name__ == "__main__":
    main()
