"""FuzzEval: selective code generation, judged by fuzz tests, with a PAC bound on the FDR.

For each HumanEval problem: fuzz inputs (:mod:`.fuzz_inputs`) get their expected outputs from
the canonical solution run in the sandbox (the oracle); each candidate program runs in the
sandbox on every fuzz input and on the benchmark's shipped tests in one process. A candidate's
**score** is the fraction of fuzz tests it passes; its **label** (correct or not) is whether it
passes the shipped tests, the benchmark's own judge. A threshold on the score learnt on a
calibration split (:mod:`.pac_selection`) selects programs with FDR at most epsilon with
probability 1 - delta. Each run of a program is one sandboxed process; a call that runs past
``per_call_seconds`` counts as failed, and a process killed at its limit fails every test.
"""

from __future__ import annotations

import ast
import json
import math
import secrets
from dataclasses import dataclass, field

import numpy as np

from .code_mutants import Candidate
from .fuzz_inputs import fuzz_inputs
from .humaneval import Problem, entry_function
from .pac_selection import empirical_threshold, pac_threshold, selection_outcome
from .sandbox import Limits, run_python

RUN_LIMITS = Limits(seconds=8.0, memory_mb=512, output_bytes=2_000_000)

_HARNESS = '''

import copy as _copy, json as _json, signal as _signal, sys as _sys

class _Overrun(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _Overrun()

_signal.signal(_signal.SIGALRM, _on_alarm)

def _timed(fn, seconds):
    _signal.setitimer(_signal.ITIMER_REAL, seconds)
    try:
        return ["ok", fn()]
    except _Overrun:
        return ["timeout", None]
    except BaseException as err:
        return ["error", type(err).__name__]
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)

_calls = []
for _args in {calls}:
    _status, _value = _timed(lambda: {entry}(*_copy.deepcopy(_args)), {per_call})
    _calls.append([_status, repr(_value)[:20000] if _status == "ok" else _value])
_shipped = None
if {check!r} is not None:
    def _run_check():
        exec({check!r}, globals())
        check({entry})
    _shipped = _timed(_run_check, {check_seconds})[0]
_sys.stdout.write("\\n{mark}" + _json.dumps({{"calls": _calls, "shipped": _shipped}}) + "\\n")
'''


@dataclass(frozen=True)
class FuzzTest:
    args: tuple
    expected: object
    origin: str  # example | mutation | hypothesis


@dataclass
class RunReport:
    """How one program did: per-test results, the shipped tests, how the process ended."""

    status: str  # the sandbox status, or "syntax_error"
    passed: list[bool] = field(default_factory=list)  # per fuzz test
    shipped: bool = False
    detail: str = ""


def _harness_program(source: str, entry_point: str, calls: list[tuple], check: str | None,
                     per_call: float, check_seconds: float) -> tuple[str, str]:
    mark = "EDGEKIT-RESULT-" + secrets.token_hex(8) + ":"
    return source + _HARNESS.format(calls=repr(calls), entry=entry_point, per_call=per_call, check=check,
                                    check_seconds=check_seconds, mark=mark), mark


def run_program(source: str, entry_point: str, calls: list[tuple], check: str | None = None,
                per_call: float = 0.25, check_seconds: float = 3.0,
                limits: Limits = RUN_LIMITS) -> tuple[str, list[list], str | None, str]:
    """Run ``entry_point`` of ``source`` on each argument tuple, then ``check`` (the shipped
    tests), in one sandboxed process. Returns (sandbox status, [[call status, repr of value or
    exception name]], shipped status or None, detail). A program that does not parse raises
    ``ValueError`` naming the line."""
    entry_function(source, entry_point)  # ValueError when it does not parse or lacks the function
    program, mark = _harness_program(source, entry_point, calls, check, per_call, check_seconds)
    result = run_python(program, limits)
    if result.status == "ok" and mark in result.stdout:
        payload = json.loads(result.stdout.rsplit(mark, 1)[1].splitlines()[0])
        return "ok", payload["calls"], payload["shipped"], ""
    status = result.status if result.status != "ok" else "error"
    return status, [], None, result.detail or "no result line"


def values_equal(got, expected) -> bool:
    """Python equality, with floats compared to a relative 1e-6 (absolute 1e-9)."""
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
            return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
        return False
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return type(got) is type(expected) and len(got) == len(expected) and all(
            values_equal(g, e) for g, e in zip(got, expected))
    return got == expected


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _Unreadable(text)


@dataclass(frozen=True)
class _Unreadable:
    """A value whose repr is not a literal; equal only to the same repr."""
    text: str


def build_tests(problem: Problem, n_hypothesis: int = 20, n_mutation: int = 15, seed: int = 0) -> list[FuzzTest]:
    """Fuzz inputs with the canonical solution's outputs; inputs where it fails or overruns are dropped."""
    tagged = fuzz_inputs(problem, n_hypothesis, n_mutation, seed)
    status, calls, _, detail = run_program(problem.solution, problem.entry_point, [a for a, _ in tagged],
                                           per_call=0.5)
    if status != "ok":
        raise RuntimeError(f"{problem.task_id}: the canonical solution did not run in the sandbox: {status} {detail}")
    tests = []
    for (args, origin), (call_status, value) in zip(tagged, calls):
        if call_status == "ok":
            expected = _literal(value)
            if not isinstance(expected, _Unreadable) and not _has_nonfinite(expected):
                tests.append(FuzzTest(args, expected, origin))
    return tests


def _has_nonfinite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_has_nonfinite(v) for v in value)
    return False


def evaluate_program(problem: Problem, source: str, tests: list[FuzzTest]) -> RunReport:
    """Run a candidate on the fuzz tests and the shipped tests."""
    try:
        status, calls, shipped, detail = run_program(source, problem.entry_point, [t.args for t in tests],
                                                     check=problem.test)
    except ValueError as err:
        return RunReport("syntax_error", [False] * len(tests), False, str(err))
    if status != "ok":
        return RunReport(status, [False] * len(tests), False, detail)
    passed = [s == "ok" and values_equal(_literal(v), t.expected) for (s, v), t in zip(calls, tests)]
    return RunReport("ok", passed, shipped == "ok")


@dataclass(frozen=True)
class Scored:
    """One candidate: its scores and its label."""

    task_id: str
    mutations: tuple[str, ...]
    status: str
    fuzz_score: float  # fraction of all fuzz tests passed
    example_score: float  # fraction of the docstring-example tests passed (the baseline score)
    correct: bool  # passes the shipped tests
    n_tests: int


def score_candidate(problem: Problem, candidate: Candidate, tests: list[FuzzTest]) -> Scored:
    report = evaluate_program(problem, candidate.source, tests)
    passed = np.array(report.passed, dtype=bool)
    examples = np.array([t.origin == "example" for t in tests], dtype=bool)
    # no tests is no evidence: score 0 (never the label, which comes from the shipped tests)
    fuzz = float(passed.mean()) if len(passed) else 0.0
    example = float(passed[examples].mean()) if examples.any() else 0.0
    return Scored(candidate.task_id, candidate.mutations, report.status, fuzz, example, report.shipped, len(tests))


METHODS = {  # name -> (score, threshold rule)
    "fuzzeval_pac": ("fuzz_score", "pac"),
    "examples_pac": ("example_score", "pac"),
    "fuzz_empirical": ("fuzz_score", "empirical"),
    "fuzz_all_pass": ("fuzz_score", "all_pass"),
    "accept_all": ("fuzz_score", "none"),
}


def threshold_for(rule: str, scores, correct, epsilon: float, delta: float) -> float:
    if rule == "pac":
        return pac_threshold(scores, correct, epsilon, delta)
    if rule == "empirical":
        return empirical_threshold(scores, correct, epsilon)
    if rule == "all_pass":
        return 1.0
    if rule == "none":
        return -math.inf
    raise ValueError(f"unknown threshold rule {rule!r}; rules: pac, empirical, all_pass, none")


def split_indices(task_ids: list[str], rng: np.random.Generator, by: str, calibration_fraction: float = 0.5):
    """(calibration, test) index arrays, split over candidates or over whole problems."""
    n = len(task_ids)
    if by == "candidate":
        order = rng.permutation(n)
        cut = int(n * calibration_fraction)
        return np.sort(order[:cut]), np.sort(order[cut:])
    if by == "problem":
        tasks = sorted(set(task_ids))
        cal_tasks = set(np.array(tasks)[rng.permutation(len(tasks))[:int(len(tasks) * calibration_fraction)]])
        cal = np.array([i for i, t in enumerate(task_ids) if t in cal_tasks])
        return cal, np.setdiff1d(np.arange(n), cal)
    raise ValueError(f"split must be 'candidate' or 'problem', got {by!r}")


def evaluate_selection(scored: list[Scored], epsilon: float, delta: float, splits: int, seed: int,
                       by: str = "candidate") -> dict:
    """Each method over ``splits`` random calibration/test splits: the share of splits whose test
    FDR exceeds epsilon (PAC promises at most delta), mean FDR, selection rate and recall."""
    rng = np.random.default_rng([seed, 11])
    tasks = [s.task_id for s in scored]
    correct = np.array([s.correct for s in scored])
    per_method = {m: [] for m in METHODS}
    for _ in range(splits):
        cal, test = split_indices(tasks, rng, by)
        for method, (score_name, rule) in METHODS.items():
            scores = np.array([getattr(s, score_name) for s in scored])
            t = threshold_for(rule, scores[cal], correct[cal], epsilon, delta)
            per_method[method].append({**selection_outcome(scores[test], correct[test], t), "threshold": t})
    out = {}
    for method, rows in per_method.items():
        fdr = np.array([r["fdr"] for r in rows])
        out[method] = {"violation_rate": float((fdr > epsilon).mean()), "fdr_mean": float(fdr.mean()),
                       "fdr_q90": float(np.quantile(fdr, 0.9)),
                       "selection_rate": float(np.mean([r["selection_rate"] for r in rows])),
                       "recall": float(np.mean([r["recall"] for r in rows])),
                       "abstained": float(np.mean([math.isinf(r["threshold"]) and r["threshold"] > 0 for r in rows]))}
    return out


def disagreements(scored: list[Scored]) -> dict:
    """Where the fuzz tests and the shipped tests judge a candidate differently."""
    ok = [s for s in scored if s.status == "ok"]
    fuzz_fail_shipped_pass = [s for s in ok if s.correct and s.fuzz_score < 1.0]
    fuzz_pass_shipped_fail = [s for s in ok if not s.correct and s.fuzz_score == 1.0]
    return {"candidates": len(scored),
            "fuzz_fails_shipped_passes": len(fuzz_fail_shipped_pass),
            "fuzz_passes_shipped_fails": len(fuzz_pass_shipped_fail),
            "tasks_fuzz_stricter": sorted({s.task_id for s in fuzz_fail_shipped_pass}),
            "tasks_shipped_stricter": sorted({s.task_id for s in fuzz_pass_shipped_fail})}


def server_candidates(client):
    """A generator that asks a model server (:class:`.llm_client.ChatClient`) for each candidate;
    a reply that defines the whole function is used with the prompt's imports, else it is read as
    the body that completes the prompt."""
    from .llm_client import extract_code

    def generate(problem: Problem, n: int, seed: int) -> list[Candidate]:
        imports = "".join(line + "\n" for line in problem.prompt.splitlines() if line.startswith(("import ", "from ")))
        out = []
        for i in range(n):
            code = extract_code(client.complete("Complete this Python function. Reply with the whole function in "
                                                "one ```python block.\n\n" + problem.prompt, seed=seed * 1000 + i))
            defines = f"def {problem.entry_point}(" in code
            out.append(Candidate(problem.task_id, imports + code if defines else problem.prompt + code, ("server",)))
        return out

    return generate


def score_problems(problems, n_candidates: int, seed: int, generator=None, n_hypothesis: int = 20,
                   n_mutation: int = 15, progress=None) -> list[Scored]:
    """Generate ``n_candidates`` programs per problem (``generator(problem, n, seed)``, default
    the offline mutant generator), build the fuzz tests and score every candidate."""
    from .code_mutants import offline_candidates

    if n_candidates < 1:
        raise ValueError(f"n_candidates must be at least 1, got {n_candidates}")
    generator = generator or offline_candidates
    scored = []
    for problem in problems:
        tests = build_tests(problem, n_hypothesis, n_mutation, seed)
        scored += [score_candidate(problem, c, tests) for c in generator(problem, n_candidates, seed)]
        if progress:
            progress(problem)
    return scored
