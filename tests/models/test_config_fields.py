"""Every config field declares its range, and a value outside it is refused, naming the key."""

import dataclasses
import math
from dataclasses import dataclass

import pytest

from edgekit.models.config_fields import RANGE, bounded, check_ranges, checked, describe, field_range
from edgekit.models.lm import LMConfig
from edgekit.models.mx_training import MXTrainingConfig
from edgekit.models.registry import MODELS, make_config
from edgekit.models.studies import STUDIES

ENTRIES = {**MODELS, **STUDIES}
CONFIGS = {name: entry.config for name, entry in ENTRIES.items()} | {"mx_training": MXTrainingConfig}
FIELDS = [(name, f.name) for name, cls in CONFIGS.items() for f in dataclasses.fields(cls)]


def outside(cls, key):
    """A value of the field's own kind that its declared range refuses."""
    spec = field_range(cls, key)
    default = next(f.default for f in dataclasses.fields(cls) if f.name == key)
    sequence = isinstance(default, tuple)
    if spec.choices is not None:
        bad = max(spec.choices) + 1 if isinstance(spec.choices[0], int) else "no_such_choice"
    elif spec.check is not None:
        bad = "no_such_choice"
    elif spec.low is not None:
        closed_int = isinstance(default, int) or default is None
        bad = spec.low if spec.low_open else spec.low - 1 if closed_int else spec.low - 0.5
    else:
        bad = spec.high if spec.high_open else spec.high + 1
    return (bad,) if sequence else bad


@pytest.mark.parametrize(("name", "key"), FIELDS)
def test_every_field_declares_its_range(name, key):
    """A new field without a range fails here."""
    assert field_range(CONFIGS[name], key) is not None, f"{CONFIGS[name].__name__}.{key} declares no range"


@pytest.mark.parametrize("name", CONFIGS)
def test_defaults_and_tiny_configs_are_in_range(name):
    for config in (CONFIGS[name](), CONFIGS[name].tiny()):
        check_ranges(config)


@pytest.mark.parametrize(("name", "key"), FIELDS)
def test_a_value_outside_the_range_is_refused_naming_the_key(name, key):
    cls = CONFIGS[name]
    bad = outside(cls, key)
    message = f"config key '{key}' of {cls.__name__} must be {describe(cls, key)}, got {bad!r}"
    with pytest.raises(ValueError) as err:
        cls(**{key: bad})
    assert str(err.value) == message
    if name in ENTRIES:  # the --config path: text parsed by the field's type, then checked
        text = str(bad) if not isinstance(bad, tuple) else f'["{bad[0]}"]'
        with pytest.raises(ValueError, match=f"invalid config for model '{name}': config key '{key}' of"):
            make_config(ENTRIES[name], {key: text})


def test_cli_example_and_boundaries():
    message = r"^config key 'steps' of DigitsConfig must be an integer >= 1, got -5$"
    with pytest.raises(ValueError, match=message):
        MODELS["digits"].config(steps=-5)
    digits = MODELS["digits"].config
    assert digits(steps=1, lr=1e-9, test_fraction=0.01).steps == 1  # closed bound, and just inside open ones
    for bad in ({"lr": 0.0}, {"lr": math.nan}, {"test_fraction": 1.0}, {"steps": 2.5}, {"steps": True},
                {"seed": -1}):
        with pytest.raises(ValueError, match=f"config key '{next(iter(bad))}'"):
            digits(**bad)


def test_range_checks_run_before_cross_field_checks():
    with pytest.raises(ValueError, match="config key 'heads' of LMConfig must be an integer >= 1, got 0"):
        LMConfig(heads=0)  # the cross-field check would divide by zero
    with pytest.raises(ValueError, match="multiple of 64"):
        LMConfig(width=100)  # in range; the cross-field check still runs


def test_field_kinds_optional_sequences_and_open_sets():
    @dataclass(frozen=True)
    @checked
    class Toy:
        rate: float = bounded(0.5, low=0, high=1, high_open=True)
        cells: int | None = bounded(None, low=2)
        names: tuple[str, ...] = bounded(("a",), choices=("a", "b"))
        word: str = bounded("xx", check=lambda w: len(w) == 2, allowed="a two-letter word")

    assert Toy(rate=0, cells=2, names=("b", "a"), word="ab").names == ("b", "a")
    assert describe(Toy, "rate") == "a number in [0, 1)"
    assert describe(Toy, "cells") == "an integer >= 2 (or None)"
    assert describe(Toy, "names") == "a list, each entry one of a, b"
    for key, bad, text in [("rate", 1.0, "a number in [0, 1), got 1.0"), ("rate", "0.5", "got '0.5'"),
                           ("cells", 1, "an integer >= 2 (or None), got 1"),
                           ("names", ("a", "c"), "each entry one of a, b, got ('a', 'c')"),
                           ("names", "a", "got 'a'"), ("word", "abc", "a two-letter word, got 'abc'")]:
        with pytest.raises(ValueError, match=f"config key '{key}' of Toy must be .*{text}".replace("(", r"\(")
                           .replace(")", r"\)").replace("[", r"\[")):
            Toy(**{key: bad})
    assert Toy.__dataclass_fields__["rate"].metadata[RANGE].high == 1


def test_checked_must_sit_below_the_dataclass_decorator():
    with pytest.raises(TypeError, match="below @dataclass"):
        checked(dataclass(frozen=True)(type("Late", (), {"__annotations__": {"n": "int"}, "n": 1})))
