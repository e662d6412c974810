import json

import pytest
from click.testing import CliRunner

from edgekit import __version__
from edgekit.cli import main

COMMANDS = ["formats", "qsnr", "demo", "targets", "compile", "export"]


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_version_and_help():
    assert run("--version").output.strip() == f"edgekit, version {__version__}"
    for cmd in ["", *COMMANDS]:
        result = run(*([cmd] if cmd else []), "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_formats_table_and_outputs(tmp_path):
    result = run("formats")
    assert result.exit_code == 0
    for name in ("mxfp8_e4m3", "mxfp6_e2m3", "mxint4", "nvfp4"):
        assert name in result.output
    assert "| nvfp4 | e2m1 | 4.5 | 16 |" in result.output
    run("formats", "-o", str(tmp_path / "f.json"))
    data = json.loads((tmp_path / "f.json").read_text())
    assert {r["format"] for r in data["formats"]} >= {"mxfp4", "mxint8", "nvfp4"}
    assert data["meta"]["versions"]["numba"]
    run("formats", "-o", str(tmp_path / "f.csv"))
    assert (tmp_path / "f.csv").read_text().splitlines()[0].startswith("format,element,bits/element")
    run("formats", "-o", str(tmp_path / "f.txt"), "--output-format", "md")
    assert (tmp_path / "f.txt").read_text().startswith("| format |")


def test_qsnr_writes_json_and_plot(tmp_path):
    out = tmp_path / "q.json"
    result = run("qsnr", "--tensors", "student-t(3),gaussian", "--rows", "64", "--rotation", "none",
                 "--format", "mxint8", "--format", "mxfp8_e4m3", "--format", "mxfp4", "--blocks", "tensor,64,16",
                 "-o", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert len(data["qsnr"]) == 2 * 3 * 3
    cross = {(c["tensor"], c["int"]): c for c in data["crossover"]}
    # heavy tails: FP8 wins with one scale per tensor, INT8 wins once blocks are small
    assert cross[("student-t(3)", "mxint8")]["fp_ahead_at_tensor_level"]
    assert cross[("student-t(3)", "mxint8")]["int_ahead_from_block"] in (64, 16)
    assert (tmp_path / "q.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bias = {(b["scale"], b["clipping"][:4]): b["mean_error"] for b in data["clipping_bias"]}
    assert abs(bias[("bf16", "asym")]) > 3 * abs(bias[("bf16", "symm")])


@pytest.mark.parametrize(
    "args,message",
    [
        (["qsnr", "--format", "mxfp5"], "unknown format 'mxfp5'; allowed: fp32, fp16, bf16, mxfp8_e4m3"),
        (["qsnr", "--blocks", "32,x"], "'x' is not a block size"),
        (["qsnr", "--tensors", "cauchy"], "unknown ['cauchy']; allowed: gaussian"),
        (["qsnr", "--cols", "100"], "must be a multiple of 32"),
        (["formats", "--output-format", "xml"], "'xml' is not one of 'md', 'json', 'csv'"),
    ],
)
def test_bad_options_are_named(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output


def test_demo_runs_end_to_end(tmp_path):
    result = run("demo", "-o", str(tmp_path / "demo.json"))
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "demo.json").read_text())
    model = {r["format"]: r for r in data["model"]}
    assert model["fp32"]["test accuracy"] > 0.95
    assert model["mxfp4"]["bits/weight"] == pytest.approx(4.25)
    assert model["mxint8"]["weight QSNR dB"] > model["mxfp8_e4m3"]["weight QSNR dB"] > model["mxfp4"]["weight QSNR dB"]
    assert len(data["tensor_qsnr"]) == 8


def test_demo_takes_a_format_subset():
    result = run("demo", "--format", "mxfp4", "--format", "nvfp4")
    assert result.exit_code == 0
    assert "| mxfp4 | 4.25 |" in result.output and "| mxint8 | 8.25 |" not in result.output
