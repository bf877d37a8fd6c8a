"""The error kinds the engine raises, each tied to the exit code the CLI documents.

Library code raises these; only app/ turns them into a stderr line and an exit status.
"""
from __future__ import annotations


class SharpenError(Exception):
    """Base class: one plain sentence for the user, one exit code for scripts."""

    exit_code = 1


class UsageError(SharpenError):
    """Bad arguments or a bad SPEC (exit 2)."""

    exit_code = 2


class SpanError(UsageError):
    """A span that cannot be applied: overlapping, reversed, out of range, empty rewrite."""


class InputError(SharpenError):
    """The input file cannot be read or written as text (exit 3)."""

    exit_code = 3


class ModelError(SharpenError):
    """Weights missing or corrupt, an unknown family, out of memory (exit 4)."""

    exit_code = 4


class Cancelled(SharpenError):
    """The run was cancelled between two denoising steps (exit 130, like SIGINT)."""

    exit_code = 130
