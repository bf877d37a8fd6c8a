"""The distribution ships every package of the tree: pyproject.toml lists them by hand (the card's
folders are mapped under one namespace), and core/loops/ once landed without its entry, so an
install from a clean checkout lacked the loops while the editable one here still worked."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_in_the_distribution():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    found = set()
    for name, folder in mapped.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            found.add(".".join([name, *relative.parts]))
    assert found == listed


def test_every_file_of_the_embedded_model_is_package_data():
    """A file core/embedded gains (its chat template once) ships only if a package-data pattern names it."""
    from fnmatch import fnmatch

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["sharpen.core"]
    files = [p.name for p in (ROOT / "core" / "embedded").iterdir() if p.is_file()]
    assert "chat_template.jinja" in files
    assert [f for f in files if not any(fnmatch(f"embedded/{f}", pattern) for pattern in patterns)] == []
