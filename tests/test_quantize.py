"""core/models/quantize.py: int8 / int4 linears on PyTorch's own kernels, quantized as the weights are read."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from checkpoints import write_tiny_sharpen
from sharpen.core.errors import UsageError
from sharpen.core.models.loading import load_denoiser
from sharpen.core.models.quantize import Int4Linear, Int8Linear, QuantizedLinear, check_quantization, int8_needs_compile, quantize_backbone


def _dequantized_int8(q: Int8Linear) -> torch.Tensor:
    return q.weight.float() * q.scale.float()[:, None]  # [N, K]


def _dequantized_int4(w: torch.Tensor, group: int = 128) -> torch.Tensor:
    """The tinygemm convention written out: per group of `group` inputs, 16 levels from the
    group's minimum to its maximum, w = (q - 8) * scale + zero with zero the value of code 8."""
    N, K = w.shape
    g = w.view(N, K // group, group)
    low, high = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-6)
    q = torch.round((g - low) / scale).clamp(0, 15)
    return ((q - 8) * scale + (low + 8 * scale)).view(N, K)


def test_int8_and_int4_linears_compute_the_dequantized_matmul():
    torch.manual_seed(0)
    lin = nn.Linear(256, 96, bias=True)
    x = torch.randn(2, 7, 256)
    q8, q4 = quantize_backbone(nn.Sequential(lin), "int8")[0], None
    lin4 = nn.Linear(256, 96, bias=True)
    want4 = x @ _dequantized_int4(lin4.weight.detach()).t() + lin4.bias.detach()
    q4 = quantize_backbone(nn.Sequential(lin4), "int4")[0]
    assert isinstance(q8, Int8Linear) and isinstance(q4, Int4Linear)
    assert q8.weight.dtype == torch.int8 and q4.weight.dtype == torch.uint8 and q4.weight.shape == (96, 128)  # two codes a byte
    long = torch.randn(3, 20, 256)  # 60 rows: past CPU_KERNEL_ROWS, int8 dequantizes and runs a float32 matmul
    with torch.no_grad():
        # The CPU kernels take bfloat16 activations and scales (their float32 path is slow): bfloat16's rounding
        torch.testing.assert_close(q8(x), x @ _dequantized_int8(q8).t() + q8.bias, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(q8(long), long @ _dequantized_int8(q8).t() + q8.bias, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(q4(x), want4, rtol=2e-2, atol=2e-2)
        # and both stay near the float layer they replace
        assert (q8(x) - lin(x)).abs().max() < 0.02 * lin(x).abs().max()
        assert q8(x).dtype == q4(x).dtype == torch.float32


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_building_in_row_chunks_equals_building_whole(kind):
    """The loader quantizes a few rows at a time: the result must not depend on the chunking."""
    torch.manual_seed(1)
    w = torch.randn(208, 256).to(torch.bfloat16)  # 208 rows: three blocks of 64 and a tail of 16
    make = (lambda: Int8Linear(256, 208)) if kind == "int8" else (lambda: Int4Linear(256, 208, kernel="cpu"))
    whole, chunked = make(), make()
    whole.fill_rows(0, 208, w.float())
    for start, stop in ((0, 64), (64, 192), (192, 208)):
        chunked.fill_rows(start, stop, w[start:stop])  # the shard's own dtype in: converted inside
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), chunked.state_dict().values()))
    if kind == "int4":
        with pytest.raises(ValueError, match="blocks of 64"):
            chunked.fill_rows(10, 74, w[10:74])


@pytest.fixture(scope="module")
def dim128(tmp_path_factory):
    # int4 groups 128 inputs: a model whose linears all take whole groups
    return write_tiny_sharpen(tmp_path_factory.mktemp("q") / "dim128", dim=128, ffn_hidden=256, n_heads=4, n_kv_heads=2)


def _linears(model):
    return [m for m in model.modules() if isinstance(m, (nn.Linear, QuantizedLinear))]


@pytest.mark.parametrize("kind,bound", [("int8", 0.02), ("int4", 0.25)])
def test_quantized_checkpoint_logits_stay_close_to_float(dim128, kind, bound):
    full, quantized = load_denoiser(dim128), load_denoiser(dim128, quantize=kind)
    assert all(isinstance(m, Int8Linear if kind == "int8" else Int4Linear) for m in _linears(quantized.model.layers))
    head = quantized.model.output  # int4 packs whole 16-row groups: a vocabulary of another size keeps a float head
    assert isinstance(head, Int8Linear) if kind == "int8" else isinstance(head, Int4Linear) == (head.out_features % 16 == 0)
    assert quantized.model.embed.weight.dtype == torch.float32  # the embedding is not quantized
    ids = torch.randint(3, 300, (2, 24))
    ref, got = full.logits(ids), quantized.logits(ids)
    assert (ref - got).abs().max() < bound * ref.abs().max()
    assert (ref.argmax(-1) == got.argmax(-1)).float().mean() > (0.9 if kind == "int8" else 0.6)


@pytest.mark.parametrize("tied", [False, True])
def test_int4_skips_linears_whose_shape_the_kernels_do_not_take(tiny_model_dir, tmp_path, tied):
    path = write_tiny_sharpen(tmp_path / "tied", tie_embeddings=True) if tied else tiny_model_dir
    den = load_denoiser(path, quantize="int4")  # dim 64: no whole group of 128 inputs anywhere
    model = den.model
    assert all(type(m) is nn.Linear and m.weight.dtype == torch.float32 and not m.weight.is_meta for m in _linears(model))
    if tied:  # a float head stays tied to the embedding
        assert model.output.weight is model.embed.weight
    ids = torch.randint(3, 300, (1, 10))
    # Nothing quantized: the float model's function. Not bit for bit: the float load lays a tied head
    # out input-major (Transformer.pack) and this one keeps the embedding's layout, and with two MKL
    # threads the two matmuls round differently (equal on one thread; 8e-6 apart on two).
    torch.testing.assert_close(den.logits(ids), load_denoiser(path).logits(ids), rtol=1e-5, atol=1e-5)


def test_quantized_with_a_device_map_is_quantized_and_offloads(dim128):
    """Quantization is honoured with a device map: the same int8 model, parts on disk."""
    one = load_denoiser(dim128, quantize="int8")
    device_map = {"embed": "cpu", "layers.0": "cpu", "layers.1": "disk", "norm": "cpu", "output": "cpu"}
    placed = load_denoiser(dim128, device_map=device_map, quantize="int8")
    assert isinstance(placed.model.layers[0].attn.wq, Int8Linear) and isinstance(placed.model.output, Int8Linear)
    assert placed.model.layers[1].attn.wq.weight.device.type == "meta"  # on disk, streamed in by accelerate's hooks
    ids = torch.randint(3, 300, (1, 16))
    assert torch.equal(placed.logits(ids), one.logits(ids))


def test_placement_sizes_the_quantized_model(dim128):
    from sharpen.core.models.loading import model_config, read_config
    from sharpen.core.models.placement import fits_one_device, plan
    from sharpen.core.models.quantize import weight_bytes

    _, cfg = model_config(dim128, read_config(dim128))
    full, int8 = plan(cfg, torch.float32, {"cpu": 2**30}), plan(cfg, torch.float32, {"cpu": 2**30}, "int8")
    loaded = load_denoiser(dim128, quantize="int8").model
    assert int8.sizes[""] == weight_bytes(loaded)  # what placement sizes is what the loader builds
    assert int8.sizes[""] < 0.5 * full.sizes[""]
    assert fits_one_device(cfg, torch.float32, int(1.3 * int8.sizes[""]), quantize="int8")
    assert not fits_one_device(cfg, torch.float32, int(1.3 * int8.sizes[""]))


def test_the_cli_with_int8_and_a_device_map_loads_int8(dim128):
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    den = load_model(ModelRequest(model=str(dim128), quantize="int8", device_map="auto"))
    assert den.model.layer_devices is not None  # dispatched by accelerate
    assert isinstance(den.model.layers[0].ffn.w1, Int8Linear)


def _cli(*args, prelude=""):
    code = f"import sys; {prelude}from sharpen.app.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def test_int4_runs_on_the_cpu(tmp_path, dim128):
    target = tmp_path / "f.py"
    target.write_text("def add(a, b):\n    return a + b\n")
    proc = _cli(str(target), "--apply-edit", "2:12-2:17", "--model", str(dim128), "--quantize", "int4", "--device", "cpu", "--steps", "2")
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("def add(a, b):\n    return ")


def test_int4_on_a_gpu_older_than_ampere_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(UsageError, match=r"needs an Ampere or newer GPU \(sm80\+\).*Tesla T4 is older: use --quantize int8"):
        check_quantization("int4", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    check_quantization("int4", torch.device("cuda"))  # an H100 passes
    with pytest.raises(UsageError, match="unknown quantization 'int3'"):
        check_quantization("int3", torch.device("cpu"))


def test_an_import_error_while_loading_is_one_line_exit_4(tmp_path, tiny_model_dir):
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    # accelerate made unimportable: --device-map needs it
    proc = _cli(str(target), "--apply-edit", "1:5-1:5", "--model", str(tiny_model_dir), "--device-map", "auto",
                prelude="sys.modules['accelerate'] = None; ")
    assert proc.returncode == 4 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("sharpen: cannot load the model: accelerate does not import")
    assert target.read_text() == "x = 1\n"


def test_int8_on_cuda_without_compile_says_so():
    assert "--compile" in int8_needs_compile("int8", torch.device("cuda"), "off")
    assert int8_needs_compile("int8", "cuda:0", "default") is None
    assert int8_needs_compile("int8", "cpu", "off") is None and int8_needs_compile("int4", "cuda", "off") is None


def test_experts_int4_on_the_cpu_is_one_line():
    from sharpen.core.models.quantize import quantize_experts_model

    with pytest.raises(UsageError, match="int4 for DiffusionGemma needs a CUDA GPU") as err:
        quantize_experts_model(nn.Sequential(nn.Linear(4, 4)), "int4")
    assert err.value.exit_code == 2


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantized_linears_compile_whole(kind):
    """int8 on CUDA relies on torch.compile to fuse its dequantization: the layers must trace as
    one graph (checked here through aot_eager, which runs everywhere)."""
    import torch._dynamo

    torch.manual_seed(0)
    m = quantize_backbone(nn.Sequential(nn.Linear(256, 128, bias=True), nn.SiLU(), nn.Linear(128, 256)), kind)
    x = torch.randn(2, 8, 256)
    explained = torch._dynamo.explain(m)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="aot_eager", fullgraph=True)(x), m(x))


@pytest.mark.parametrize("name", ["LLaDA-8B-Instruct", "Dream-Coder-v0-Instruct-7B", "Open-dCoder-0.5B"])
def test_the_fit_check_sizes_what_the_loader_builds_on_a_gpu(name):
    """memory_fit's int8/int4 weights (the fit check, `sharpen doctor`) against the bytes the
    loader's quantized layers take for the release's shapes on CUDA (built on the meta device)."""
    from accelerate.utils import compute_module_sizes

    from sharpen.core.models.memory_fit import KNOWN_RELEASES, footprint
    from sharpen.core.models.placement import meta_backbone

    _, cfg = KNOWN_RELEASES[name]
    for kind in ("int8", "int4"):
        built = compute_module_sizes(meta_backbone(cfg, kind, torch.device("cuda")), dtype=torch.bfloat16)[""]
        assert abs(footprint(cfg, kind).weights - built) < 0.01 * built, (kind, footprint(cfg, kind).weights, built)
