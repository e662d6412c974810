"""Test inputs for a HumanEval problem by fuzzing: hypothesis strategies and mutated examples.

Two sources, both seeded:

* **strategies** inferred per parameter, first from the values its docstring examples take
  (their types, ranges, string alphabets and list lengths, so generated inputs look like the
  examples and respect the preconditions those imply, such as non-negative counts), else from
  the annotation, else from the parameter's name; values are drawn with hypothesis under a
  fixed ``@seed``;
* **mutation** of the example calls: one argument at a time, small edits (integers +-1,
  doubled, halved; strings and lists with an item deleted, duplicated, swapped or replaced).

The canonical solution is the oracle (:mod:`.fuzzeval` runs it in the sandbox); an input on
which it raises or runs out of time is dropped, since it lies outside the problem.
"""

from __future__ import annotations

import ast
import string

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from .humaneval import Problem, docstring_examples, parameters

INT_NAMES = {"n", "N", "k", "num", "x", "y", "a", "b", "c", "base", "p", "m", "capacity"}
STR_NAMES = {"s", "string", "text", "sentence", "word", "txt", "c", "operator"}
DEFAULT_INT = st.integers(0, 50)
DEFAULT_STR = st.text(alphabet=string.ascii_letters + " ", max_size=12)


def _int_strategy(values: list[int]) -> st.SearchStrategy:
    lo, hi = min(values), max(values)
    low = 0 if lo == 0 else 1 if lo > 0 else -max(10, 2 * abs(lo))
    return st.integers(low, max(10, 2 * hi))


def strategy_from_values(values: list) -> st.SearchStrategy:
    """A strategy for values like ``values`` (the examples of one parameter)."""
    kinds = {type(v) for v in values}
    if None in values:
        rest = [v for v in values if v is not None]
        return st.none() | strategy_from_values(rest) if rest else st.none()
    if kinds == {bool}:
        return st.booleans()
    if kinds <= {int}:
        return _int_strategy(values)
    if kinds <= {int, float}:
        lo, hi = min(values), max(values)
        span = max(10.0, 2 * max(abs(lo), abs(hi)))
        low = 0.0 if lo >= 0 else -span
        return st.floats(low, span, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 2))
    if kinds == {str}:
        alphabet = sorted(set("".join(values))) or list(string.ascii_letters)
        longest = max(len(v) for v in values)
        return st.text(alphabet=alphabet, min_size=min(len(v) for v in values) and 1,
                       max_size=min(40, max(8, 2 * longest)))
    if kinds == {list}:
        items = [x for v in values for x in v]
        element = strategy_from_values(items) if items else DEFAULT_INT
        longest = max(len(v) for v in values)
        return st.lists(element, min_size=min(1, min(len(v) for v in values)), max_size=min(20, max(8, 2 * longest)))
    if kinds == {tuple} and len({len(v) for v in values}) == 1:
        return st.tuples(*(strategy_from_values([v[i] for v in values]) for i in range(len(values[0]))))
    if kinds == {dict}:
        keys = [k for v in values for k in v]
        vals = [x for v in values for x in v.values()]
        if not keys:
            return st.just({})
        return st.dictionaries(strategy_from_values(keys), strategy_from_values(vals), max_size=6)
    return st.sampled_from(values)


def strategy_from_annotation(node: ast.expr | None, name: str) -> st.SearchStrategy:
    """A strategy for a parameter with no examples: from its annotation, else from its name."""
    text = ast.unparse(node) if node is not None else ""
    base = text.split("[", 1)[0].split(".")[-1].lower()
    inner = node.slice if isinstance(node, ast.Subscript) else None
    if base == "int":
        return DEFAULT_INT
    if base == "float":
        return st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 2))
    if base == "str":
        return DEFAULT_STR
    if base == "bool":
        return st.booleans()
    if base == "list" and inner is not None:
        return st.lists(strategy_from_annotation(inner, ""), max_size=8)
    if base == "tuple" and isinstance(inner, ast.Tuple):
        return st.tuples(*(strategy_from_annotation(e, "") for e in inner.elts))
    if base == "dict" and isinstance(inner, ast.Tuple):
        return st.dictionaries(*(strategy_from_annotation(e, "") for e in inner.elts[:2]), max_size=6)
    if base in ("optional",) and inner is not None:
        return st.none() | strategy_from_annotation(inner, "")
    if name in STR_NAMES:
        return DEFAULT_STR
    if name in INT_NAMES:
        return DEFAULT_INT
    if name in ("grid",):
        return st.lists(st.lists(st.integers(0, 1), min_size=3, max_size=3), min_size=3, max_size=3)
    return st.lists(st.integers(-10, 10), max_size=8)


def argument_strategy(problem: Problem) -> st.SearchStrategy:
    """Tuples of arguments for the entry point."""
    examples = docstring_examples(problem)
    parts = []
    for i, (name, annotation) in enumerate(parameters(problem)):
        values = [e[i] for e in examples]
        parts.append(strategy_from_values(values) if values else strategy_from_annotation(annotation, name))
    return st.tuples(*parts)


def hypothesis_inputs(problem: Problem, count: int, seed_value: int) -> list[tuple]:
    """Up to ``count`` distinct argument tuples drawn by hypothesis with a fixed seed (it is asked for
    twice as many, since it may repeat itself)."""
    drawn = []

    @seed(seed_value)
    @settings(max_examples=2 * count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(argument_strategy(problem))
    def collect(args):
        drawn.append(args)

    collect()
    return _distinct(drawn)[:count]


def mutate_value(value, rng: np.random.Generator):
    """One small edit of ``value`` that keeps its type (and the sign of integers)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        options = [value + 1, value * 2, value // 2, value - 1 if value != 0 else 1]
        return options[rng.integers(len(options))]
    if isinstance(value, float):
        return round(value + float(rng.choice([-1.0, 1.0])) * float(rng.uniform(0.1, 2.0)), 2)
    if isinstance(value, (str, list)) and len(value) > 0:
        i = int(rng.integers(len(value)))
        j = int(rng.integers(len(value)))
        op = rng.integers(5 if isinstance(value, list) else 4)
        if op == 0:
            return value[:i] + value[i + 1:]
        if op == 1:
            return value[:i] + value[i:i + 1] + value[i:]
        if op == 2:
            items = list(value)
            items[i], items[j] = items[j], items[i]
            return "".join(items) if isinstance(value, str) else items
        if op == 3:
            return value[:i] + value[j:j + 1] + value[i + 1:]
        return value[:i] + [mutate_value(value[i], rng)] + value[i + 1:]
    if isinstance(value, tuple) and value:
        i = int(rng.integers(len(value)))
        return value[:i] + (mutate_value(value[i], rng),) + value[i + 1:]
    return value


def mutated_inputs(problem: Problem, count: int, seed_value: int) -> list[tuple]:
    """Up to ``count`` distinct edits of the docstring examples, one argument at a time."""
    examples = docstring_examples(problem)
    if not examples:
        return []
    rng = np.random.default_rng([seed_value, 7])
    seen = {repr(e) for e in examples}
    out = []
    for _ in range(count * 4):
        base = examples[rng.integers(len(examples))]
        i = int(rng.integers(len(base)))
        args = base[:i] + (mutate_value(base[i], rng),) + base[i + 1:]
        if repr(args) not in seen:
            seen.add(repr(args))
            out.append(args)
        if len(out) == count:
            break
    return out


def _distinct(inputs: list[tuple]) -> list[tuple]:
    seen, out = set(), []
    for args in inputs:
        if repr(args) not in seen:
            seen.add(repr(args))
            out.append(args)
    return out


def fuzz_inputs(problem: Problem, n_hypothesis: int = 20, n_mutation: int = 15,
                seed_value: int = 0) -> list[tuple[tuple, str]]:
    """(arguments, origin) for the examples, their mutations and hypothesis draws; origin is
    ``example``, ``mutation`` or ``hypothesis``; no arguments twice."""
    tagged = [(a, "example") for a in docstring_examples(problem)]
    tagged += [(a, "mutation") for a in mutated_inputs(problem, n_mutation, seed_value)]
    tagged += [(a, "hypothesis") for a in hypothesis_inputs(problem, n_hypothesis, seed_value)]
    seen, out = set(), []
    for args, origin in tagged:
        if repr(args) not in seen:
            seen.add(repr(args))
            out.append((args, origin))
    return out
