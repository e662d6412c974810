"""edgekit report: the files, the schema, the page as a browser shows it, the cache, bad input, interruption."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.jobs import build_cache
from edgekit.report_output import FILES, validate

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SMALL = ["--models", "digits", "--formats", "mxfp4,mxint8,liftquant:2", "--targets", "host,rpi4", "--configs", "tiny", "--rounds", "2"]


LIFTQUANT = "liftquant_16to8"  # what liftquant:2 names


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A small report, written into a cache of its own."""
    root = tmp_path_factory.mktemp("report")
    result = run("report", *SMALL, "--cache-dir", root / "cache", "-o", root / "out")
    assert result.exit_code == 0, result.output
    return root, result


def test_report_files_and_schema(report):
    root, result = report
    out = root / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, "edgekit.log"])  # library warnings
    assert f"report written: {(out / 'index.html').resolve()}" in result.stdout
    document = json.loads((out / "report.json").read_text())
    validate(document)
    formats = ["fp32", "mxfp4", "mxint8", LIFTQUANT]
    assert document["meta"]["plan"]["formats"] == formats
    assert {(e["format"], e["source"]) for e in document["evaluations"]} == {(f, "measured") for f in formats}
    assert document["not_applicable"] == []  # the digits MLP is all Linear layers
    scores = {e["format"]: e for e in document["evaluations"]}
    assert scores["mxint8"]["bits/weight"] > scores[LIFTQUANT]["bits/weight"] > 2  # codes, scales and side data
    assert scores[LIFTQUANT]["accuracy"] > 0.5  # digits, 10 classes: the coded model still classifies
    # rpi4 builds need the aarch64 cross compiler (CI installs it); without it they fail with the reason
    targets = ("host", "rpi4") if shutil.which("aarch64-linux-gnu-gcc") else ("host",)
    assert {(b["target"], b["format"]) for b in document["builds"] if b["built"]} == {
        (t, f) for t in targets for f in formats}
    for b in document["builds"]:  # the build stores what the evaluation counted
        assert b["weight_bits"] == pytest.approx(scores[b["format"]]["bits/weight"], rel=1e-6), b["format"]
    assert [r["target"] for r in document["latency"]] == ["host"] * 4  # rpi4 does not run here
    fits = {r["target"]: r for r in document["budget"] if r["fits"]}
    assert fits["rpi4"]["format"] in formats
    unbuilt = {r["target"]: r for r in document["budget"] if r["device"] == "cuda"}
    assert unbuilt["h100"]["fits"] is None and "nothing was built for a cuda target" in unbuilt["h100"]["note"]
    broken = dict(document, evaluations=[{**document["evaluations"][0], "source": "guessed"}])
    with pytest.raises(ValueError, match="evaluations/0/source"):
        validate(broken)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_page_renders_in_a_browser_with_every_plot(report, tmp_path):
    root, _ = report
    page = tmp_path / "check.html"
    probe = ("<script>window.addEventListener('load', () => { const i = [...document.images]; document.title = "
             "'images ' + i.length + ' loaded ' + i.filter(x => x.complete && x.naturalWidth > 0).length; });</script>")
    page.write_text((root / "out" / "index.html").read_text().replace("</body>", probe + "</body>"))
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([CHROMIUM, *flags, "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         check=False, capture_output=True, text=True, timeout=120)
    title = re.search(r"<title>(.*?)</title>", dom.stdout)
    assert title and title.group(1) == "images 2 loaded 2", dom.stdout[:300]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'shot'}", "--window-size=1400,2400",
                    f"--screenshot={shot}", (root / "out" / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000


def test_second_run_reads_the_cache(report):
    root, _ = report
    result = run("report", *SMALL, "--cache-dir", root / "cache", "-o", root / "again")
    assert result.exit_code == 0, result.output
    document = json.loads((root / "again" / "report.json").read_text())
    assert {e["source"] for e in document["evaluations"]} == {"cache"}
    assert {b["source"] for b in document["builds"]} == {"cache"}
    assert document["models"][0]["train_source"] == "cache"
    assert {r["source"] for r in document["latency"]} == {"measured"}


@pytest.mark.parametrize(("args", "message"), [
    (["--models", "digits,gpt"], "unknown model 'gpt'; registered: digits"),
    (["--formats", "mxfp5"], "unknown format 'mxfp5'; allowed: fp32, fp16, bf16, mxfp8_e4m3"),
    (["--targets", "pdp11"], "unknown target 'pdp11'"),
    (["--formats", "liftquant:9"], "no LiftQuant configuration codes 9 bits per weight; offered: 1.25"),
    (["--deploy-params", "gpt=1e9"], "--deploy-params names unknown model 'gpt'"),
    (["--deploy-params", "lm=lots"], "must look like MODEL=COUNT"),
    (["--configs", "huge"], "'huge' is not one of 'report', 'default', 'tiny'"),
    (["--model-file", "missing.onnx"], "model file 'missing.onnx' does not exist"),
    (["--model-file", "model.tflite"], "model file 'model.tflite' must end in .onnx or .pt2"),
])
def test_bad_names_are_refused_before_any_work(tmp_path, args, message):
    result = run("report", *args, "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert result.exit_code != 0 and message in result.output
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_output_that_is_not_a_report_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    result = run("report", *SMALL, "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert result.exit_code == 1 and "not a directory this command wrote" in result.output
    assert not (tmp_path / "cache").exists()


def test_interrupted_run_leaves_no_report_and_resumes(tmp_path, monkeypatch):
    real = build_cache.compile_model
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(build_cache, "compile_model", interrupted)
    result = run("report", *SMALL, "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert result.exit_code == 1 and "Aborted" in result.output  # click's answer to Ctrl-C
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left
    builds = list((tmp_path / "cache" / "builds" / "digits").iterdir())
    assert len(builds) == 1 and (builds[0] / "manifest.json").is_file()  # the finished build only

    monkeypatch.setattr(build_cache, "compile_model", real)
    result = run("report", *SMALL, "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [b["source"] for b in document["builds"]].count("cache") == 1
    assert document["models"][0]["train_source"] == "cache"


def test_report_configs_train_shorter_with_the_default_architecture():
    from edgekit.jobs.report import check_plan, model_config
    from edgekit.models import registry

    lm = registry.get_model("lm")
    default, short, tiny = (model_config(lm, configs) for configs in ("default", "report", "tiny"))
    assert default == registry.make_config(lm)
    assert short.steps < default.steps and (short.width, short.layers, short.mlp) == (default.width, default.layers,
                                                                                      default.mlp)
    assert tiny == registry.make_config(lm, tiny=True)
    policy = registry.get_model("meanflow_policy")
    assert model_config(policy, "report") == registry.make_config(policy)
    with pytest.raises(ValueError, match="configs must be one of report, default, tiny, got 'big'"):
        check_plan(None, None, None, configs="big")


def test_liftquant_is_left_out_of_models_with_convolutions():
    from edgekit.jobs.report import codable_formats
    from edgekit.models import registry

    entry = registry.get_model("fluxnet")
    model = entry.build(registry.make_config(entry, tiny=True))
    codable, skipped = codable_formats("fluxnet", model, ["fp32", "mxfp4", LIFTQUANT])
    assert codable == ["fp32", "mxfp4"]
    assert [(r["model"], r["format"]) for r in skipped] == [("fluxnet", LIFTQUANT)]
    assert "Linear weights only" in skipped[0]["reason"] and "convolution" in skipped[0]["reason"]


def test_a_report_of_your_own_model_file(tmp_path):
    """--model-file alone: the file in each format against float in onnxruntime, with its plot; no zoo sections."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10))
    torch.onnx.export(model, (torch.randn(2, 64),), tmp_path / "mine.onnx", dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32))
    result = run("report", "--model-file", f"{tmp_path / 'mine.onnx'}={tmp_path / 'x.npz'}", "--formats",
                 "mxint8,mxfp4", "--targets", "host", "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    validate(document)
    rows = {r["format"]: r for r in document["user_models"]}
    assert set(rows) == {"mxint8", "mxfp4"} and {r["layers"] for r in rows.values()} == {"2/2"}
    assert rows["mxint8"]["cosine"] > 0.999 and rows["mxfp4"]["cosine"] < rows["mxint8"]["cosine"]
    assert rows["mxint8"]["inputs"].endswith("x.npz") and document["models"] == []
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert "user_mine.png" in files and "accuracy_vs_bits.png" not in files
    page = (tmp_path / "out" / "index.html").read_text()
    assert "Your models against float" in page and "<h2>Models</h2>" not in page
