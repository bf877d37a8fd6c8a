"""Controllable generation: constraints on a span's text, kept exactly at every denoising step.

- spec.py: `Constraint`, the value (regex, JSON schema, grammar, required and forbidden words).
- automaton.py: a constraint's byte-level DFA (interegular for patterns, Aho-Corasick for words).
- tokens.py: that DFA lifted once per (tokenizer, constraint) to a token automaton, cached.
- steering.py: `Steering`, the per-step hook the loops call: which tokens each masked slot may take
  so its span stays completable (forward and backward state sets over the canvas), and the
  settling of a step's commits that clash.
- grammar.py: a Lark grammar subset turned into a pattern (recursion bounded: a sound approximation).
- requests.py: the constraint fields servers accept (OpenAI response_format, vLLM/SGLang regex,
  json_schema, ebnf) -> a Constraint.

Only spec.py is imported here: the rest loads numpy, torch or the libraries when a run asks.
"""
from .errors import ConstraintError
from .spec import Constraint

__all__ = ["Constraint", "ConstraintError"]
