"""edgekit study, as a user runs it."""

import json

from click.testing import CliRunner

from edgekit.cli import main
from edgekit.models.studies import study_names


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_study_lists_every_study():
    result = run("study")
    assert result.exit_code == 0, result.output
    assert all(f"| {name} |" in result.output for name in study_names())


def test_study_runs_and_writes_its_result_with_provenance(tmp_path):
    result = run("study", "comparison_oracle", "--tiny", "--config", "epsilon=0.2", "-o", tmp_path / "co.json")
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "co.json").read_text())
    values = {row["metric"]: row["value"] for row in written["study"]}
    assert values["estimator_queries"] == values["estimator_bound"] and values["estimator_error"] <= 0.2
    assert written["meta"]["config"]["epsilon"] == 0.2 and "git_sha" in written["meta"]


def test_bad_study_input_is_one_clear_error():
    for args, message in ((("nope",), "unknown study 'nope'; studies: dcla"),
                          (("dcla", "--config", "penalty=l0"), "config key 'penalty' of DCLAConfig must be one of l1_minus_l2, capped_l1, got 'l0'"),
                          (("comparison_oracle", "--config", "epsilon=1.5"), "config key 'epsilon' of ComparisonOracleConfig must be a number in (0, 1), got 1.5"),
                          (("dcla", "--config", "steps"), "must look like KEY=VALUE")):
        result = run("study", *args)
        assert result.exit_code == 1 and message in result.output, result.output


def test_the_checker_systems_run_as_studies_with_their_baselines(tmp_path):
    """FuzzEval, NEMO and LabBuilder through `edgekit study` at their tiny sizes: each with the baselines."""
    expected = {"fuzzeval": ("violation_rate_fuzzeval_pac", "violation_rate_fuzz_empirical"),
                "nemo": ("accuracy_validated_mbr", "accuracy_single"),
                "labbuilder": ("reachable_step_fraction_optimised", "reachable_step_fraction_random")}
    for name, keys in expected.items():
        out = tmp_path / f"{name}.json"
        result = run("study", name, "--tiny", "-o", out)
        assert result.exit_code == 0, result.output
        values = {row["metric"]: row["value"] for row in json.loads(out.read_text())["study"]}
        assert all(0.0 <= values[k] <= 1.0 for k in keys), values
    assert values["collision_rate_optimised"] == 0.0  # the optimised layouts are repaired until nothing collides
    result = run("study", "nemo", "--config", "candidates=0")
    assert result.exit_code == 1 and "config key 'candidates' of NemoConfig must be an integer >= 1, got 0" in result.output
