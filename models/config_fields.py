"""Config fields that declare their allowed range once, and the check every config runs.

A model's or study's config is a frozen dataclass marked :func:`checked` (below the
``@dataclass`` line), each field naming its range with :func:`bounded`::

    @dataclass(frozen=True)
    @checked
    class DigitsConfig:
        hidden: int = bounded(256, low=1)
        lr: float = bounded(3e-3, low=0, low_open=True)      # > 0
        test_fraction: float = bounded(0.25, low=0, high=1, low_open=True, high_open=True)
        method: str = bounded("omp", choices=METHODS)
        seed: int = bounded(0, low=0)

        def __post_init__(self):  # optional: only checks that tie fields together
            ...

Constructing the config (``DigitsConfig(steps=-5)``, ``make_config``, a checkpoint's
stored config) first checks every declared range, then runs the class's own
``__post_init__``, so cross-field checks never see a value outside its range. A value
outside its range is a ``ValueError`` that names the config, the key, the range and the
value: ``config key 'steps' of DigitsConfig must be an integer >= 1, got -5``.

The field's type hint sets the kind of value: ``int`` takes integers (not bools),
``float`` any real number, ``str`` text, ``X | None`` also None, and ``tuple[X, ...]``
a sequence whose every entry is checked. ``choices`` is a fixed collection; ``check``
with ``allowed`` is for open sets (a predicate and the words that describe it).
:func:`field_range` reads a field's declaration, :func:`describe` renders it for help text.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

RANGE = "edgekit.range"  # the key of a field's metadata that holds its Range


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: low itself is excluded
    high_open: bool = False
    choices: tuple | None = None
    check: Callable[[object], bool] | None = None  # an open set: True for an allowed value
    allowed: str | None = None  # how ``check``'s set reads in an error

    def admits(self, value) -> bool:
        if self.choices is not None and value not in self.choices:
            return False
        if self.check is not None and not self.check(value):
            return False
        # written so that NaN fails every bound
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def text(self) -> str:
        """``>= 1``, ``in (0, 1]``, ``one of a, b``: the range alone, without the kind."""
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        if self.check is not None:
            return self.allowed or "an allowed value"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_num(self.low)}, {_num(self.high)}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return "any value"


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def bounded(default, *, low: float | None = None, high: float | None = None, low_open: bool = False,
            high_open: bool = False, choices: Iterable | None = None,
            check: Callable[[object], bool] | None = None, allowed: str | None = None):
    """A dataclass field with ``default`` whose allowed values are declared in its metadata.

    ``low``/``high`` bound a number (inclusive unless ``low_open``/``high_open``),
    ``choices`` lists the allowed values, ``check`` + ``allowed`` describe an open set.
    """
    if check is not None and not allowed:
        raise ValueError("bounded(check=...) needs allowed=... to describe the set in errors")
    spec = Range(low, high, low_open, high_open, None if choices is None else tuple(choices), check, allowed)
    if isinstance(default, (list, dict, set)):
        raise TypeError("bounded(): use a tuple for a sequence default (config fields are frozen)")
    return dataclasses.field(default=default, metadata={RANGE: spec})


def field_range(config_type: type, name: str) -> Range | None:
    """The declared range of field ``name`` of a config class (None where none is declared)."""
    return {f.name: f.metadata.get(RANGE) for f in dataclasses.fields(config_type)}[name]


@functools.cache
def _kinds(config_type: type) -> dict[str, tuple[type, bool, bool]]:
    """Field name -> (element kind, None allowed, is a sequence) from the type hints."""
    out = {}
    for name, hint in typing.get_type_hints(config_type).items():
        optional = False
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
            optional = True
            hint = next(a for a in args if a is not type(None))
        sequence = typing.get_origin(hint) is tuple
        out[name] = (typing.get_args(hint)[0] if sequence else hint, optional, sequence)
    return out


_KIND_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _is_kind(value, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, kind)


def describe(config_type: type, name: str) -> str:
    """``an integer >= 1``: what field ``name`` of ``config_type`` takes, as help and errors say it."""
    kind, optional, sequence = _kinds(config_type)[name]
    spec = field_range(config_type, name)
    word = _KIND_WORDS.get(kind, getattr(kind, "__name__", str(kind)))
    text = word if spec is None else f"{word} {spec.text()}" if spec.choices is None and spec.check is None \
        else spec.text()
    if sequence:
        text = f"a list, each entry {text}"
    return f"{text} (or None)" if optional else text


def check_ranges(config) -> None:
    """Raise ``ValueError`` naming the key, the range and the value for the first field of
    ``config`` outside its declared range or of the wrong kind."""
    config_type = type(config)
    for f in dataclasses.fields(config_type):
        kind, optional, sequence = _kinds(config_type)[f.name]
        value = getattr(config, f.name)
        if value is None and optional:
            continue
        spec = f.metadata.get(RANGE)
        entries = value if sequence and isinstance(value, (tuple, list)) else (value,)
        wrong = sequence and not isinstance(value, (tuple, list))
        if wrong or not all(_is_kind(v, kind) and (spec is None or spec.admits(v)) for v in entries):
            raise ValueError(f"config key {f.name!r} of {config_type.__name__} must be "
                             f"{describe(config_type, f.name)}, got {value!r}")


def checked(cls: type) -> type:
    """Make a config class check every declared range on construction, before its own
    ``__post_init__`` (cross-field checks) runs. Goes *below* ``@dataclass(frozen=True)``:
    the dataclass's ``__init__`` calls ``__post_init__`` only when the class has one as it
    is built."""
    if dataclasses.is_dataclass(cls):
        raise TypeError(f"@checked goes below @dataclass(frozen=True) on {cls.__name__}, not above it")
    own = cls.__dict__.get("__post_init__")

    def __post_init__(self):
        check_ranges(self)
        if own is not None:
            own(self)

    cls.__post_init__ = __post_init__
    return cls
