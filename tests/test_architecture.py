"""The shape of the code: imports run one way (app -> core -> kernels) and never in a circle.

Every import counts, function-level ones included: a function-level import may defer a
heavy third-party package, never hide a cycle between our own modules. The graph is read
from the source with `ast`, nothing is imported.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"app": "sharpen.app", "core": "sharpen.core", "kernels": "sharpen.kernels"}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of app/, core/ and kernels/."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Our modules that `name` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:  # `from pkg import module`
                    found.add(sub)
                elif base in known:  # `from module import name`
                    found.add(base)
    # `from . import module` is an edge to that module only (Python initialises the package
    # first anyway); `from . import Name` needs the package's own code: an edge to it.
    return found - {name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_imports_run_one_way():
    layer = {"sharpen.app": 2, "sharpen.core": 1, "sharpen.kernels": 0}
    rank = lambda m: next(r for p, r in layer.items() if m.startswith(p))  # noqa: E731
    upward = [(a, b) for a, targets in graph().items() for b in targets if rank(b) > rank(a)]
    assert upward == []


def test_core_imports_no_ui():
    for name, path in modules().items():
        if name.startswith(("sharpen.core", "sharpen.kernels")):
            roots = {n.names[0].name.split(".")[0] for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import)}
            roots |= {(n.module or "").split(".")[0] for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and not n.level}
            assert not roots & {"textual", "rich"}, name


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_denoiser_provides_the_declared_interface(tiny_denoiser, tmp_path):
    """The sampler reads models through DenoiserLike only; each kind provides all of it, no proxy."""
    import inspect

    from sharpen.core.candidates import ExactRows
    from sharpen.core.canvas import build_canvas
    from sharpen.core.models.denoiser import DenoiserLike
    from sharpen.core.models.remote_code import RemoteDenoiser
    from sharpen.core.spans import Span

    canvas = build_canvas("ab cd", [Span(2, 2, max_tokens=3)], tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id, 64, tiny_denoiser.max_len)
    rows = ExactRows(tiny_denoiser, canvas.__class__(**{**canvas.__dict__, "rows": (canvas.ids,)}), 1)
    assert isinstance(tiny_denoiser, DenoiserLike) and isinstance(rows, DenoiserLike)
    members = [name for name, _ in inspect.getmembers(DenoiserLike) if not name.startswith("_")] + ["spec", "tokenizer", "supports_cache"]
    for kind in (type(tiny_denoiser), ExactRows, RemoteDenoiser):
        assert not hasattr(kind, "__getattr__"), kind
        assert all(hasattr(kind, m) or m in ("spec", "tokenizer", "max_len") for m in members), kind  # those three: set in __init__
    assert rows.max_len == tiny_denoiser.max_len and rows.source_positions([3]) == tiny_denoiser.source_positions([3])


def test_the_editor_module_does_not_import_torch():
    """The first screen paints before torch loads (the model loads in a worker)."""
    import subprocess
    import sys

    code = "import sys, sharpen.app.tui.editor_app; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_core_loads_a_model_by_itself():
    """The load policy lives in core (core/models/load.py): a bench, a test or a worker process
    loads a model, with its notes, without importing anything from app/."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from sharpen.core.models.load import load_model\n"
            "from sharpen.core.settings import ModelRequest\n"
            "notes = []\n"
            "denoiser = load_model(ModelRequest(compile='off'), notes=notes.append)\n"
            "assert denoiser.spec.loop == 'masked', denoiser.spec\n"
            "leaked = sorted(m for m in sys.modules if m.startswith('sharpen.app'))\n"
            "assert not leaked, leaked\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_event_vocabulary_and_results_import_no_torch():
    """A remote client reads events and results (core/events.py, core/result.py) without a model."""
    import subprocess
    import sys

    code = "import sys, sharpen.core.events, sharpen.core.result; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
