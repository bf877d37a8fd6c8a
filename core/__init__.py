"""sharpen's engine: text edits -> token canvas -> denoising loop -> text.

No UI imports here (no textual, no rich); torch is imported only by the modules that
run models, so importing `sharpen.core.spans` or `sharpen.core.files` stays cheap.
"""
