"""NEMO: word problems to executable optimisation models, validated by an independent simulator.

Per candidate: the agent writes a solver program (HiGHS or CP-SAT) and, separately, a simulator
(:mod:`.nemo_simulators`); both run in the sandbox. The simulator replays the optimizer's
solution: a broken constraint, an objective that disagrees with the one reported, a solver that
finds no solution, or a program that does not run goes back to the agent as feedback, and the
agent repairs (at most ``max_rounds`` times). Among candidates, **minimum Bayes risk** picks the
answer closest on average to all others (relative objective gap plus solution distance);
**self-consistency** takes the most common objective value. A **memory** of solved problems
(TF-IDF retrieval over their texts) gives a new problem the structure of a validated model of a
similar one (objective sense, the constraint kinds and their senses), which corrects structural
slips but not wrong numbers.
"""

from __future__ import annotations

import ast
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from .nemo_agent import ModelSpec, OfflineAgent, formulate, render
from .nemo_problems import TOL, WordProblem
from .nemo_simulators import judge, solution_payload
from .sandbox import Limits, run_python

SOLVER_LIMITS = Limits(seconds=30.0, memory_mb=4096, output_bytes=1_000_000, open_files=256, site_packages=True)
SIMULATOR_LIMITS = Limits(seconds=10.0, memory_mb=512)
CONDITIONS = ("single", "single_memory", "single_validated", "self_consistency", "mbr", "validated_mbr",
              "validated_mbr_memory")


@dataclass(frozen=True)
class Outcome:
    status: str  # optimal | infeasible | unbounded | ... | program_error
    objective: float | None = None
    solution: dict = field(default_factory=dict)
    detail: str = ""


_RUNS: dict[str, Outcome] = {}  # program text -> outcome; a program is deterministic (CP-SAT on one worker)


PRELOAD = {"highs": ("highspy",), "cpsat": ("ortools.sat.python.cp_model",)}


def run_model_program(source: str, solver: str) -> Outcome:
    """Run a generated solver program in the sandbox, its solver (``highs`` or ``cpsat``) imported
    before the audit hook. A program that does not parse is not run."""
    if source in _RUNS:
        return _RUNS[source]
    try:
        ast.parse(source)
    except SyntaxError as err:
        return Outcome("program_error", detail=f"generated code does not parse: line {err.lineno}: {err.msg}")
    result = run_python(source, replace(SOLVER_LIMITS, preload=PRELOAD[solver]))
    marker = "NEMO-RESULT:"
    if result.status != "ok" or marker not in result.stdout:
        outcome = Outcome("program_error", detail=f"{result.status}: {result.detail}")
    else:
        payload = json.loads(result.stdout.rsplit(marker, 1)[1].splitlines()[0])
        outcome = Outcome(payload["status"], payload["objective"], payload["solution"])
    _RUNS[source] = outcome
    return outcome


def simulate_in_sandbox(simulator: str, solution: dict) -> tuple[list[str], float]:
    result = run_python(simulator, SIMULATOR_LIMITS, stdin=solution_payload(solution))
    if result.status != "ok":
        raise RuntimeError(f"the simulator failed: {result.status}: {result.detail}")
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    return payload["violations"], float(payload["objective"])


def feedback_for(outcome: Outcome, simulator: str) -> dict | None:
    """None when the simulator agrees with the optimizer; else what went wrong, for the repair."""
    if outcome.status == "program_error":
        return {"program_error": outcome.detail}
    if outcome.status != "optimal":
        return {"solver_status": outcome.status}
    violations, objective = simulate_in_sandbox(simulator, outcome.solution)
    if violations:
        return {"violations": violations}
    if abs(objective - outcome.objective) > TOL * max(1.0, abs(objective)):
        return {"objective_mismatch": [outcome.objective, objective]}
    return None


@dataclass
class Attempt:
    first: Outcome  # the program as first written (no validation)
    final: Outcome  # after the repair loop
    validated: bool
    rounds: int  # repairs made
    spec: ModelSpec
    feedback: list[dict] = field(default_factory=list)


def solve_candidate(problem: WordProblem, agent: OfflineAgent, rng: np.random.Generator, max_rounds: int,
                    memory: SolvedMemory | None = None) -> Attempt:
    """Propose, run, validate and repair one candidate. ``agent``: an :class:`.nemo_agent.OfflineAgent`
    or a :class:`.nemo_server_agent.ServerAgent`. A simulator that fails, or a repair the agent
    cannot express as a model, ends the loop unvalidated with that reason in the feedback."""
    spec, data = agent.propose(problem.text, rng)
    simulator = agent.simulator(problem.text, data, rng)
    if memory is not None and data is not None:
        spec = memory.apply(problem.text, spec, data)
    first = outcome = run_model_program(render(spec), spec.solver)
    history, repairs = [], 0
    for round_ in range(max_rounds + 1):
        try:
            feedback = feedback_for(outcome, simulator)
        except RuntimeError as err:
            history.append({"simulator_error": str(err)})
            break
        if feedback is None:
            return Attempt(first, outcome, True, repairs, spec, history)
        history.append(feedback)
        if round_ == max_rounds:
            break
        try:
            spec = agent.repair(spec, data, feedback)
        except ValueError as err:
            history.append({"model_error": str(err)})
            break
        repairs += 1
        outcome = run_model_program(render(spec), spec.solver)
    return Attempt(first, outcome, False, repairs, spec, history)


def _answers(outcomes: list[Outcome]) -> list[int]:
    return [i for i, o in enumerate(outcomes) if o.status == "optimal"]


def self_consistency(outcomes: list[Outcome]) -> int | None:
    """Index of a candidate with the most common objective value (to 6 significant digits)."""
    ok = _answers(outcomes)
    if not ok:
        return None
    keys = {i: float(f"{outcomes[i].objective:.6g}") for i in ok}
    top = Counter(keys.values()).most_common(1)[0][0]
    return next(i for i in ok if keys[i] == top)


def mbr_select(outcomes: list[Outcome]) -> int | None:
    """Index of the candidate of least expected loss against the others: relative objective gap
    (capped at 1) plus half the mean absolute difference of the solution values (capped at 1)."""
    ok = _answers(outcomes)
    if not ok:
        return None

    def loss(a: Outcome, b: Outcome) -> float:
        gap = min(1.0, abs(a.objective - b.objective) / max(1.0, abs(b.objective)))
        names = set(a.solution) | set(b.solution)
        dist = np.mean([abs(a.solution.get(n, 0.0) - b.solution.get(n, 0.0)) for n in names]) if names else 0.0
        return gap + 0.5 * min(1.0, dist)

    risks = [sum(loss(outcomes[i], outcomes[j]) for j in ok) for i in ok]
    return ok[int(np.argmin(risks))]


class SolvedMemory:
    """Validated models of solved problems, retrieved by TF-IDF similarity of their texts."""

    def __init__(self, min_similarity: float = 0.3):
        self.min_similarity = min_similarity
        self.texts: list[str] = []
        self.structures: list[dict] = []
        self.reused = 0

    def add(self, text: str, spec: ModelSpec) -> None:
        kinds = {}
        for row in spec.rows:
            kinds.setdefault(row.label.split(":")[0], row.sense)
        self.texts.append(text)
        self.structures.append({"family": spec.family, "sense": spec.sense, "kinds": kinds})

    def lookup(self, text: str) -> dict | None:
        if not self.texts:
            return None
        from sklearn.feature_extraction.text import TfidfVectorizer

        matrix = TfidfVectorizer().fit_transform(self.texts + [text])
        similarity = (matrix[:-1] @ matrix[-1].T).toarray().ravel()
        best = int(np.argmax(similarity))
        return self.structures[best] if similarity[best] >= self.min_similarity else None

    def apply(self, text: str, spec: ModelSpec, data: dict) -> ModelSpec:
        """``spec`` with the objective sense and the constraint kinds and senses of the most similar
        solved problem: missing constraints of those kinds re-derived, senses set as there."""
        exemplar = self.lookup(text)
        if exemplar is None or exemplar["family"] != spec.family:
            return spec
        self.reused += 1
        kinds = exemplar["kinds"]
        present = {r.label for r in spec.rows}
        rows = [replace(r, sense=kinds.get(r.label.split(":")[0], r.sense)) for r in spec.rows]
        rows += [r for r in formulate(spec.family, data).rows if r.label not in present
                 and r.label.split(":")[0] in kinds]
        return replace(spec, rows=tuple(rows), sense=exemplar["sense"])


def solve_problem(problem: WordProblem, agent: OfflineAgent, n_candidates: int, max_rounds: int, seed: int,
                  memory: SolvedMemory | None = None) -> list[Attempt]:
    """``n_candidates`` attempts, each from its own seeded draws (the same with and without memory)."""
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be at least 1, got {n_candidates}")
    if max_rounds < 0:
        raise ValueError(f"max_rounds must be at least 0, got {max_rounds}")
    key = zlib.crc32(problem.text.encode())
    return [solve_candidate(problem, agent, np.random.default_rng([seed, key, k]), max_rounds, memory)
            for k in range(n_candidates)]


def choose(condition: str, attempts: list[Attempt]) -> Outcome | None:
    """The answer each condition gives from the same attempts."""
    firsts = [a.first for a in attempts]
    if condition in ("single", "single_memory"):
        return firsts[0]
    if condition == "single_validated":
        return attempts[0].final
    if condition == "self_consistency":
        i = self_consistency(firsts)
        return None if i is None else firsts[i]
    if condition == "mbr":
        i = mbr_select(firsts)
        return None if i is None else firsts[i]
    if condition in ("validated_mbr", "validated_mbr_memory"):
        pool = [a.final for a in attempts if a.validated] or [a.final for a in attempts]
        i = mbr_select(pool)
        return None if i is None else pool[i]
    raise ValueError(f"unknown condition {condition!r}; conditions: {', '.join(CONDITIONS)}")


def run_suite(problems: list[WordProblem], agent: OfflineAgent, n_candidates: int, max_rounds: int, seed: int,
              progress=None) -> list[dict]:
    """Per problem: whether each condition's answer is right (by :func:`.nemo_simulators.judge`), and
    the repair rounds and validation of each candidate."""
    memory = SolvedMemory()
    rows = []
    for problem in problems:
        attempts = solve_problem(problem, agent, n_candidates, max_rounds, seed)
        with_memory = solve_problem(problem, agent, n_candidates, max_rounds, seed, memory)
        row = {"family": problem.family, "optimum": problem.optimum,
               "validated": [a.validated for a in attempts], "rounds": [a.rounds for a in attempts],
               "rounds_memory": [a.rounds for a in with_memory],
               "slips": [list(a.spec.slips) for a in attempts],
               "first_status": [a.first.status for a in attempts], "memory_reused": memory.reused}
        for condition in CONDITIONS:
            pool = with_memory if condition.endswith("_memory") else attempts
            answer = choose(condition, pool)
            row[condition] = bool(answer is not None and judge(problem, answer.solution))
        chosen = [a for a in with_memory if a.validated]
        if chosen:
            memory.add(problem.text, chosen[mbr_select([a.final for a in chosen])].spec)
        rows.append(row)
        if progress:
            progress(problem)
    return rows
