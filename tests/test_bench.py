"""bench/speed.py's measuring loop on the tiny model: every method fills every slot, rows add up."""
import json
import re
import shutil

import pytest
import speed  # bench/speed.py (pytest's pythonpath)

from sharpen.core import canvas as canvas_mod  # noqa: E402
from sharpen.core import engine  # noqa: E402
from sharpen.core.settings import Sampling  # noqa: E402
from sharpen.core.spans import Span  # noqa: E402

ITEMS = [
    speed.Item("def add(a, b):\n    ", "return a + b", "\n\n\nprint(add(1, 2))\n"),
    speed.Item("class Point:\n    x = 1\n", "    y = 2\n    z = 3\n", "\nprint(Point.x)\n"),
]


@pytest.fixture(autouse=True)
def _span_class(monkeypatch):
    monkeypatch.setattr(engine, "Span", Span, raising=False)  # main() sets it the same way


def test_every_method_decodes_every_slot_and_rows_add_up(tiny_denoiser):
    methods = ["naive", "exact", "default", "default@block_size=2/refresh=block", "default@per_step=2", "ar", "ar-loop"]
    rows = speed.run_methods(methods, tiny_denoiser, ITEMS, 64, Sampling, engine, canvas_mod)
    tokens = sum(len(tiny_denoiser.tokenizer.encode(it.middle)) for it in ITEMS)
    assert list(rows) == methods
    for method, row in rows.items():
        assert row["tokens"] == tokens and row["wall"] > 0
        if method.startswith("ar"):
            assert row["acc"] is None and row["steps"] == tokens
        else:
            assert 0.0 <= row["acc"] <= 1.0 and 0.0 <= row["em"] <= 1.0 and 0.0 <= row["parse"] <= 1.0
    assert rows["naive"]["steps"] == rows["exact"]["steps"] == tokens  # one commit per step
    assert rows["exact"]["agree"] == 1.0 and 0.0 <= rows["default"]["agree"] <= 1.0 and rows["ar"]["agree"] is None
    assert rows["default@per_step=2"]["steps"] <= (tokens + len(ITEMS)) // 2 + len(ITEMS)


def test_method_settings_parse_changes_and_reject_unknown_fields():
    settings = speed.method_settings("default@block_size=8/refresh=block/threshold=0.5", Sampling)
    assert (settings.block_size, settings.refresh, settings.threshold) == (8, "block", 0.5)
    assert speed.method_settings("exact", Sampling).cache == "none"
    with pytest.raises(KeyError):
        speed.method_settings("default@no_such_field=1", Sampling)


def test_parse_check_tells_broken_programs_apart():
    assert speed.parses("def f():\n    return 1\n")
    assert not speed.parses("def f(:\n    return return\n")


def test_synthetic_bench_compares_naive_schedules_and_ar(capsys):
    import synthetic

    assert synthetic.main(["--device", "cpu", "--shapes", "tiny", "--span", "16", "--context", "16", "--per-step", "1,4", "--repeats", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| tiny |")]
    assert [r.split(" | ")[2] for r in rows] == ["naive", "sharpen", "sharpen", "sharpen", "sharpen", "ar"]
    steps = [int(r.split(" | ")[7]) for r in rows]
    assert steps == [16, 16, 16, 4, 4, 16]  # one token per step, then four
    assert "# tiny, dual cache, 4 per step:" in out and "vs naive" in out and "vs ar" in out


def test_missing_held_out_data_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        speed.main(["--data", str(tmp_path / "missing.jsonl.gz"), "--limit", "1"])
    assert stop.value.code == 2
    assert "held-out data not found" in capsys.readouterr().err


def test_naive_loop_never_writes_the_mask_of_a_tied_random_model(monkeypatch):
    import synthetic
    import torch

    # Random weights with a tied head score a masked position's own token (the mask) highest.
    tied = dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, tie_embeddings=True, max_seq_len=256)
    monkeypatch.setitem(synthetic.SHAPES, "tied", tied)
    denoiser = synthetic.build("tied", "cpu", torch.float32)
    canvas = synthetic.make_canvas(denoiser, 16, 8)
    out, steps = speed.naive_loop(denoiser, torch.tensor(canvas.ids), canvas.slots[0])
    assert steps == 8 and denoiser.spec.mask_id not in out.tolist()


def test_compiled_runs_compile_the_autoregressive_baseline_too():
    import synthetic
    import torch

    assert synthetic.ar_options("off", torch.device("cpu")) == {}
    options = synthetic.ar_options("reduce-overhead", torch.device("cpu"))
    assert options["cache_implementation"] == "static"  # what transformers compiles generate over
    assert options["compile_config"].mode == "reduce-overhead" and options["compile_config"]._compile_all_devices


def test_quantize_bench_prints_a_row_per_precision(capsys):
    import quantize

    assert quantize.main(["--shapes", "tiny", "--span", "8", "--context", "8", "--repeats", "0"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny")]
    assert [r.split("|")[2].strip() for r in rows] == ["float32", "bfloat16", "int8"]
    assert rows[0].split("|")[4].strip() == "0.0000"  # float32 against itself


def test_threads_bench_prints_a_row_per_thread_count(capsys):
    import threads

    assert threads.main(["--shapes", "embedded", "--repeats", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| embedded")]
    assert [r.split("|")[2].strip() for r in rows][0] == "1" and len(rows) >= 1


def test_cpu_threads_default_follows_model_size_and_front_end():
    from sharpen.core.models.load import SMALL_MODEL, cpu_threads
    from sharpen.core.settings import ModelRequest

    assert cpu_threads(ModelRequest(), SMALL_MODEL - 1, editor=False) == 1
    assert cpu_threads(ModelRequest(threads=3), 10, editor=True) == 3
    import os

    cores = len(os.sched_getaffinity(0))
    assert cpu_threads(ModelRequest(), SMALL_MODEL * 10, editor=False) == cores
    assert cpu_threads(ModelRequest(), SMALL_MODEL * 10, editor=True) == max(1, cores - 1)


def test_synthetic_bench_runs_diffusion_gemma_beside_transformers_generate(capsys, monkeypatch):
    pytest.importorskip("transformers.models.diffusion_gemma")
    import synthetic

    # The bench's path at a quarter of "small"'s width (its layer pattern and the release's 48 steps kept): a smoke test
    small = synthetic.GEMMA_SHAPES["diffusiongemma-small"]
    monkeypatch.setitem(synthetic.GEMMA_SHAPES, "diffusiongemma-small", {**small, "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
                                                                          "head_dim": 16, "global_head_dim": 16, "moe_intermediate_size": 32})
    assert synthetic.main(["--device", "cpu", "--shapes", "diffusiongemma-small", "--context", "8", "--repeats", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| diffusiongemma-small")]
    assert [r.split("|")[3].strip() for r in rows] == ["sharpen (renoise loop)", "transformers generate"]
    assert {r.split("|")[8].strip() for r in rows} == {"48"}  # the same decoder passes in both: one per step


@pytest.mark.skipif(shutil.which("tmux") is None, reason="bench/typing_screen.py drives the editor through tmux")
def test_typing_screen_bench_times_keys_reaching_the_screen(capsys):
    import typing_screen

    assert typing_screen.main(["--lines", "200", "--keys", "2", "--settle", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| sharpen |")]
    assert len(rows) == 1 and float(rows[0].split("|")[3]) > 0


SERVE_COLUMNS = ["kind", "model", "clients", "mode", "requests", "tok/s", "x one at a time", "p50 s", "p90 s", "draft p50 s", "draft p90 s",
                 "runs/pass", "alone", "mix"]


def _markdown_rows(out: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[1:]


def test_every_serve_round_sends_the_same_mix_of_requests():
    import collections

    import serve  # bench/serve.py

    mix = serve.jobs(3, 8, 160)
    assert mix == serve.jobs(3, 8, 160)  # a fixed list: the same bodies, seeds included, every time
    for clients in (1, 2, 4, 8):
        sent = [body for client in serve.schedule(mix, clients) for body in client]
        counts = collections.Counter(json.dumps(b, sort_keys=True) for b in sent)
        assert counts == collections.Counter({json.dumps(b, sort_keys=True): clients for b in mix})
        assert serve.fingerprint(sent, clients) == serve.fingerprint(mix, 1)
    firsts = [client[0] for client in serve.schedule(mix, 3)]
    assert len({json.dumps(b) for b in firsts}) == 3  # clients at once start at different places of the mix


def test_serve_bench_quick_prints_each_kind_batched_and_one_at_a_time(capsys):
    import serve  # bench/serve.py: live server processes, the small models

    assert serve.main(["--quick"]) == 0
    header, rows = _markdown_rows(capsys.readouterr().out)
    assert header == SERVE_COLUMNS
    expected = [[kind, "small", str(c), mode, str(2 * c)] for kind in ("masked", "block-causal", "moe")
                for mode in ("batch 8", "batch 1") for c in (1, 2)]
    assert [r[:5] for r in rows] == expected
    assert len({r[-1] for r in rows}) == 1  # every round of every server sent the same mix per client
    for r in rows:
        p50, p90, draft50, draft90 = map(float, r[7:11])
        assert float(r[5]) > 0 and 0 < p50 <= p90 and 0 < draft50 <= draft90 and draft50 <= p90
        if r[3] == "batch 1":  # batching off: the reference, and no passes packed
            assert r[6] == "1.00" and r[11] == r[12] == "-"
        elif r[2] == "1":  # one client: every pass alone
            assert r[11] == "1.00" and r[12] in ("100%", ">= 100%")
        else:  # counted, or the bound the totals give (a /metrics without the histogram)
            assert float(r[11]) >= 1.0 and re.fullmatch(r"(>= )?\d+%", r[12])


@pytest.mark.parametrize("histogram", [False, True])
def test_serve_bench_reads_passes_alone_from_metrics_where_counted(histogram):
    import http.server
    import threading

    import serve

    text = "sharpen_runs_waiting 0\nsharpen_packed_passes_total 10\nsharpen_packed_pass_runs_total 25\n"
    if histogram:
        text += 'sharpen_pass_runs_bucket{le="1"} 3\nsharpen_pass_runs_bucket{le="2"} 6\n'

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert serve.packing(server.server_address[1]) == (10, 25, 3 if histogram else None)
    finally:
        server.shutdown()


def test_serve_bench_spreads_clients_over_batched_processes(capsys):
    import serve

    assert serve.main(["--quick", "--kinds", "masked", "--clients", "2", "--batch", "8x2,1"]) == 0
    _, rows = _markdown_rows(capsys.readouterr().out)
    assert [r[:5] for r in rows] == [["masked", "small", "2", "batch 8x2", "4"], ["masked", "small", "2", "batch 1", "4"]]
    assert float(rows[0][11]) >= 1.0  # runs per pass summed over both processes' /metrics


def test_batch_breakdown_splits_each_requests_wall_time_into_passes_waiting_and_host(capsys):
    import batch_breakdown

    assert batch_breakdown.main(["--requests", "2", "--repeats", "1", "--clients", "1,2", "--threads", "1,2", "--max-tokens", "8"]) == 0
    out = capsys.readouterr().out
    tables = out.split("share of wall time")
    _, costs = _markdown_rows(tables[0])
    _, shares = _markdown_rows(tables[1])
    assert [r[:2] for r in costs] == [["1", "1"], ["1", "2"], ["2", "1"], ["2", "2"]]
    for r in costs:
        wall, passes, wait, host = map(float, r[4:8])
        assert passes > 0 and wait >= 0 and host > 0 and abs(wall - passes - wait - host) < 0.2  # the parts add up
        assert ("canvas x1" if r[1] == "1" else "canvas x") in r[9]  # (r[1]: clients) two clients' canvases may share a pack
    assert costs[0][3] == costs[2][3] == "1.00" and "x2" not in costs[0][9]  # one client: every pass alone
    for r in shares:  # the shares of wall time add up to the whole
        assert abs(sum(float(x.rstrip("%")) for x in r[2:]) - 100) <= 3
