"""Fuzzing the SPEC parser and the file round trip (read -> edit -> encode) with hypothesis.

tests/test_canvas.py covers splice and the canvas layout on in-memory text; here the text
comes from real files with BOMs and CRLF or mixed endings, and the positions from SPECs.
"""
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sharpen.core.errors import SpanError, UsageError
from sharpen.core.files import encode_text, read_text_file
from sharpen.core.newlines import match_newlines, newline_style
from sharpen.core.changes import ChangeSet
from sharpen.core.spans import Span, validate_spans
from sharpen.app.specs import LineIndex, format_range, parse_edit_list, parse_range, parse_spec

PIECES = st.sampled_from(["a", "b", " ", "\t", "\n", "\r\n", "\r", "é", "東", "😀", "\u2028", "\x0c", "x = 1"])
texts = st.lists(PIECES, max_size=40).map("".join)
SPEC_CHARS = st.sampled_from(list("0123456789:-, @\t\n") + ["١", "-1", "1:1", "99999999999999999"])
specs = st.one_of(st.text(max_size=30), st.lists(SPEC_CHARS, max_size=20).map("".join))
FAST = settings(max_examples=200, deadline=None)


def oracle_points(text: str) -> dict[tuple[int, int], int]:
    """Every valid (line, column) -> offset, by walking the text one character at a time."""
    points, line, column = {}, 1, 1
    for offset, char in enumerate(text):
        if char == "\r" and text[offset + 1:offset + 2] == "\n":
            points[(line, column)] = offset  # the position before the break; the CR is part of it
            continue
        if char == "\n":
            if (line, column) not in points:
                points[(line, column)] = offset
            line, column = line + 1, 1
            continue
        points[(line, column)] = offset
        column += 1
    points[(line, column)] = len(text)
    return points


@given(texts, specs)
@FAST
def test_random_specs_fail_only_with_span_or_usage_errors(text, spec):
    try:
        spans = validate_spans(text, parse_spec(spec, text))
    except (SpanError, UsageError) as exc:
        assert "\n" not in str(exc).replace(repr(spec), "")  # one line, the SPEC itself aside
        return
    assert all(0 <= s.start <= s.end <= len(text) for s in spans)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["range", "mode", "max_tokens", "strength", "instruction", "x"]), inner, max_size=4),
    max_leaves=12,
)


@given(texts, json_values)
@FAST
def test_random_edit_lists_fail_only_with_usage_errors(text, value):
    try:
        spans = validate_spans(text, parse_edit_list(json.dumps(value), text))
    except UsageError:
        return
    assert all(0 <= s.start <= s.end <= len(text) for s in spans)


@given(texts, st.data())
@FAST
def test_valid_points_map_to_the_right_offsets_and_never_split_crlf(text, data):
    index = LineIndex.of(text)
    points = oracle_points(text)
    (l1, c1), (l2, c2) = sorted(data.draw(st.sampled_from(sorted(points))) for _ in range(2))
    start, end = parse_range(f"{l1}:{c1}-{l2}:{c2}", index)
    assert (start, end) == (points[(l1, c1)], points[(l2, c2)])
    for offset in (start, end):
        assert text[offset - 1:offset + 1] != "\r\n" or offset == 0
    # format_range inverts parse_range, and parse_range inverts format_range.
    assert format_range(index, start, end) == f"{l1}:{c1}-{l2}:{c2}"
    assert parse_range(format_range(index, start, end), index) == (start, end)
    # Every position outside the file is refused, just past each line's end and past the last line.
    line_count = len(index.starts)
    for bad in (f"{l1}:{index.lengths[l1 - 1] + 2}-{l1}:{index.lengths[l1 - 1] + 2}", f"{line_count + 1}:1-{line_count + 1}:1"):
        try:
            parse_range(bad, index)
            raise AssertionError(f"{bad} accepted")
        except SpanError:
            pass


@given(texts, st.data())
@FAST
def test_whole_line_specs_cover_content_and_keep_the_break(text, data):
    index = LineIndex.of(text)
    first = data.draw(st.integers(1, len(index.starts)))
    last = data.draw(st.integers(first, len(index.starts)))
    start, end = parse_range(f"{first}-{last}", index)
    assert start == index.starts[first - 1]
    assert end == index.starts[last - 1] + index.lengths[last - 1]
    assert text[end:] == "" or text[end:].startswith(("\n", "\r\n"))  # the line break stays outside


@st.composite
def file_and_edits(draw):
    """A file's bytes (maybe BOM, CRLF or mixed), valid L:C spans on it, and new span texts."""
    bom = draw(st.booleans())
    style = draw(st.sampled_from(["lf", "crlf", "mixed"]))
    text = draw(texts)
    if style == "crlf":
        text = text.replace("\r\n", "\n").replace("\r", "").replace("\n", "\r\n")
    elif style == "lf":
        text = text.replace("\r", "")
    index = LineIndex.of(text)
    points = sorted(oracle_points(text))
    chosen = sorted(set(draw(st.lists(st.sampled_from(points), min_size=2, max_size=6))))
    ranges = [f"{a[0]}:{a[1]}-{b[0]}:{b[1]}" for a, b in zip(chosen[::2], chosen[1::2])]
    assume(ranges)
    new = [draw(texts) for _ in ranges]
    return encode_text(text, bom), text, index, ranges, new


@given(file_and_edits())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_file_round_trip_keeps_every_byte_outside_the_spans(case):
    data, text, _, ranges, new = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.txt"
        path.write_bytes(data)
        source = read_text_file(path)
    assert source.text == text and source.encode() == data
    spans = validate_spans(source.text, parse_spec(",".join(ranges), source.text))
    newline = newline_style(source.text)
    pieces = [match_newlines(n, newline) for n in new]
    out = source.encode(ChangeSet.of((s.start, s.end, p) for s, p in zip(spans, pieces)).apply(source.text))
    # Walk the output bytes: every stretch between spans is the original's, byte for byte.
    prefix = b"\xef\xbb\xbf" if source.bom else b""
    assert out.startswith(prefix) and data.startswith(prefix)
    pos, cursor = len(prefix), 0
    for span, piece in zip(spans, pieces):
        keep = text[cursor:span.start].encode()
        assert out[pos:pos + len(keep)] == keep
        pos += len(keep) + len(piece.encode())
        cursor = span.end
    assert out[pos:] == text[cursor:].encode()
    if newline == "\r\n":  # a CRLF file gets CRLF in the new text too
        assert b"\n" not in out.replace(b"\r\n", b"")


@given(file_and_edits(), st.integers(0, 3))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_engine_round_trip_on_random_files(tiny_denoiser, case, seed):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling

    data, text, _, ranges, _ = case
    spans = validate_spans(text, [Span(s.start, s.end, max_tokens=3, label=s.label) for s in parse_spec(",".join(ranges), text)])
    result = apply_edit(tiny_denoiser, text, spans, Sampling(steps=2, seed=seed), context_tokens=64)
    cursor, pos = 0, 0
    for span, span_result in zip(spans, result.spans):
        assert result.text[pos:pos + span.start - cursor] == text[cursor:span.start]
        pos += span.start - cursor + len(span_result.text)
        cursor = span.end
    assert result.text[pos:] == text[cursor:]
    out = encode_text(result.text, data.startswith(b"\xef\xbb\xbf"))
    assert out.startswith(data[: len(data) - len(text[spans[0].start:].encode())])
