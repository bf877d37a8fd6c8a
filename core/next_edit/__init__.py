"""Next-edit prediction: after an edit, the follow-up edits nearby, as a ChangeSet of hunks.

    history = EditHistory(); history.record("a.py", old_text, changes)     # history.py: the buffer feeds it
    request = NextEditRequest.around(path, text, cursor, history.events(), snippets)  # request.py
    draft_hunks(request)                                # drafts.py: a rename's other uses / a repeated fix, from the history
    for event in predict(backend, request): ...        # predict.py: NextEditDraft ..., then NextEditDone (a draft: verified)
    event.answer.changes                                # a ChangeSet; empty = "no edit" (draw nothing)
    offer = Offer.of(event.answer)                      # offer.py: Tab jumps, a second Tab applies one hunk

Prompt formats of other next-edit models (Mercury / Copilot xtab tags, Zed's Zeta 2 and 2.1,
Sweep's blocks) and sharpen's own are build/parse pairs in formats/; docs/next_edit.md says how
each model family decodes a window. Pure Python here except predict.py, which drives a backend.
"""
