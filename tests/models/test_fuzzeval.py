import ast
import json

import numpy as np
import pytest

from edgekit.models.code_mutants import OPERATORS, Site, apply_mutations, mutation_sites, offline_candidates
from edgekit.models.fuzz_inputs import fuzz_inputs, hypothesis_inputs, mutate_value, strategy_from_values
from edgekit.models.fuzzeval import (
    build_tests,
    evaluate_program,
    evaluate_selection,
    score_candidate,
    score_problems,
    server_candidates,
    values_equal,
)
from edgekit.models.humaneval import docstring_examples, get_problem
from edgekit.models.llm_client import ChatClient, extract_code
from edgekit.models.pac_selection import clopper_pearson_upper, empirical_threshold, pac_threshold

CLOSE = get_problem("HumanEval/0")  # has_close_elements(numbers, threshold)


def test_docstring_examples_are_read_as_literal_argument_tuples():
    assert docstring_examples(CLOSE) == [([1.0, 2.0, 3.0], 0.5), ([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)]
    # the ==> style of other prompts, and string arguments with brackets in them
    assert ("(()()) ((())) () ((())()())",) in docstring_examples(get_problem("HumanEval/6"))


def test_strategies_follow_the_examples_ranges_and_alphabets():
    from hypothesis import given, settings

    seen = []

    @settings(max_examples=60, database=None, derandomize=True)
    @given(strategy_from_values([3, 10, 0]), strategy_from_values(["(()", "()"]))
    def collect(n, s):
        seen.append((n, s))

    collect()
    assert all(n >= 0 for n, _ in seen) and any(n > 10 for n, _ in seen)
    assert all(set(s) <= {"(", ")"} for _, s in seen)


def test_hypothesis_inputs_are_reproducible_from_the_seed():
    a, b = hypothesis_inputs(CLOSE, 10, seed_value=3), hypothesis_inputs(CLOSE, 10, seed_value=3)
    assert a == b and len(a) == 10
    assert a != hypothesis_inputs(CLOSE, 10, seed_value=4)
    assert all(isinstance(x, list) and isinstance(t, float) for x, t in a)


def test_mutated_values_keep_their_type_and_change():
    rng = np.random.default_rng(0)
    for value in (5, 2.5, "abc", [1, 2, 3], (1, "a")):
        out = [mutate_value(value, rng) for _ in range(20)]
        assert all(type(v) is type(value) for v in out)
        assert any(v != value for v in out)


def test_fuzz_inputs_carry_their_origin_and_never_repeat():
    tagged = fuzz_inputs(CLOSE, n_hypothesis=8, n_mutation=6, seed_value=0)
    origins = [o for _, o in tagged]
    assert origins[:2] == ["example", "example"] and "mutation" in origins and "hypothesis" in origins
    assert len({repr(a) for a, _ in tagged}) == len(tagged)


def test_each_mutation_operator_changes_the_program_as_named():
    program = ast.unparse(ast.parse(CLOSE.solution)) + "\n"
    sites = mutation_sites(program, CLOSE.entry_point)
    assert {s.operator for s in sites} >= {"flip_comparison", "drop_branch", "swap_operator"}
    rng = np.random.default_rng(0)
    flip = next(s for s in sites if s.operator == "flip_comparison")
    flipped = apply_mutations(program, CLOSE.entry_point, [flip], rng)
    assert "if idx == idx2" in flipped and "if idx != idx2" not in flipped
    for site in sites:
        mutant = apply_mutations(program, CLOSE.entry_point, [site], rng)
        ast.parse(mutant)
        assert mutant != program
    with pytest.raises(ValueError, match="operator"):
        apply_mutations(program, CLOSE.entry_point, [Site("typo", 0)], rng)
    assert set(OPERATORS) == {"off_by_one", "flip_comparison", "drop_branch", "wrong_constant", "swap_operator"}


def test_the_canonical_solution_passes_every_test_and_a_mutant_does_not():
    tests = build_tests(CLOSE, n_hypothesis=10, n_mutation=6, seed=0)
    assert len(tests) >= 10
    good = evaluate_program(CLOSE, CLOSE.solution, tests)
    assert good.status == "ok" and all(good.passed) and good.shipped
    wrong = CLOSE.solution.replace("distance < threshold", "distance > threshold")
    bad = evaluate_program(CLOSE, wrong, tests)
    assert bad.status == "ok" and not bad.shipped and 0 < sum(bad.passed) < len(tests)


def test_programs_that_do_not_parse_loop_or_escape_fail_with_the_reason():
    tests = build_tests(CLOSE, n_hypothesis=4, n_mutation=2, seed=0)
    broken = evaluate_program(CLOSE, CLOSE.prompt + "    return (\n", tests)
    assert broken.status == "syntax_error" and "does not parse" in broken.detail and not any(broken.passed)
    looping = CLOSE.prompt + "    while True:\n        pass\n"
    assert not any(evaluate_program(CLOSE, looping, tests).passed)
    escaping = CLOSE.prompt + "    import os\n    os.fork()\n"
    report = evaluate_program(CLOSE, escaping, tests)
    assert report.status == "violation" and not report.shipped


def test_values_compare_with_a_float_tolerance_only():
    assert values_equal(0.1 + 0.2, 0.3) and values_equal([1.0, (2, 3)], [1.0 + 1e-12, (2, 3)])
    assert not values_equal(0.31, 0.3) and not values_equal([1, 2], (1, 2)) and not values_equal("1", 1)


def test_offline_candidates_mix_correct_programs_and_mutants_reproducibly():
    a = offline_candidates(CLOSE, 20, seed_value=1)
    assert a == offline_candidates(CLOSE, 20, seed_value=1)
    kinds = {bool(c.mutations) for c in a}
    assert kinds == {True, False}
    with pytest.raises(ValueError, match="p_correct"):
        offline_candidates(CLOSE, 2, 0, p_correct=1.5)


def test_clopper_pearson_matches_the_closed_form_and_refuses_bad_counts():
    assert clopper_pearson_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert clopper_pearson_upper(0, 0, 0.05) == 1.0
    assert clopper_pearson_upper(3, 100, 0.05) > clopper_pearson_upper(3, 100, 0.2) > 0.03
    with pytest.raises(ValueError, match="errors"):
        clopper_pearson_upper(5, 3, 0.1)
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson_upper(1, 3, 1.5)


def test_the_pac_threshold_keeps_its_promise_where_the_empirical_one_does_not():
    # score ~ U(0, 1), P(wrong | score) = 1 - score: selecting score >= t has FDR (1 - t) / 2.
    rng = np.random.default_rng(0)
    epsilon, delta = 0.1, 0.1
    pac_fail = emp_fail = 0
    draws = 200
    for _ in range(draws):
        s = rng.random(400)
        correct = rng.random(400) < s
        t_pac, t_emp = pac_threshold(s, correct, epsilon, delta), empirical_threshold(s, correct, epsilon)
        pac_fail += (1 - t_pac) / 2 > epsilon
        emp_fail += (1 - t_emp) / 2 > epsilon
    assert pac_fail / draws <= delta
    assert emp_fail / draws > 2 * delta


def test_selection_inputs_are_checked():
    with pytest.raises(ValueError, match="epsilon"):
        pac_threshold([0.5], [True], 0.0, 0.1)
    with pytest.raises(ValueError, match="delta"):
        pac_threshold([0.5], [True], 0.1, 1.0)
    with pytest.raises(ValueError, match="one length"):
        pac_threshold([0.5, 0.2], [True], 0.1, 0.1)


def test_selection_over_splits_on_scored_candidates():
    scored = score_problems([CLOSE, get_problem("HumanEval/2")], 6, seed=0, n_hypothesis=6, n_mutation=4)
    result = evaluate_selection(scored, 0.1, 0.1, splits=20, seed=0)
    assert result["accept_all"]["selection_rate"] == 1.0
    assert result["fuzz_all_pass"]["fdr_mean"] <= result["accept_all"]["fdr_mean"]
    with pytest.raises(ValueError, match="split"):
        evaluate_selection(scored, 0.1, 0.1, splits=2, seed=0, by="task")


def test_the_server_client_builds_a_chat_request_without_sending_it():
    client = ChatClient("http://localhost:8000/v1", "my-model", api_key="k")
    request = client.request("hello", seed=3)
    body = json.loads(request.data)
    assert request.full_url == "http://localhost:8000/v1/chat/completions"
    assert body["model"] == "my-model" and body["messages"][-1]["content"] == "hello" and body["seed"] == 3
    assert request.get_header("Authorization") == "Bearer k"
    assert extract_code("text\n```python\ndef f():\n    return 1\n```\nmore") == "def f():\n    return 1\n"
    with pytest.raises(ValueError, match="base_url"):
        ChatClient("localhost:8000", "m")
    assert callable(server_candidates(client))


def test_edgekit_fuzzeval_scores_and_selects(tmp_path):
    from click.testing import CliRunner

    from edgekit.cli import main

    out = tmp_path / "f.json"
    result = CliRunner().invoke(main, ["fuzzeval", "--problems", "2", "--candidates", "3", "--splits", "5",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert len(saved["scored"]) == 6 and set(saved["selection"]) >= {"fuzzeval_pac", "accept_all"}
    assert CliRunner().invoke(main, ["fuzzeval", "--server", "http://localhost:1/v1"]).exit_code == 2


def test_without_tests_a_program_scores_zero_whatever_its_label():
    from edgekit.models.code_mutants import Candidate

    scored = score_candidate(CLOSE, Candidate(CLOSE.task_id, CLOSE.solution, ()), [])
    assert scored.correct and scored.fuzz_score == 0.0 and scored.example_score == 0.0
