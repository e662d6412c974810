from dataclasses import replace

import numpy as np
import pytest

from edgekit.models.nemo import (
    Outcome,
    SolvedMemory,
    feedback_for,
    mbr_select,
    run_model_program,
    run_suite,
    self_consistency,
    solve_candidate,
)
from edgekit.models.nemo_agent import SLIPS, OfflineAgent, formulate, inject, parse, render, repair
from edgekit.models.nemo_problems import FAMILIES, generate, suite
from edgekit.models.nemo_simulators import judge, simulate, simulator_program

PRODUCTION = generate("production", 3)
KNAPSACK = generate("knapsack", 3)


def solve(spec):
    return run_model_program(render(spec), spec.solver)


def test_the_agent_reads_every_family_back_from_its_text():
    for problem in suite(2, 5):
        assert parse(problem.text) == (problem.family, problem.data)
    with pytest.raises(ValueError, match="cannot tell which kind"):
        parse("Bake a cake with flour and eggs.")
    with pytest.raises(ValueError, match="families"):
        generate("routing", 0)


@pytest.mark.parametrize("problem", [PRODUCTION, KNAPSACK], ids=["highs-lp", "cpsat"])
def test_correct_models_reach_the_enumerated_optimum_with_the_real_solvers(problem):
    out = solve(formulate(*parse(problem.text)))
    assert out.status == "optimal"
    assert out.objective == pytest.approx(problem.optimum)
    assert judge(problem, out.solution)


def test_the_simulator_names_broken_constraints_and_computes_the_objective():
    everything = {"take_" + i: 1 for i in KNAPSACK.data["items"]}
    violations, value = simulate("knapsack", KNAPSACK.data, everything)
    assert violations == ["capacity"] and value == sum(KNAPSACK.data["value"].values())
    from edgekit.models.nemo import simulate_in_sandbox

    assert simulate_in_sandbox(simulator_program("knapsack", KNAPSACK.data), everything) == (violations, value)
    # a simulator generated without the capacity check misses it
    assert simulate("knapsack", KNAPSACK.data, everything, skip=("capacity",))[0] == []
    assert not judge(KNAPSACK, everything)


def test_each_slip_changes_the_model_as_named():
    spec = formulate(*parse(PRODUCTION.text))
    rng = np.random.default_rng(0)
    assert len(inject(spec, "drop_constraint", rng).rows) == len(spec.rows) - 1
    flipped = inject(spec, "sign_slip", rng)
    assert sorted(r.sense for r in flipped.rows) != sorted(r.sense for r in spec.rows)
    assert inject(spec, "wrong_sense", rng).sense == "min"
    slipped = inject(spec, "coefficient_slip", rng)
    assert (slipped.objective, slipped.rows) != (spec.objective, spec.rows)
    broken = inject(spec, "truncated_program", rng)
    out = solve(broken)
    assert out.status == "program_error" and "does not parse" in out.detail
    with pytest.raises(ValueError, match="slips"):
        inject(spec, "typo", rng)
    assert set(SLIPS) == {"drop_constraint", "sign_slip", "coefficient_slip", "wrong_sense", "truncated_program"}


def test_a_dropped_constraint_is_caught_by_the_simulator_and_repaired():
    family, data = parse(KNAPSACK.text)
    right = formulate(family, data)
    spec = replace(right, rows=())  # the capacity constraint forgotten
    simulator = simulator_program(family, data)
    feedback = feedback_for(solve(spec), simulator)
    assert feedback == {"violations": ["capacity"]}
    fixed = repair(spec, data, feedback)
    out = solve(fixed)
    assert feedback_for(out, simulator) is None and judge(KNAPSACK, out.solution)


def test_an_objective_slip_shows_as_a_mismatch_and_a_solver_failure_is_reported():
    family, data = parse(PRODUCTION.text)
    right = formulate(family, data)
    simulator = simulator_program(family, data)
    name = next(iter(right.objective))
    slipped = replace(right, objective={**right.objective, name: right.objective[name] + 5})
    feedback = feedback_for(solve(slipped), simulator)
    assert "objective_mismatch" in feedback
    assert solve(repair(slipped, data, feedback)).objective == pytest.approx(PRODUCTION.optimum)
    unbounded = replace(right, rows=tuple(replace(r, sense=">=") for r in right.rows))
    out = solve(unbounded)
    assert out.status != "optimal"
    feedback = feedback_for(out, simulator)
    assert "solver_status" in feedback
    assert solve(repair(unbounded, data, feedback)).objective == pytest.approx(PRODUCTION.optimum)
    with pytest.raises(ValueError, match="feedback"):
        repair(right, data, {"advice": "try harder"})


def test_a_wrong_objective_sense_passes_validation_which_is_why_candidates_are_compared():
    family, data = parse(PRODUCTION.text)
    wrong = inject(formulate(family, data), "wrong_sense", np.random.default_rng(0))
    out = solve(wrong)
    assert feedback_for(out, simulator_program(family, data)) is None
    assert not judge(PRODUCTION, out.solution)


def test_self_consistency_votes_and_mbr_takes_the_medoid():
    outs = [Outcome("optimal", v, {"x": v}) for v in (100.0, 100.0, 10.0, 11.0, 12.0)]
    assert outs[self_consistency(outs)].objective == 100.0
    assert outs[mbr_select(outs)].objective == 11.0
    failed = [Outcome("infeasible"), Outcome("program_error")]
    assert self_consistency(failed) is None and mbr_select(failed) is None


def test_memory_fixes_structure_from_a_similar_solved_problem_but_not_numbers():
    memory = SolvedMemory()
    other = generate("production", 9)
    memory.add(other.text, formulate(*parse(other.text)))
    assert memory.lookup(KNAPSACK.text) is None or memory.lookup(KNAPSACK.text)["family"] == "production"
    family, data = parse(PRODUCTION.text)
    right = formulate(family, data)
    rng = np.random.default_rng(1)
    wrong = inject(inject(right, "wrong_sense", rng), "drop_constraint", rng)
    fixed = memory.apply(PRODUCTION.text, wrong, data)
    assert fixed.sense == "max" and {r.label for r in fixed.rows} == {r.label for r in right.rows}
    slipped = replace(right, objective={k: v + 1 for k, v in right.objective.items()})
    assert memory.apply(PRODUCTION.text, slipped, data).objective == slipped.objective
    assert SolvedMemory().apply(PRODUCTION.text, wrong, data) == wrong


def test_the_repair_loop_counts_its_rounds_and_a_suite_run_is_reproducible():
    agent = OfflineAgent(p_clean=0.0, p_second=0.0, p_sim_gap=0.0)
    attempt = solve_candidate(KNAPSACK, agent, np.random.default_rng(4), max_rounds=3)
    assert attempt.rounds <= 3
    assert len(attempt.feedback) == attempt.rounds + (0 if attempt.validated else 1)
    problems = [PRODUCTION, generate("transport", 1)]
    a = run_suite(problems, OfflineAgent(), 3, 2, seed=0)
    assert a == run_suite(problems, OfflineAgent(), 3, 2, seed=0)
    assert set(a[0]) >= {"single", "mbr", "validated_mbr_memory", "rounds"}
    with pytest.raises(ValueError, match="p_clean"):
        OfflineAgent(p_clean=2.0)
    assert FAMILIES[0] == "production"


class CannedServer:
    """Stands in for a model server in tests: replays fixed replies and records the prompts."""

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def complete(self, prompt, seed=None):
        self.prompts.append(prompt)
        return self.replies.pop(0)


def test_the_server_agent_turns_replies_into_models_simulators_and_repairs():
    from edgekit.models.nemo_server_agent import ServerAgent, spec_from_json, spec_to_json

    family, data = parse(KNAPSACK.text)
    right = formulate(family, data)
    assert spec_from_json(spec_to_json(right), family) == right
    forgot = replace(right, rows=())
    simulator = "```python\n" + simulator_program(family, data) + "```"
    server = CannedServer(["Here it is:\n" + spec_to_json(forgot), simulator, spec_to_json(right)])
    attempt = solve_candidate(KNAPSACK, ServerAgent(server), np.random.default_rng(0), max_rounds=2)
    assert attempt.validated and attempt.rounds == 1 and attempt.feedback == [{"violations": ["capacity"]}]
    assert judge(KNAPSACK, attempt.final.solution)
    assert KNAPSACK.text in server.prompts[0] and '"capacity"' in server.prompts[2]
    with pytest.raises(ValueError, match="solver"):
        spec_from_json('{"solver": "gurobi", "sense": "max", "variables": {}, "constraints": [], "objective": {}}')
    with pytest.raises(ValueError, match="unknown"):
        spec_from_json('{"solver": "highs", "sense": "max", "variables": {"a": ["cont", 0, null]}, '
                       '"constraints": [{"label": "c", "coeffs": {"b": 1}, "sense": "<=", "rhs": 1}], "objective": {}}')


def test_edgekit_nemo_solves_a_generated_problem_and_refuses_bad_input(tmp_path):
    from click.testing import CliRunner

    from edgekit.cli import main

    result = CliRunner().invoke(main, ["nemo", "--family", "production", "--seed", "3", "--candidates", "2"])
    assert result.exit_code == 0, result.output
    assert f"known optimum {PRODUCTION.optimum}" in result.output
    text = tmp_path / "cake.txt"
    text.write_text("Bake a cake with flour and eggs.")
    result = CliRunner().invoke(main, ["nemo", str(text)])
    assert result.exit_code == 1 and "cannot tell which kind" in result.output
    assert CliRunner().invoke(main, ["nemo", "--family", "routing"]).exit_code == 2
