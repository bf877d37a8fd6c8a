"""core/settings.py: every setting declared once; the CLI's flags and the config's keys derive from it."""
from __future__ import annotations

import dataclasses
import math

import pytest

from sharpen.app.cli import build_parser
from sharpen.app.config import SECTIONS, Config
from sharpen.core.settings import Editing, ModelRequest, Sampling, SettingError, Settings, rule_of


def test_defaults_are_valid_and_bad_values_name_the_setting():
    Settings()  # every declared default passes its own rule
    cases = [
        (Sampling, "threshold", 0.0, "must be in (0, 1]"),
        (Sampling, "threshold", math.nan, "must be in (0, 1]"),
        (Sampling, "temperature", math.inf, "must be a finite number, at least 0"),
        (Sampling, "samples", 65, "must be between 1 and 64"),
        (Sampling, "seed", 10**23, "must be between 0 and 18446744073709551615"),
        (Sampling, "policy", "loudest", "must be one of: confidence, margin, entropy, random"),
        (Sampling, "steps", 2.5, "must be a whole number"),
        (Sampling, "steps", True, "must be a whole number"),
        (Editing, "candidates", 0, "must be between 1 and 16"),
        (ModelRequest, "trust_remote_code", "yes", "must be true or false"),
    ]
    for request, name, value, rule in cases:
        with pytest.raises(SettingError) as error:
            request(**{name: value})
        assert (error.value.name, error.value.rule) == (name, rule)


def test_names_are_unique_across_sections():
    names = [f.name for section in SECTIONS for f in dataclasses.fields(section)]
    assert len(names) == len(set(names))


def test_every_flagged_setting_has_exactly_one_flag_with_default_none():
    """argparse defaults None mean "not given", so the config file's value is never overridden by a default."""
    actions = {a.dest: a for a in build_parser()._actions}
    for section in SECTIONS:
        for f in dataclasses.fields(section):
            if rule_of(f).flag:
                action = actions[f.name]
                assert action.option_strings[0] == "--" + f.name.replace("_", "-") and action.default is None, f.name
                assert rule_of(f).help.split()[0] in action.help
            else:
                assert f.name not in actions


def test_layering_keeps_what_is_not_given():
    base = Settings().layered({"sampling": {"steps": 9, "seed": 4}, "edit": {"length": "adaptive"}})
    top = base.layered({"sampling": {"steps": 3, "seed": None}})
    assert (top.sampling.steps, top.sampling.seed, top.editing.length) == (3, 4, "adaptive")
    assert Config.of(steps=2, frame_rate=60, device="cpu").model.device == "cpu"


def test_a_new_setting_needs_one_declaration():
    """The seam the redesign is for: a field added to a request is a flag and a check at once."""
    import argparse

    from sharpen.app.cli import add_settings
    from sharpen.core.settings import setting

    @dataclasses.dataclass(frozen=True)
    class Extended(Sampling):
        warmup: int = setting(0, "steps before the first commit", low=0, metavar="N")

    parser = argparse.ArgumentParser()
    add_settings(parser, Extended, None)
    assert parser.parse_args(["--warmup", "3"]).warmup == 3 and parser.parse_args([]).steps is None
    with pytest.raises(SettingError, match="warmup must be at least 0"):
        Extended(warmup=-1)
