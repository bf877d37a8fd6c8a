"""Next-edit prompt formats (core/next_edit/formats/): each built byte for byte as its public
examples show it, read back into the same request, and its answers both ways.

The expected prompts are the layouts of cursortab.nvim's recorded requests to Mercury Edit, Zeta 2
and sweep-next-edit-1.5B (its eval scenario "rust-propagate-derive": a derive added to one enum,
the cursor on a sibling enum) and of Zed's crates/zeta_prompt, retyped here.
"""
from __future__ import annotations

import re

import pytest

from sharpen.core.next_edit.formats import FormatError, detect_format, format_of
from sharpen.core.next_edit.formats.zeta import marker_offsets
from sharpen.core.next_edit.history import EditEvent
from sharpen.core.next_edit.request import NextEditRequest, Snippet, Window

PATH = "src/prompt_args.rs"
TEXT = "#[derive(Debug)]\npub enum PromptArgsError {\n    MissingAssignment { token: String },\n    MissingKey { token: String },\n}\n"
CURSOR = TEXT.index(" {\n    Missing")
EVENT = EditEvent(PATH, "@@ -1,2 +1,2 @@\n-#[derive(Debug)]\n-pub enum PromptExpansionError {\n+#[derive(Debug, Serialize)]\n+pub enum PromptExpansionError {\n")
REQUEST = NextEditRequest(PATH, TEXT, CURSOR, (Window(0, len(TEXT)),), (EVENT,))
WINDOW_WITH = {"<|cursor|>": TEXT[:CURSOR] + "<|cursor|>" + TEXT[CURSOR:], "<|user_cursor|>": TEXT[:CURSOR] + "<|user_cursor|>" + TEXT[CURSOR:]}
EXPECTED = TEXT.replace("(Debug)", "(Debug, Serialize)")

MERCURY = (
    "<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>\n\n"
    "<|current_file_content|>\ncurrent_file_path: src/prompt_args.rs\n<|code_to_edit|>\n" + WINDOW_WITH["<|cursor|>"]
    + "<|/code_to_edit|>\n<|/current_file_content|>\n\n"
    "<|edit_diff_history|>\n--- src/prompt_args.rs\n+++ src/prompt_args.rs\n@@ -1,2 +1,2 @@\n-#[derive(Debug)]\n"
    "-pub enum PromptExpansionError {\n+#[derive(Debug, Serialize)]\n+pub enum PromptExpansionError {\n\n<|/edit_diff_history|>\n")
ZETA2 = (
    "<[fim-suffix]>\n<[fim-prefix]><filename>edit_history\n--- a/src/prompt_args.rs\n+++ b/src/prompt_args.rs\n"
    "@@ -1,2 +1,2 @@\n-#[derive(Debug)]\n-pub enum PromptExpansionError {\n+#[derive(Debug, Serialize)]\n"
    "+pub enum PromptExpansionError {\n\n<filename>src/prompt_args.rs\n<<<<<<< CURRENT\n" + WINDOW_WITH["<|user_cursor|>"]
    + "=======\n<[fim-middle]>")
SWEEP = (
    "<|file_sep|>src/prompt_args.rs\n" + TEXT
    + "<|file_sep|>src/prompt_args.rs.diff\noriginal:\n#[derive(Debug)]\npub enum PromptExpansionError {\nupdated:\n"
    "#[derive(Debug, Serialize)]\npub enum PromptExpansionError {\n"
    "<|file_sep|>original/src/prompt_args.rs:1:5\n" + TEXT + "<|file_sep|>current/src/prompt_args.rs:1:5\n" + WINDOW_WITH["<|cursor|>"]
    + "<|file_sep|>updated/src/prompt_args.rs:1:5\n#[derive(Debug)]\n")


@pytest.mark.parametrize(("name", "prompt"), [("mercury", MERCURY), ("zeta2", ZETA2), ("sweep", SWEEP)])
def test_each_format_builds_its_public_example_byte_for_byte_and_reads_it_back(name, prompt):
    fmt = format_of(name)
    assert fmt.build(REQUEST) == prompt
    assert detect_format(prompt) == name
    parts = fmt.parse_prompt(prompt)
    back = parts.request()
    assert (back.path, back.text, back.cursor, back.windows) == (PATH, TEXT, CURSOR, (Window(0, len(TEXT)),))
    if name != "sweep":  # Sweep shows an edit as its two sides: the hunk header is not in the prompt
        assert back.history == (EVENT,)
    else:
        assert back.history[0].sides() == EVENT.sides()


def test_mercury_reads_zeds_layout_too_and_the_snippets_and_greet_example():
    # Zed's mercury.rs writes the sections without the blank lines between them.
    zed = MERCURY.replace("|>\n\n<|", "|>\n<|")
    assert format_of("mercury").parse_prompt(zed).request().text == TEXT
    greet = "function greet(name) {\n  return \"hello\";\n}\n"
    request = NextEditRequest("greet.js", greet, greet.index(";"), (Window(0, len(greet)),), snippets=(Snippet("util.js", "export const x = 1;\n"),))
    prompt = format_of("mercury").build(request)
    assert prompt.startswith("<|recently_viewed_code_snippets|>\n<|recently_viewed_code_snippet|>\ncode_snippet_file_path: util.js\n"
                             "export const x = 1;\n<|/recently_viewed_code_snippet|>\n<|/recently_viewed_code_snippets|>\n")
    assert "current_file_path: greet.js\n<|code_to_edit|>\nfunction greet(name) {\n  return \"hello\"<|cursor|>;\n}\n<|/code_to_edit|>\n" in prompt
    assert format_of("mercury").parse_prompt(prompt).snippets == request.snippets


def test_answers_both_ways_and_no_edit():
    new = EXPECTED
    # Mercury's recorded answer: the window fenced; "None" is no prediction.
    assert format_of("mercury").render_answer(TEXT, new) == "```\n" + new + "```"
    assert format_of("mercury").parse_answer("```\n" + new + "```", TEXT) == new
    assert format_of("mercury").render_answer(TEXT, TEXT) == "None"
    assert format_of("mercury").parse_answer("None", TEXT) == TEXT
    # Zeta 2: the window then >>>>>>> UPDATED (Zed strips it, cursortab's stop cuts it). No edit is
    # the empty answer: Zed would write a NO_EDITS into the buffer (zeta_prompt reads V0211SeedCoder's
    # answer as the window whatever it says); a model's NO_EDITS still reads as no edit.
    assert format_of("zeta2").render_answer(TEXT, new) == new + ">>>>>>> UPDATED\n"
    assert format_of("zeta2").render_answer(TEXT, TEXT) == ""
    assert format_of("zeta2").parse_answer(new, TEXT) == new
    assert format_of("zeta2").parse_answer("", TEXT) == TEXT
    assert format_of("zeta2").parse_answer("NO_EDITS\n>>>>>>> UPDATED\n", TEXT) == TEXT
    assert format_of("zeta2").parse_answer(new.replace("Args", "Args<|user_cursor|>"), TEXT) == new
    # Sweep: the continuation after the prefill (the recorded answer starts at the cursor's line).
    sweep = format_of("sweep")
    answer = sweep.render_answer(TEXT, new.replace("(Debug, Serialize)", "(Debug)"), CURSOR)
    assert answer == TEXT[TEXT.index("pub"):] + "<|file_sep|>"
    assert sweep.parse_answer(answer, TEXT, prefill="#[derive(Debug)]\n") == TEXT


def _long_window() -> str:
    return "".join(f"fn f{i}() {{}}\n" + ("\n" if i % 7 == 6 else "") for i in range(30))


def test_zeta21_numbered_blocks_both_ways():
    region = _long_window()
    offsets = marker_offsets(region)
    assert offsets[0] == 0 and offsets[-1] == len(region) and len(offsets) > 2
    assert all(region[o - 1] == "\n" for o in offsets[1:-1])  # boundaries at line starts only
    request = NextEditRequest("a.rs", region, 5, (Window(0, len(region)),))
    prompt = format_of("zeta21").build(request)
    assert detect_format(prompt) == "zeta21"
    assert prompt.startswith("<[fim-suffix]>\n<[fim-prefix]><filename>a.rs\n<|marker_1|>fn f0<|user_cursor|>() {}\n")
    assert prompt.endswith(f"<|marker_{len(offsets)}|>\n<[fim-middle]>")
    back = format_of("zeta21").parse_prompt(prompt).request()
    assert (back.text, back.cursor) == (region, 5)
    new = region.replace("fn f12()", "fn g12()")
    answer = format_of("zeta21").render_answer(region, new)
    assert answer.startswith("<|marker_2|>") and answer.endswith("<|marker_3|><[end▁of▁sentence]>")
    assert format_of("zeta21").parse_answer(answer, region) == new
    quiet = format_of("zeta21").render_answer(region, region, cursor=5)
    assert quiet == "<|marker_1|><|marker_1|><[end▁of▁sentence]>"
    assert format_of("zeta21").parse_answer(quiet, region) == region


def test_zeds_own_marker_examples():
    # zeta_prompt's multi_region tests: a short text is one block; "aaa\nBBB" replaces the block.
    assert marker_offsets("aaa\nbbb\nccc\n") == [0, 12]
    assert format_of("zeta21").parse_answer("<|marker_1|>aaa\nBBB\nccc\n<|marker_2|>", "aaa\nbbb\nccc\n") == "aaa\nBBB\nccc\n"


def test_native_instruction_both_ways():
    request = NextEditRequest.around(PATH, TEXT, CURSOR, (EVENT,), (Snippet("lib.rs", "mod prompt_args;\n"),))
    native = format_of("native")
    prompt = native.build(request)
    assert prompt.startswith("File: src/prompt_args.rs\nRecent edits:\n--- a/src/prompt_args.rs\n")
    assert "Recently viewed lib.rs:\nmod prompt_args;\n" in prompt and "The cursor is at line 2, column 25.\n" in prompt
    window = request.cursor_window
    parts = native.parse_prompt(prompt, TEXT, (window.start, window.end))
    assert parts.history == (EVENT,) and parts.snippets == request.snippets and parts.request().cursor == CURSOR


@pytest.mark.parametrize("prompt", ["plain text", "<[fim-suffix]>x<[fim-prefix]>y", "<|file_sep|>a.py\nx\n"])
def test_what_is_no_next_edit_prompt_is_detected_as_none_and_refused_by_the_parsers(prompt):
    assert detect_format(prompt) is None
    for name in ("mercury", "zeta2", "zeta21", "sweep"):
        with pytest.raises(FormatError):
            format_of(name).parse_prompt(prompt)


def test_zeta21_a_change_at_a_block_boundary_still_spans_a_block():
    region = _long_window()
    offsets = marker_offsets(region)
    at = offsets[1]  # an insertion right at the second block's start
    new = region[:at] + "// note\n" + region[at:]  # shares nothing with either side: the change is the boundary itself
    answer = format_of("zeta21").render_answer(region, new)
    numbers = [int(n) for n in re.findall(r"<\|marker_(\d+)\|>", answer)]
    assert numbers[0] < numbers[-1]  # the same marker twice would read as "no edit"
    assert format_of("zeta21").parse_answer(answer, region) == new


def _three_blocks() -> str:
    # Three V0318 blocks: a boundary at the first non-blank line after a blank one, 6 lines on.
    return "".join(f"{c}{i} = {i}\n" for c in "lmn" for i in range(8)).replace("l7 = 7\n", "\n").replace("m7 = 7\n", "\n")


def test_zeta21_answer_writes_every_marker_of_its_span_as_zeds_encoder_does():
    region = _three_blocks()
    offsets = marker_offsets(region)
    assert len(offsets) == 4 and region[offsets[1]:].startswith("m0") and region[offsets[2]:].startswith("n0")
    # A change in block 1 and in block 2, lengths kept: each block's new text between its own markers.
    new = region.replace("l6 = 6", "l6 = 7").replace("m1 = 1", "m1 = 2")
    block1, block2 = new[:new.index("m0")], new[new.index("m0"):new.index("n0")]
    answer = format_of("zeta21").render_answer(region, new)
    assert answer == f"<|marker_1|>{block1}<|marker_2|>{block2}<|marker_3|><[end▁of▁sentence]>"
    assert format_of("zeta21").parse_answer(answer, region) == new
    # A line added to block 1 and one removed from block 2: the cut still falls on a line start,
    # markers 1, 2, 3 in order, and the answer reads back to the new window.
    grown = region.replace("l3 = 3\n", "l3 = 3\nextra = 1\n").replace("m2 = 2\n", "")
    answer = format_of("zeta21").render_answer(region, grown)
    assert [int(n) for n in re.findall(r"<\|marker_(\d+)\|>", answer)] == [1, 2, 3]
    inner = answer.split("<|marker_2|>")[0].removeprefix("<|marker_1|>")
    assert inner.endswith("\n") and format_of("zeta21").parse_answer(answer, region) == grown


# Zed's own Sweep prompt (crates/edit_prediction/src/sweep_prompt.rs build_prompt): related files,
# the recent changes as .diff blocks, then original/, current/ (no line range, no cursor) and an
# empty updated/ block; the window is 10 lines above and below the cursor's, without its last newline.
ZED_ROWS = [f"line {i}" for i in range(30)]  # a 30-line file, the cursor on row 10
ZED_ORIGINAL = "\n".join(ZED_ROWS[:21])  # rows 0..20
ZED_WINDOW = ZED_ORIGINAL.replace("line 10", "line ten")
ZED_SWEEP = ("<|file_sep|>notes.txt\nsee line 9\n"
             "<|file_sep|>a.txt.diff\noriginal:\nline 10\nupdated:\nline ten\n"
             "<|file_sep|>original/a.txt\n" + ZED_ORIGINAL + "\n"
             "<|file_sep|>current/a.txt\n" + ZED_WINDOW + "\n<|file_sep|>updated/a.txt\n")


def test_sweep_without_a_cursor_marker_puts_the_cursor_at_the_windows_last_line_end():
    parts = format_of("sweep").parse_prompt(SWEEP.replace("<|cursor|>", ""))
    assert parts.window == TEXT and parts.cursor == len(TEXT) - 1


def test_sweep_reads_zeds_layout_as_zed_means_it():
    assert detect_format(ZED_SWEEP) == "sweep"
    parts = format_of("sweep").parse_prompt(ZED_SWEEP)
    assert parts.layout == "zed" and parts.prefill == "" and parts.path == "a.txt"
    assert parts.window == ZED_WINDOW  # the block's last newline is its separator: 10 lines follow the cursor's
    assert parts.cursor == ZED_WINDOW.index("line ten") + len("line ten")  # where the windows differ
    assert parts.snippets == (Snippet("notes.txt", "see line 9\n"),)
    assert parts.history[0].sides() == ("line 10\n", "line ten\n")
    sweep = format_of("sweep")
    new = ZED_WINDOW.replace("line 11", "line eleven")
    assert sweep.render_answer(ZED_WINDOW, new, parts.cursor, prefill="", layout="zed") == new + "<|file_sep|>"
    assert sweep.render_answer(ZED_WINDOW, ZED_WINDOW, parts.cursor, prefill="", layout="zed") == "<|file_sep|>"  # no prediction
    # Near the end of a file that ends with a newline the window keeps it (its last line is the empty one).
    tail = "line 27\nline twenty-eight\nline 29\n"
    end = "<|file_sep|>original/a.txt\nline 27\nline 28\nline 29\n<|file_sep|>current/a.txt\n" + tail + "<|file_sep|>updated/a.txt\n"
    assert format_of("sweep").parse_prompt(end).window == tail
