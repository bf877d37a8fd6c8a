"""Spans, canvas and splice: the round trip outside the spans is exact."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharpen.core.canvas import build_canvas, infill_slots
from sharpen.core.errors import SpanError
from sharpen.core.changes import ChangeSet
from sharpen.core.spans import Span, validate_spans

TEXT_ALPHABET = st.sampled_from(list("ab \t\n\r") + ["\r\n", "é", "東", "☃", "😀", "\u2028", "\x0c", "def ", "    "])
texts = st.lists(TEXT_ALPHABET, min_size=1, max_size=60).map("".join)


@st.composite
def text_and_spans(draw):
    text = draw(texts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=2, max_size=8, unique=True)))
    spans = []
    for start, end in zip(cuts[::2], cuts[1::2]):
        mode = draw(st.sampled_from(["infill", "rewrite"]))
        spans.append(Span(start, end, mode=mode if end > start else "infill"))
    return text, spans


@given(text_and_spans(), st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_splice_keeps_everything_outside_the_spans(tiny_denoiser, case, data):
    text, spans = case
    spans = validate_spans(text, spans)
    new = [data.draw(texts) for _ in spans]
    out = ChangeSet.of((s.start, s.end, n) for s, n in zip(spans, new)).apply(text)
    # Walk the output: the pieces between spans are the original pieces, byte for byte.
    cursor, pos = 0, 0
    for span, piece in zip(spans, new):
        assert out[pos:pos + span.start - cursor] == text[cursor:span.start]
        pos += span.start - cursor
        assert out[pos:pos + len(piece)] == piece
        pos += len(piece)
        cursor = span.end
    assert out[pos:] == text[cursor:]
    assert ChangeSet.of((s.start, s.end, text[s.start:s.end]) for s in spans).apply(text) == text


@given(text_and_spans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_canvas_layout_round_trips(tiny_denoiser, case):
    text, spans = case
    tok, mask = tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id
    spans = validate_spans(text, spans)
    canvas = build_canvas(text, spans, tok, mask, context_tokens=4096, max_len=4096)
    assert len(canvas.slots) == len(spans)
    for span, slots in zip(spans, canvas.slots):
        ids = list(canvas.ids[slots.start:slots.stop])
        if span.mode == "rewrite":
            assert tok.decode(ids) == text[span.start:span.end]  # the draft is the span itself
        else:
            assert ids == [mask] * len(slots)
    # With a full budget, the fixed tokens decode back to the text outside the spans.
    fixed, cursor = [], 0
    for span, slots in zip(spans, canvas.slots):
        fixed.append(text[cursor:span.start])
        cursor = span.end
    fixed.append(text[cursor:])
    outside = [i for n, i in enumerate(canvas.ids) if not any(n in s for s in canvas.slots)]
    assert tok.decode(outside) == "".join(fixed)
    assert not canvas.cut and canvas.window == (0, len(text))  # all of it fit


def test_context_window_is_bounded_and_cut_at_line_starts(tiny_denoiser):
    tok, mask = tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id
    lines = [f"line_{n} = {n} * 2\n" for n in range(5000)]
    text = "".join(lines)
    start = text.index("line_2500")
    canvas = build_canvas(text, [Span(start, start + 9)], tok, mask, context_tokens=200, max_len=512)
    prefix = tok.decode(list(canvas.ids[: canvas.slots[0].start]))
    suffix = tok.decode(list(canvas.ids[canvas.slots[0].stop:]))
    assert len(canvas.ids) <= 200 + len(canvas.slots[0])
    assert prefix and text[:start].endswith(prefix) and prefix.startswith("line_")
    assert suffix and text[start + 9:].startswith(suffix) and suffix.endswith("\n")
    assert canvas.cut and canvas.window == (start - len(prefix), start + 9 + len(suffix))


def test_a_gap_too_long_for_its_share_marks_the_canvas_cut(tiny_denoiser):
    """Text between two spans that does not fit its budget is cut to its head and tail lines:
    the canvas says so (a server reports it as a truncated prompt), though both ends fit."""
    tok, mask = tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id
    gap = "".join(f"middle_{n} = {n}\n" for n in range(400))
    text = "a = 1\n" + "x\n" + gap + "y\n" + "b = 2\n"
    first, second = text.index("x"), text.index("y\n")
    spans = [Span(first, first + 1), Span(second, second + 1)]
    canvas = build_canvas(text, spans, tok, mask, context_tokens=120, max_len=512)
    assert canvas.window == (0, len(text)) and canvas.cut
    whole = build_canvas(text, spans, tok, mask, context_tokens=100_000, max_len=100_000)
    assert whole.window == (0, len(text)) and not whole.cut


def test_infill_slot_budget():
    assert infill_slots(Span(0, 0), 0) == 32
    assert infill_slots(Span(0, 5, max_tokens=7), 3) == 7
    assert infill_slots(Span(0, 5), 10) >= 15


@pytest.mark.parametrize(
    "spans, message",
    [
        ([Span(0, 5), Span(3, 8)], "overlaps"),
        ([Span(5, 2)], "end is before start"),
        ([Span(0, 99)], "outside the text"),
        ([Span(-1, 2)], "outside the text"),
        ([Span(2, 2, mode="rewrite")], "non-empty"),
        ([Span(1, 1), Span(1, 1)], "overlaps"),
        ([Span(0, 2, strength=-0.1, mode="rewrite")], "strength"),
        ([Span(0, 2, max_tokens=0)], "max_tokens"),
        ([], "no span"),
    ],
)
def test_bad_spans_are_rejected_with_the_span_named(spans, message):
    with pytest.raises(SpanError, match=message):
        validate_spans("0123456789", spans)


def test_touching_spans_are_allowed():
    assert len(validate_spans("0123456789", [Span(0, 5), Span(5, 8)])) == 2


@pytest.mark.parametrize("where", ["end", "start"])
def test_a_side_with_little_text_leaves_its_share_to_the_other(tiny_denoiser, where):
    """An infill at the end of a long file (or a chat, all prefix) reads the whole budget of text
    before it, not half; at the start, the text after it gets the budget."""
    tok, mask = tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id
    body = "".join(f"line_{n} = {n} * 2\n" for n in range(3000))
    at = len(body) if where == "end" else 0
    canvas = build_canvas(body, [Span(at, at)], tok, mask, context_tokens=200, max_len=512)
    context = len(canvas.ids) - len(canvas.slots[0])
    assert 180 <= context <= 200 and canvas.cut  # all of the budget but the line that did not fit (half was 100)
    both = build_canvas(body, [Span(len(body) // 2, len(body) // 2)], tok, mask, context_tokens=200, max_len=512)
    before, after = both.slots[0].start, len(both.ids) - both.slots[0].stop
    assert before <= 100 and after <= 100 and before + after >= 180  # text on both sides: half each


def test_a_prompted_edits_context_gives_a_short_sides_share_to_the_other(tiny_denoiser):
    """The same rule for the text a chat or fill-in-the-middle prompt carries (block-diffusion
    models, instructions): core.instruct.clip_around."""
    from sharpen.core.instruct import clip_around

    tok = tiny_denoiser.tokenizer
    body = "".join(f"line_{n} = {n} * 2\n" for n in range(3000))
    before, after = clip_around(body, Span(len(body), len(body)), 200, tok)
    assert after == "" and body.endswith(before) and 180 <= len(tok.encode(before)) <= 200
    before, after = clip_around(body, Span(0, 0), 200, tok)
    assert before == "" and body.startswith(after) and 180 <= len(tok.encode(after)) <= 200
    middle = body.index("line_1500 ")
    before, after = clip_around(body, Span(middle, middle), 200, tok)
    assert len(tok.encode(before)) <= 100 and len(tok.encode(after)) <= 100


def test_short_gaps_between_marked_regions_leave_their_share_to_the_edges(tiny_denoiser):
    """Four marked regions a line apart in a long file: each gap took a fifth of the budget
    whether it needed it or not, so the text around them got two fifths; now the edges get
    what the short gaps leave."""
    tok, mask = tiny_denoiser.tokenizer, tiny_denoiser.spec.mask_id
    lines = [f"line_{n} = {n} * 2\n" for n in range(3000)]
    text = "".join(lines)
    starts = [text.index(f"line_{n} = ") for n in (1500, 1502, 1504, 1506)]
    spans = [Span(s, s + len("line_1500")) for s in starts]
    canvas = build_canvas(text, spans, tok, mask, context_tokens=400, max_len=1024)
    context = len(canvas.ids) - sum(len(r) for r in canvas.slots)
    assert 370 <= context <= 400 and canvas.cut  # was about 2/5 of 400 around them, plus the gaps
    before, after = canvas.slots[0].start, len(canvas.ids) - canvas.slots[-1].stop
    assert abs(before - after) <= 20  # both edges had more text than their half: half each
