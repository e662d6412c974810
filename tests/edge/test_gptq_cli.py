"""``edgekit quantize --method gptq`` (edge/gptq_job.py)."""

import json

import pytest
from click.testing import CliRunner

from edgekit.jobs.gptq import choose_grid
from edgekit.quantize_cli import quantize


def run(args):
    return CliRunner().invoke(quantize, ["digits", "--method", "gptq", "--calibration-batches", "2", *args])


def test_bits_pick_the_widest_grid_that_fits(tmp_path):
    out = tmp_path / "q.json"
    result = run(["--bits", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    totals, layers = data["totals"][0], data["layers"]
    # the 64-input first layer rules out groups of 128; INT3 with 64 would take 3.6 bits
    assert {r["format"] for r in layers} == {"gptq_int2_g64"}
    assert 2.5 < totals["bits_per_weight"] <= 3
    assert totals["quantized_bytes"] == sum(r["bytes"] for r in layers)
    assert data["result"][0]["quantized"]["accuracy"] > 0.8
    assert "GPTQ int2_g64" in result.output


def test_a_target_memory_takes_the_largest_grid(tmp_path):
    out = tmp_path / "q.json"
    result = run(["--target", "rpi4", "--no-input-scaling", "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {r["format"] for r in data["layers"]} == {"gptq_int4_g64"}
    assert all(r["alpha"] is None for r in data["layers"])


def test_choose_grid_counts_input_multipliers():
    shapes = {"a": (128, 256)}
    # INT3 at groups of 128: 3.25 bits + rotation signs; the float16 multipliers add 2 * 256 bytes
    assert choose_grid(shapes, ["int3_g128", "int2_g64"], scaling=False, bits=3.3).name == "int3_g128"
    assert choose_grid(shapes, ["int3_g128", "int2_g64"], scaling=True, bits=3.3).name == "int2_g64"


@pytest.mark.parametrize("args, message", [
    (["--bits", "3", "--grids", "int4_g128"], "does not divide layer(s) '0' (64 inputs)"),
    (["--bits", "1"], "the smallest grid, int2_g64, needs"),
    (["--bits", "3", "--grids", "int5_g64"], "unknown grid 'int5_g64'"),
    (["--bits", "3", "--configs", "8to4"], "GPTQ takes --grids"),
    (["--bits", "3", "--codes", "c.npz"], "with --method gptq use --save"),
])
def test_bad_requests_are_refused(args, message):
    result = run(args)
    assert result.exit_code != 0
    assert message in result.output


def test_grids_need_the_gptq_method():
    result = CliRunner().invoke(quantize, ["digits", "--bits", "3", "--grids", "int4_g64"])
    assert result.exit_code != 0 and "pass --method gptq" in result.output
