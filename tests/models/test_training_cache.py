"""The training loop and the model cache: resume, reuse, keys, verification and bad input."""

import os
import signal

import pytest
import torch

from edgekit.models import cache, registry
from edgekit.models.cache import CheckpointError
from edgekit.models.digits import DigitsConfig
from edgekit.models.registry import load_checkpoint, make_config, save_checkpoint, train
from edgekit.models.training import MODEL_FILE, PROGRESS_FILE

CONFIG = DigitsConfig.tiny(steps=40)


def state_equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def interrupt_at(stop_step: int):
    """An on_step callback that delivers SIGINT after ``stop_step``, as Ctrl-C would."""

    def on_step(step, loss):
        if step == stop_step:
            signal.raise_signal(signal.SIGINT)

    return on_step


def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    straight = train("digits", CONFIG, cache_dir=False).model
    with pytest.raises(KeyboardInterrupt):
        train("digits", CONFIG, cache_dir=tmp_path, on_step=interrupt_at(16), checkpoint_seconds=1e9)
    directory = registry.entry_directory(registry.get_model("digits"), CONFIG, tmp_path)
    assert (directory / PROGRESS_FILE).exists() and not (directory / MODEL_FILE).exists()
    steps_run = []
    resumed = train("digits", CONFIG, cache_dir=tmp_path, on_step=lambda step, loss: steps_run.append(step))
    assert resumed.resumed_from == 17 and steps_run[0] == 17 and len(resumed.loss_history) == CONFIG.steps
    assert state_equal(resumed.model, straight)
    assert (directory / MODEL_FILE).exists() and not (directory / PROGRESS_FILE).exists()


def test_progress_is_saved_on_a_timer(tmp_path):
    seen = []

    def on_step(step, loss):
        directory = registry.entry_directory(registry.get_model("digits"), CONFIG, tmp_path)
        seen.append((directory / PROGRESS_FILE).exists())
        if step == 30:
            raise RuntimeError("power cut")  # no chance to save: only the timer's checkpoints remain

    with pytest.raises(RuntimeError):
        train("digits", CONFIG, cache_dir=tmp_path, on_step=on_step, checkpoint_seconds=0.0)
    assert seen[1] and train("digits", CONFIG, cache_dir=tmp_path).resumed_from == 30  # step 30 never finished


def test_finished_model_is_reused_and_keys_follow_config_and_code(tmp_path):
    first = train("digits", CONFIG, cache_dir=tmp_path)
    again = train("digits", CONFIG, cache_dir=tmp_path, on_step=lambda *a: pytest.fail("trained again"))
    assert again.cached and not first.cached and state_equal(first.model, again.model)
    assert again.loss_history == first.loss_history
    entry = registry.get_model("digits")
    keys = {cache.cache_key("digits", CONFIG, entry.code), cache.cache_key("digits", CONFIG, "other code"),
            cache.cache_key("digits", DigitsConfig.tiny(steps=41), entry.code)}
    assert len(keys) == 3
    retrained = train("digits", CONFIG, cache_dir=tmp_path, retrain=True)
    assert not retrained.cached and state_equal(first.model, retrained.model)


def test_corrupt_cache_entry_is_moved_aside_and_retrained(tmp_path):
    first = train("digits", CONFIG, cache_dir=tmp_path)
    data = bytearray(first.checkpoint.read_bytes())
    data[-100] ^= 0xFF
    first.checkpoint.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="corrupt|not a readable"):
        again = train("digits", CONFIG, cache_dir=tmp_path)
    assert not again.cached and state_equal(first.model, again.model)
    assert first.checkpoint.with_name(MODEL_FILE + ".corrupt").exists()


def test_checkpoint_round_trip_and_refusals(tmp_path):
    model = train("digits", CONFIG, cache_dir=False).model
    path = save_checkpoint(tmp_path / "d.pt", "digits", CONFIG, model)
    entry, config, loaded = load_checkpoint(path)
    assert entry.name == "digits" and config == CONFIG and state_equal(loaded, model)

    flipped = tmp_path / "flipped.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt|not a readable"):
        load_checkpoint(flipped)

    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="not a readable edgekit checkpoint"):
        load_checkpoint(truncated)

    foreign = tmp_path / "foreign.pt"
    torch.save(model.state_dict(), foreign)
    with pytest.raises(CheckpointError, match="not an edgekit checkpoint"):
        load_checkpoint(foreign)

    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="not a readable"):
        load_checkpoint(text)

    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")

    other = save_checkpoint(tmp_path / "wide.pt", "digits", DigitsConfig.tiny(hidden=64), model)
    with pytest.raises(CheckpointError, match="does not match model 'digits'"):
        load_checkpoint(other)


def test_unwritable_cache_is_refused_before_training(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(ValueError, match="cache directory .* is not writable.*EDGEKIT_CACHE_DIR"):
        train("digits", CONFIG, cache_dir=blocked / "cache", on_step=lambda *a: pytest.fail("trained"))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            train("digits", CONFIG, cache_dir=locked)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "a"))
    assert cache.cache_root() == tmp_path / "a"
    monkeypatch.delenv("EDGEKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "edgekit"
    assert cache.cache_root(tmp_path / "b") == tmp_path / "b"


def test_a_cache_dir_given_to_train_is_the_root_of_what_the_model_caches_itself(monkeypatch, tmp_path):
    """A model's own data (the policy's demonstrations) asks cache.cache_root() without a path."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "env"))
    with cache.using_cache_root(tmp_path / "block"):
        assert cache.cache_root() == tmp_path / "block"
        assert cache.cache_root(tmp_path / "b") == tmp_path / "b"
    assert cache.cache_root() == tmp_path / "env"
    seen = []
    real_fit = registry.training.fit
    monkeypatch.setattr(registry.training, "fit", lambda *a, **k: seen.append(cache.cache_root()) or real_fit(*a, **k))
    train("digits", CONFIG, cache_dir=tmp_path / "given")
    train("digits", CONFIG, cache_dir=False)
    assert seen == [tmp_path / "given", tmp_path / "env"]


def test_config_overrides_are_parsed_and_checked():
    config = make_config("digits", {"steps": "12", "lr": "0.01", "hidden": 16})
    assert (config.steps, config.lr, config.hidden) == (12, 0.01, 16)
    assert make_config("digits", tiny=True) == DigitsConfig.tiny()
    with pytest.raises(ValueError, match=r"unknown config key 'depth' for model 'digits'; keys: hidden \(an integer >= 1, default 256\)"):
        make_config("digits", {"depth": "3"})
    with pytest.raises(ValueError, match="config key 'steps' takes a int, got 'many'"):
        make_config("digits", {"steps": "many"})
    with pytest.raises(ValueError, match="invalid config for model 'lm'.*multiple of 64"):
        make_config("lm", {"width": "100"})
    with pytest.raises(ValueError, match="unknown model 'gpt'; registered: digits"):
        make_config("gpt")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        registry.parse_config_items(["steps"])
