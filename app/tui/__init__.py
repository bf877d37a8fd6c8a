"""The Textual editor: one widget per module, worker<->UI messages in messages.py.

editor_app.SharpenApp composes tabs of EditorPane (EditorArea + PreviewView), a StatusBar and
a Footer; model_runner runs the engine in thread workers; preview.py is the pure part of the
live preview.
"""
