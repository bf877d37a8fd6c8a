"""Zed's Zeta 2 and Zeta 2.1 prompts: SeedCoder fill-in-the-middle (suffix first).

Layouts from zed-industries/zed crates/zeta_prompt (seed_coder.rs: V0211SeedCoder, "Zeta 2";
multi_region.rs: V0318SeedMultiRegions, serde alias "Zeta2.1"), and cursortab.nvim's recorded
zeta-2 requests:

    <[fim-suffix]>...text after the window...
    <[fim-prefix]><filename>other.rs          (recently viewed files, then a blank line)
    ...snippet...

    <filename>edit_history                     (the edits as unified diffs, then a blank line)
    --- a/a.rs
    +++ b/a.rs
    @@ ... @@

    <filename>a.rs
    ...text before the window...
    <<<<<<< CURRENT                            (Zeta 2)
    ...window with <|user_cursor|>...
    =======
    <[fim-middle]>

Zeta 2 answers the new window then `>>>>>>> UPDATED\n`. Zed sends it with `"stop": []` and strips
that end marker itself; it has no "no edit" word for this format (zeta_prompt's parse takes any
text as the new window, so a `NO_EDITS` would be written into the buffer), and an empty answer is
"no prediction" to Zed and to cursortab alike: sharpen answers "" when nothing changes (and still
reads a model's `NO_EDITS`).
Zeta 2.1 writes the window as numbered blocks instead, `<|marker_1|>lines<|marker_2|>lines
...<|marker_N|>` (a block boundary at a blank line after 6 lines, or after 16), and answers
`<|marker_i|>block i<|marker_i+1|>block i+1...<|marker_j|><[end▁of▁sentence]>`, every marker of
the span written as zeta_prompt's encoder does (Zed's parser warns on a skipped one); the same
marker twice is "no edit".
"""
from __future__ import annotations

import re

from .common import FormatError, PromptParts, parse_events, window_text, with_newline
from ..request import NextEditRequest, Snippet

FIM_SUFFIX, FIM_PREFIX, FIM_MIDDLE, FILE = "<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>", "<filename>"
CURRENT, SEPARATOR, UPDATED = "<<<<<<< CURRENT\n", "=======\n", ">>>>>>> UPDATED\n"
NO_EDITS = "NO_EDITS\n"
CURSOR = "<|user_cursor|>"
END_OF_SENTENCE = "<[end▁of▁sentence]>"  # Zeta 2.1's end of answer (SeedCoder's own token)
MIN_BLOCK_LINES, MAX_BLOCK_LINES = 6, 16  # V0318's block sizes
NUDGE_LINES = 5
_MARKER = re.compile(r"<\|marker_(\d+)\|>")


def _envelope(request: NextEditRequest, after: str, cursor_section: str) -> str:
    related = "".join(f"{FILE}{s.path}\n{with_newline(s.text)}" for s in request.snippets)
    history = f"{FILE}edit_history\n" + "".join(with_newline(e.unified()) if not e.predicted else
                                                 "// User accepted prediction:\n" + with_newline(e.unified())
                                                 for e in request.history) if request.history else ""
    return (f"{FIM_SUFFIX}{with_newline(after) or chr(10)}{FIM_PREFIX}"
            f"{related}{chr(10) if related else ''}{history}{chr(10) if history else ''}{cursor_section}{FIM_MIDDLE}")


def _read_envelope(prompt: str) -> tuple[str, tuple, tuple, str, str]:
    """(after, snippets, history, cursor file's path, the cursor section's body) of a prompt."""
    if not prompt.startswith(FIM_SUFFIX) or FIM_PREFIX not in prompt or not prompt.endswith(FIM_MIDDLE):
        raise FormatError("not a Zeta prompt: it must read <[fim-suffix]>...<[fim-prefix]>...<[fim-middle]>")
    after, _, prefix = prompt[len(FIM_SUFFIX):-len(FIM_MIDDLE)].partition(FIM_PREFIX)
    blocks = prefix.split(FILE)[1:]
    if not blocks:
        raise FormatError("the Zeta prompt names no file (<filename>path)")
    snippets, history = [], ()
    for block in blocks[:-1]:
        name, _, body = block.partition("\n")
        body = body[:-1] if body.endswith("\n\n") else body  # the blank line after a section
        if name == "edit_history":
            history = parse_events(body)
        else:
            snippets.append(Snippet(name, body))
    path, _, section = blocks[-1].partition("\n")
    return ("" if after == "\n" else after), tuple(snippets), history, path, section


def _cut_cursor(region: str) -> tuple[str, int]:
    if region.count(CURSOR) > 1:
        raise FormatError("the editable region has more than one <|user_cursor|>")
    at = region.find(CURSOR)
    return region.replace(CURSOR, ""), (len(region) if at == -1 else at)


class Zeta2:
    NAME = "zeta2"
    STOP = (UPDATED, UPDATED.rstrip("\n"))

    @staticmethod
    def build(request: NextEditRequest, window=None) -> str:
        before, region, after, cursor = window_text(request, window)
        section = f"{FILE}{request.path}\n{before}{CURRENT}{with_newline(region[:cursor] + CURSOR + region[cursor:])}{SEPARATOR}"
        return _envelope(request, after, section)

    @staticmethod
    def parse_prompt(prompt: str) -> PromptParts:
        after, snippets, history, path, section = _read_envelope(prompt)
        before, found, rest = section.partition(CURRENT)
        if not found or not rest.endswith(SEPARATOR):
            raise FormatError("the Zeta 2 prompt has no <<<<<<< CURRENT ... ======= block")
        region, cursor = _cut_cursor(rest[:-len(SEPARATOR)])
        return PromptParts(Zeta2.NAME, path, region, cursor, before, after, history, snippets)

    @staticmethod
    def render_answer(old: str, new: str, cursor: int | None = None) -> str:
        return "" if new == old else with_newline(new) + UPDATED  # "": no prediction (see the module's note)

    @staticmethod
    def parse_answer(answer: str, old: str) -> str:
        text = answer.split(UPDATED.rstrip("\n"))[0]
        if not text or text.strip().startswith(NO_EDITS.strip()):
            return old
        text, _ = _cut_cursor(text)
        if old.endswith("\n") and text and not text.endswith("\n"):
            text += "\n"
        return text


def marker(n: int) -> str:
    return f"<|marker_{n}|>"


def marker_offsets(text: str, min_lines: int = MIN_BLOCK_LINES, max_lines: int = MAX_BLOCK_LINES) -> list[int]:
    """Where Zeta 2.1 puts its block boundaries in `text`: 0, line starts, len(text). A boundary
    goes at a non-blank line after a blank one once a block has `min_lines`, or after `max_lines`
    (moved up to 5 lines on past closers such as `}` or `return`), as zeta_prompt's multi_region does."""
    if not text:
        return [0, 0]
    lines, offset = [], 0
    for line in text.split("\n"):
        trimmed = line.strip()
        lines.append((offset, not trimmed, bool(trimmed) and not _structural_tail(trimmed)))
        offset += len(line) + 1
    if text.endswith("\n") and len(lines) > 1:
        lines.pop()

    def good_start(i: int) -> int | None:
        return next((k for k in range(i, min(len(lines), i + NUDGE_LINES)) if lines[k][2]), None)

    offsets, last, i = [0], 0, 0
    while i < len(lines):
        gap = i - last
        if gap >= min_lines and not lines[i][1] and i > 0 and lines[i - 1][1]:
            target = i if lines[i][2] else (good_start(i) if good_start(i) is not None else i)
            if len(lines) - target >= min_lines and lines[target][0] > offsets[-1]:
                offsets.append(lines[target][0])
                last, i = target, target + 1
                continue
        if gap >= max_lines:
            target = good_start(i)
            target = i if target is None else target
            if lines[target][0] > offsets[-1]:
                offsets.append(lines[target][0])
                last, i = target, target + 1
                continue
        i += 1
    if offsets[-1] != len(text):
        offsets.append(len(text))
    return offsets


def _common_ends(a: str, b: str) -> tuple[int, int]:
    """(common prefix, common suffix of what the prefix leaves) of two texts."""
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def _map_boundary(at: int, old_len: int, new_len: int, prefix: int, suffix: int) -> int:
    """Where an offset of the old span lands in the new one: unchanged before the change and
    after it, proportionally inside it."""
    if at <= prefix:
        return at
    if at >= old_len - suffix:
        return new_len - (old_len - at)
    old_changed, new_changed = max(0, old_len - prefix - suffix), max(0, new_len - prefix - suffix)
    return prefix if old_changed == 0 else prefix + (at - prefix) * new_changed // old_changed


def _line_start_at(text: str, at: int) -> int:
    """`at` if a line starts there, else the next line's start (the last line's start at the end)."""
    at = min(at, len(text))
    if at >= len(text) or at == 0 or text[at - 1] == "\n":
        return at
    newline = text.find("\n", at)
    return newline + 1 if newline != -1 else text.rfind("\n", 0, at) + 1


def _structural_tail(trimmed: str) -> bool:
    return trimmed[0] in "}])" or trimmed.rstrip(";") in ("break", "continue", "return", "throw", "end")


class Zeta21:
    NAME = "zeta21"
    STOP = (END_OF_SENTENCE,)

    @staticmethod
    def build(request: NextEditRequest, window=None) -> str:
        before, region, after, cursor = window_text(request, window)
        offsets = marker_offsets(region)
        body, placed = [], False
        for i, start in enumerate(offsets):
            body.append(marker(i + 1))
            if i + 1 < len(offsets):
                block = region[start:offsets[i + 1]]
                if not placed and start <= cursor <= offsets[i + 1]:
                    placed, at = True, cursor - start
                    block = block[:at] + CURSOR + block[at:]
                body.append(block)
        section = f"{FILE}{request.path}\n{before}{with_newline(''.join(body))}"
        return _envelope(request, after, section)

    @staticmethod
    def parse_prompt(prompt: str) -> PromptParts:
        after, snippets, history, path, section = _read_envelope(prompt)
        first = _MARKER.search(section)
        if first is None:
            raise FormatError("the Zeta 2.1 prompt has no <|marker_N|> blocks")
        body = section[first.start():].removesuffix("\n")
        region, cursor = _cut_cursor(_MARKER.sub("", body))
        return PromptParts(Zeta21.NAME, path, region, cursor, section[:first.start()], after, history, snippets)

    @staticmethod
    def render_answer(old: str, new: str, cursor: int | None = None) -> str:
        """The smallest run of whole blocks covering the change, every block's marker written, as
        zeta_prompt's V0318 encoder does: the new span is cut where the old boundaries map to,
        snapped to a line start."""
        offsets = marker_offsets(old)
        if new == old:
            at = cursor or 0
            nearest = min(range(len(offsets)), key=lambda k: abs(offsets[k] - at)) + 1
            return marker(nearest) * 2 + END_OF_SENTENCE
        prefix, suffix = _common_ends(old, new)
        start = max(k for k, o in enumerate(offsets) if o <= prefix)
        end = next((k for k, o in enumerate(offsets) if o >= len(old) - suffix), len(offsets) - 1)
        if start == end:  # a change at a boundary still spans a block
            end, start = (end + 1, start) if end < len(offsets) - 1 else (end, start - 1)
        old_span = old[offsets[start]:offsets[end]]
        new_span = new[offsets[start]:len(new) - (len(old) - offsets[end])]
        span_prefix, span_suffix = _common_ends(old_span, new_span)
        out, cut = [], 0
        for block in range(start, end):
            if block + 1 == end:
                stop = len(new_span)
            else:
                mapped = _map_boundary(offsets[block + 1] - offsets[start], len(old_span), len(new_span), span_prefix, span_suffix)
                stop = _line_start_at(new_span, mapped)
            stop = max(stop, cut)
            out.append(marker(block + 1) + new_span[cut:stop])
            cut = stop
        return "".join(out) + marker(end + 1) + END_OF_SENTENCE

    @staticmethod
    def parse_answer(answer: str, old: str) -> str:
        answer = answer.split(END_OF_SENTENCE)[0]
        tags = list(_MARKER.finditer(answer))
        if len(tags) < 2:
            raise FormatError("a Zeta 2.1 answer needs a start and an end <|marker_N|>")
        first, last = int(tags[0].group(1)), int(tags[-1].group(1))
        if first == last:
            return old
        offsets = marker_offsets(old)
        if not 1 <= first < last <= len(offsets):
            raise FormatError(f"the answer's markers {first}..{last} are outside the window's 1..{len(offsets)}")
        content = "".join(answer[a.end():b.start()] for a, b in zip(tags, tags[1:]))
        content, _ = _cut_cursor(content)
        return old[:offsets[first - 1]] + content + old[offsets[last - 1]:]
