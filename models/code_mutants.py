"""Realistic faulty programs: AST mutants of a correct program, the offline code generator.

The slips a code model makes, as operators on the syntax tree of a canonical solution:

* ``off_by_one``: an integer constant c becomes c + 1 or c - 1 (loop bounds, indices);
* ``flip_comparison``: ``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=``, ``in`` and ``not in``;
* ``drop_branch``: an ``if`` loses its body (its ``else``, if any, runs in its place);
* ``wrong_constant``: a constant replaced (numbers negated or zeroed, ``True``/``False`` swapped,
  strings emptied);
* ``swap_operator``: ``+``/``-``, ``*``/``+``, ``//``/``/``, ``and``/``or``.

Only the entry point's body (and functions nested in it) is mutated, never the prompt's
docstring. A mutant may still be correct (an equivalent mutant): correctness is always judged by
running tests, never assumed from the mutation.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

import numpy as np

from .humaneval import Problem, entry_function

OPERATORS = ("off_by_one", "flip_comparison", "drop_branch", "wrong_constant", "swap_operator")
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Div, ast.Div: ast.FloorDiv,
         ast.Mod: ast.FloorDiv}


@dataclass(frozen=True)
class Site:
    operator: str
    index: int  # position of the node in a walk of the entry point's body


def _body_nodes(fn: ast.FunctionDef) -> list[ast.AST]:
    """Nodes of the function body in a fixed order, the docstring left out."""
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(
        getattr(fn.body[0], "value", None), ast.Constant) and isinstance(fn.body[0].value.value, str) else fn.body
    return [node for stmt in body for node in ast.walk(stmt)]


def _applies(operator: str, node: ast.AST) -> bool:
    if operator == "off_by_one":
        return isinstance(node, ast.Constant) and type(node.value) is int
    if operator == "flip_comparison":
        return isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP
    if operator == "drop_branch":
        return isinstance(node, ast.If)
    if operator == "wrong_constant":
        return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool, str)
    if operator == "swap_operator":
        return (isinstance(node, ast.BinOp) and type(node.op) in _SWAP) or isinstance(node, ast.BoolOp)
    raise ValueError(f"unknown mutation operator {operator!r}; operators: {', '.join(OPERATORS)}")


def mutation_sites(program: str, entry_point: str) -> list[Site]:
    """Every place one operator applies in the entry point of ``program``."""
    nodes = _body_nodes(entry_function(program, entry_point))
    return [Site(op, i) for op in OPERATORS for i, node in enumerate(nodes) if _applies(op, node)]


def _mutate(node: ast.AST, operator: str, rng: np.random.Generator) -> None:
    if operator == "off_by_one":
        node.value += int(rng.choice([-1, 1]))
    elif operator == "flip_comparison":
        node.ops[0] = _FLIP[type(node.ops[0])]()
    elif operator == "drop_branch":
        node.body, node.orelse = (node.orelse or [ast.Pass()]), []
    elif operator == "wrong_constant":
        value = node.value
        if isinstance(value, bool):
            node.value = not value
        elif isinstance(value, (int, float)):
            node.value = -value if value else 1
        else:
            node.value = "" if value else " "
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    else:
        node.op = _SWAP[type(node.op)]()


def apply_mutations(program: str, entry_point: str, sites: list[Site], rng: np.random.Generator) -> str:
    """``program`` with each of ``sites`` mutated, as source text."""
    tree = ast.parse(program)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point)
    nodes = _body_nodes(fn)
    for site in sites:
        if not _applies(site.operator, nodes[site.index]):
            raise ValueError(f"operator {site.operator!r} does not apply at node {site.index}")
        _mutate(nodes[site.index], site.operator, rng)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


@dataclass(frozen=True)
class Candidate:
    task_id: str
    source: str
    mutations: tuple[str, ...]  # the operators applied; empty for a copy of the canonical solution


def offline_candidates(problem: Problem, n: int, seed_value: int, p_correct: float = 0.35,
                       p_double: float = 0.3) -> list[Candidate]:
    """``n`` programs a code model might write: the canonical solution with probability
    ``p_correct``, else a mutant with one (two with probability ``p_double``) mutations."""
    if not 0.0 <= p_correct <= 1.0:
        raise ValueError(f"p_correct must lie in [0, 1], got {p_correct}")
    rng = np.random.default_rng([seed_value, int(problem.task_id.split("/")[1])])
    program = ast.unparse(ast.parse(problem.solution)) + "\n"
    sites = mutation_sites(program, problem.entry_point)
    out = []
    for _ in range(n):
        if rng.random() < p_correct or not sites:
            out.append(Candidate(problem.task_id, program, ()))
            continue
        k = 2 if rng.random() < p_double and len(sites) > 1 else 1
        chosen = [sites[i] for i in rng.choice(len(sites), k, replace=False)]
        source = apply_mutations(program, problem.entry_point, copy.deepcopy(chosen), rng)
        out.append(Candidate(problem.task_id, source, tuple(s.operator for s in chosen)))
    return out
