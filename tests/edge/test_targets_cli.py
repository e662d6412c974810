import json

from click.testing import CliRunner

from edgekit.cli import main
from edgekit.targets import target_names


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_targets_table_and_outputs(tmp_path):
    result = run("targets")
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[0]
    for column in ("name", "kind", "host arch", "memory (GiB)", "bandwidth (GB/s)", "fp16 TFLOP/s",
                   "fp8 TFLOP/s", "fp4 TFLOP/s", "native formats", "TVM target", "runs here"):
        assert f"| {column} |" in header
    for name in target_names():
        assert f"| {name} |" in result.output
    assert "| host | cpu | x86_64 |" in result.output
    assert "| b200 | cuda | x86_64 | 180 | 8000 | 2250 | 4500 | 9000 | mxfp8_e4m3," in result.output
    assert "| rpi4 | cpu | aarch64 | 8 | 12.8 |" in result.output

    run("targets", "-o", str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    rows = {r["name"]: r for r in data["targets"]}
    assert set(rows) == set(target_names())
    assert rows["h100"]["fp8 TFLOP/s"] == 1979 and rows["h100"]["fp4 TFLOP/s"] is None
    assert rows["jetson-orin"]["TVM target"] == "nvidia/jetson-agx-orin-32gb + host cortex-a78ae"
    assert rows["rpi5"]["runs here"] == "no" and data["meta"]["versions"]
    run("targets", "-o", str(tmp_path / "t.csv"))
    assert (tmp_path / "t.csv").read_text().startswith("name,kind,host arch,memory (GiB)")


def test_targets_takes_specs():
    result = run("targets", "rpi4", "nvidia/nvidia-a100", '{"kind": "cuda", "arch": "sm_90"}')
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()[2:]
    assert len(lines) == 3
    assert lines[0].startswith("| rpi4 |") and "| nvidia/nvidia-a100 | cuda |" in lines[1]
    assert "| cuda sm_90 |" in lines[2]


def test_targets_help_and_bad_spec():
    assert "Usage:" in run("targets", "--help").output
    result = run("targets", "rpi6")
    assert result.exit_code == 2
    assert "unknown target 'rpi6'" in result.output and "jetson-orin" in result.output
