"""edgekit models / train / eval, as a user runs them."""

import json
import os

import pytest
from click.testing import CliRunner

from edgekit.cli import main
from edgekit.models.registry import model_names


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_models_lists_every_registered_model(tmp_path):
    result = run("models", "--cache-dir", tmp_path, "-o", tmp_path / "zoo.json")
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "zoo.json").read_text())["models"]
    assert [r["model"] for r in rows] == model_names()
    assert all(r["parameters"] > 0 and "is better" in r["metric"] for r in rows)


def test_train_then_eval_reuses_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = run("train", "digits", "--tiny", "--config", "steps=30", "--cache-dir", cache,
                "--save", tmp_path / "d.pt", "-o", tmp_path / "train.json")
    assert first.exit_code == 0, first.output
    assert "digits: trained" in first.stderr and (tmp_path / "d.pt").is_file()
    record = json.loads((tmp_path / "train.json").read_text())["train"][0]
    assert record["config"]["steps"] == 30 and not record["cached"]
    assert 0.0 <= record["evaluation"]["accuracy"] <= 1.0

    again = run("train", "digits", "--tiny", "--config", "steps=30", "--cache-dir", cache)
    assert "loaded from the cache" in again.stderr

    scored = run("eval", "digits", "--tiny", "--config", "steps=30", "--format", "mxfp4", "--format", "mxint8",
                 "--cache-dir", cache, "-o", tmp_path / "eval.json")
    assert scored.exit_code == 0, scored.output
    rows = json.loads((tmp_path / "eval.json").read_text())["eval"]
    assert [r["format"] for r in rows] == ["fp32", "mxfp4", "mxint8"]
    assert [r["source"] for r in rows] == ["cache", "measured", "measured"]
    assert rows[0]["accuracy"] == record["evaluation"]["accuracy"]
    assert [r["bits/weight"] for r in rows] == [32.0, 4.25, 8.25]
    assert "accuracy (higher is better)" in scored.stdout

    from_file = run("eval", tmp_path / "d.pt", "--format", "mxfp4", "-o", tmp_path / "file.json")
    assert from_file.exit_code == 0, from_file.output
    def without_time(row):
        return {k: v for k, v in row.items() if k != "seconds"}  # wall time on a shared machine: not a result

    assert [without_time(r) for r in json.loads((tmp_path / "file.json").read_text())["eval"][:2]] == [
        without_time({**r, "source": "measured"}) for r in rows[:2]]


@pytest.mark.parametrize(("args", "message"), [
    (["train", "gpt"], "unknown model 'gpt'; registered: digits"),
    (["eval", "gpt"], "neither a registered model"),
    (["train", "digits", "--config", "depth=3"], "unknown config key 'depth' for model 'digits'; keys: hidden"),
    (["train", "digits", "--config", "steps=lots"], "config key 'steps' takes a int, got 'lots'"),
    (["train", "digits", "--config", "steps"], "must look like KEY=VALUE"),
    (["train", "lm", "--config", "width=100"], "multiple of 64"),
    (["train", "lm", "--config", "lr=0"], "config key 'lr' of LMConfig must be a number > 0, got 0.0"),
    (["train", "fluxnet", "--config", "arch=mlp"], "config key 'arch' of FluxNetConfig must be one of fluxnet, cnn"),
    (["eval", "digits", "--format", "fp5"], "unknown format 'fp5'; allowed: fp32, fp16, bf16, mxfp8_e4m3"),
])
def test_bad_input_is_named_before_any_work(tmp_path, args, message):
    result = run(*args, "--cache-dir", tmp_path / "cache")
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "cache" / "models").exists()


def test_a_config_value_outside_its_range_fails_and_writes_nothing(tmp_path):
    """Negative steps once trained nothing and scored the untrained model with exit status 0."""
    result = run("eval", "digits", "--config", "steps=-5", "--cache-dir", tmp_path / "cache",
                 "-o", tmp_path / "eval.json")
    assert result.exit_code != 0
    assert "config key 'steps' of DigitsConfig must be an integer >= 1, got -5" in result.output
    assert list(tmp_path.iterdir()) == []


def test_bad_checkpoints_and_cache_dirs(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x80\x02not a checkpoint")
    result = run("eval", junk)
    assert result.exit_code == 1 and "is not a readable edgekit checkpoint" in result.output

    blocked = tmp_path / "file"
    blocked.write_text("x")
    result = run("train", "digits", "--tiny", "--cache-dir", blocked / "cache")
    assert result.exit_code == 1 and "is not writable" in result.output


def test_cache_dir_holds_the_policys_demonstrations_too(tmp_path, monkeypatch):
    """``--cache-dir`` is the root of everything a command caches, Meta-World rollouts included,
    for that command only."""
    monkeypatch.delenv("EDGEKIT_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    result = run("train", "meanflow_policy", "--tiny", "--cache-dir", cache, "-o", tmp_path / "train.json")
    assert result.exit_code == 0, result.output
    assert list((cache / "demos").rglob("*.pt")) and list((cache / "models" / "meanflow_policy").rglob("model.pt"))
    assert "EDGEKIT_CACHE_DIR" not in os.environ
