"""What a newcomer meets around the editor: the README's set-up and model table, `sharpen doctor`'s
names, the palette entries docs/editor.md names, and the line `sharpen serve` ends with.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pilot import make_app

from sharpen.app.tui.palette import PALETTE

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def set_up_section() -> str:
    return README[README.index("## Set-up"):README.index("**The editor** on the same example")]


def test_the_cpu_torch_choice_comes_before_any_command_and_each_machine_needs_two():
    section = set_up_section()
    blocks = [m.start() for m in re.finditer(r"```sh\n", section)]
    assert section.index("without a GPU") < blocks[0]  # the choice is read before any command is run
    commands = re.findall(r"```sh\n(.*?)\n```", section, re.S)
    cpu = [c for c in commands if CPU_INDEX in c]
    gpu = [c for c in commands if CPU_INDEX not in c]
    assert len(cpu) == len(gpu) == 2  # two commands on either machine, nothing to run before them
    for pair in (cpu, gpu):
        assert all("torch==2.13.0" in c for c in pair)
        assert "--apply-edit" in pair[0] and "pytest" in pair[1]


def normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def test_each_model_row_names_first_the_model_its_command_runs():
    table = README[README.index("## Models"):]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "--model " in line]
    assert len(rows) >= 8
    for machine, use, command in rows:
        repo = re.search(r"--model (\S+)", command).group(1)
        assert normalized(use).startswith(normalized(repo.split("/")[1])), (machine, use, repo)


def test_doctor_names_the_releases_by_hub_id(capsys):
    from sharpen.app.subcommands import doctor
    from sharpen.core.models.memory_fit import KNOWN_RELEASES

    doctor([])
    table = capsys.readouterr().out.split("memory at", 1)[1]
    first_words = {line.split()[0] for line in table.splitlines()[2:] if line.strip()}
    for repo, _ in KNOWN_RELEASES.values():  # as `sharpen download` takes it: owner/name
        assert repo in first_words, repo


async def test_every_palette_entry_docs_editor_names_is_in_the_palette():
    docs = (ROOT / "docs" / "editor.md").read_text(encoding="utf-8")
    listed = " ".join(docs[docs.index("The command palette (Ctrl+P) lists"):].split("\n\n")[0].split())
    ours, textuals = listed.split(": ", 1)[1].split("; Textual adds its own (")
    theirs = textuals.split(")")[0]
    app = make_app([])
    async with app.run_test():
        system = {command.title for command in app.get_system_commands(app.screen)}
    titles = {command.title for command in PALETTE}
    assert [name for name in ours.split(", ") if name not in titles] == []
    assert [name for name in theirs.split(", ") if name != "..." and name not in system] == []
    # Every other palette entry the docs name in parentheses ("the palette (its Theme entry") is one.
    for name in re.findall(r"palette \(its (\w[\w ]*) entry", docs) + re.findall(r"palette: ([A-Z][\w ]+)[;)]", docs):
        assert name in titles | system, name


def test_a_stopped_server_says_stopped_not_nothing_written(tiny_model_dir):
    process = subprocess.Popen([sys.executable, "-c", "import sys; from sharpen.app.start import main; sys.exit(main())",
                                "serve", "--port", "0", "--model", str(tiny_model_dir)], stderr=subprocess.PIPE, text=True)
    try:
        seen, deadline = "", time.monotonic() + 120
        while "listening on" not in seen and time.monotonic() < deadline and process.poll() is None:
            seen += process.stderr.readline()
        assert "listening on" in seen, seen
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=60)[1]
    finally:
        process.kill()
    assert process.returncode == 130 and rest.rstrip().endswith("sharpen serve: stopped"), rest
    assert "nothing was written" not in rest
