import json

import pytest
from click.testing import CliRunner

from edgekit.jobs.quantize import parse_size
from edgekit.quantize_cli import quantize

SMALL = "6to4,12to8,4to2,8to4,16to8,12to4,14to4,16to4"  # codebooks whose search is quick


def run(args):
    return CliRunner().invoke(quantize, args, catch_exceptions=False)


def test_bits_land_within_one_percent(tmp_path):
    out = tmp_path / "q.json"
    result = run(["digits", "--bits", "2.6", "--configs", SMALL, "--finetune-steps", "4", "--calibration-batches", "2",
                  "--codes", str(tmp_path / "codes.npz"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    totals = data["totals"][0]
    assert 0.99 * 2.6 <= totals["bits_per_weight"] <= 2.6
    assert {r["layer"] for r in data["layers"]} == {"0", "2", "4"}
    assert totals["quantized_bytes"] == sum(r["bytes"] for r in data["layers"]) + totals["codebook_bytes"]
    assert "achieved" in result.output and (tmp_path / "codes.npz").is_file()
    assert data["result"][0]["quantized"]["accuracy"] > 0.5  # the MLP still classifies digits


def test_a_budget_lands_within_one_percent(tmp_path):
    out = tmp_path / "q.json"
    result = run(["digits", "--budget", "30kB", "--configs", SMALL, "--finetune-steps", "0", "--calibration-batches", "1",
                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    totals = json.loads(out.read_text())["totals"][0]
    assert 0.99 * 30_000 <= totals["model_bytes"] <= 30_000


def test_a_target_memory_is_a_ceiling(tmp_path):
    out = tmp_path / "q.json"
    result = run(["digits", "--target", "rpi4", "--configs", "8to4,16to4", "--finetune-steps", "0",
                  "--calibration-batches", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {r["format"] for r in data["layers"]} == {"liftquant_16to4"}  # 8 GiB holds the largest encoding
    assert "a ceiling" in result.output


@pytest.mark.parametrize("args, message", [
    (["--bits", "9"], "out of reach"),
    (["--bits", "0.5"], "out of reach"),
    (["--budget", "1kB"], "does not even hold the model's float parameters"),
    (["--budget", "12kB"], "smaller than the smallest encoding"),
    (["--budget", "12 parsecs"], "budget must be a size"),
    ([], "exactly one of --bits, --budget or --target"),
    (["--bits", "2", "--budget", "1MB"], "exactly one of"),
    (["--bits", "2", "--configs", "3to1"], "unknown LiftQuant configuration"),
])
def test_bad_requests_are_refused(args, message):
    result = CliRunner().invoke(quantize, ["digits", "--configs", "8to4,16to4", "--finetune-steps", "0",
                                           "--calibration-batches", "1", *args])
    assert result.exit_code != 0
    assert message in result.output


def test_parse_size():
    assert parse_size("300MB") == 300_000_000
    assert parse_size("1.5GiB") == int(1.5 * 2**30)
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError, match="budget must be a size"):
        parse_size("lots")


def test_registered_on_the_edgekit_command():
    from edgekit.cli import main

    assert "quantize" in CliRunner().invoke(main, ["--help"]).output
    result = CliRunner().invoke(main, ["quantize", "digits", "--bits", "9", "--configs", "8to4",
                                       "--finetune-steps", "0", "--calibration-batches", "1"])
    assert result.exit_code != 0 and "out of reach" in result.output
