"""library_log: TVM's C++ warnings and Python warnings go to a log file, progress stays on the terminal."""

import io
import os
import warnings

import pytest
import tvm
from tqdm import tqdm

from edgekit.console import LOG_NAME, keep_log, library_log
from edgekit.models.training import progress_interval

TVM_WARNING = "Unable to detect CUDA version"  # printed by TVM's C++ target parser for a bare CUDA target


def library_noise():
    tvm.target.Target({"kind": "cuda"})
    warnings.warn("a library warning", UserWarning, stacklevel=1)


def test_library_output_goes_to_the_log_and_the_terminal_keeps_progress(capfd, tmp_path):
    capfd.readouterr()
    with library_log() as log_path:
        library_noise()
        print("progress line", file=__import__("sys").stderr)
    err = capfd.readouterr().err
    assert TVM_WARNING not in err and "a library warning" not in err
    assert "progress line" in err
    text = log_path.read_text()
    assert TVM_WARNING in text and "a library warning" in text
    kept = keep_log(log_path, tmp_path)
    assert kept == tmp_path / LOG_NAME and TVM_WARNING in kept.read_text() and not log_path.exists()
    library_noise()  # outside the job, descriptor 2 is the terminal again
    assert TVM_WARNING in capfd.readouterr().err


def test_verbose_shows_library_output_on_the_terminal_too(capfd):
    capfd.readouterr()
    with library_log(verbose=True) as log_path:
        library_noise()
    err = capfd.readouterr().err
    assert TVM_WARNING in err and "a library warning" in err
    assert "a library warning" in log_path.read_text()
    log_path.unlink()


def test_a_failed_job_leaves_no_log_behind():
    with pytest.raises(RuntimeError), library_log() as log_path:
        raise RuntimeError("job failed")
    assert not log_path.exists()


def test_progress_in_a_file_is_a_few_lines(monkeypatch):
    """Not a terminal: a 1000-step bar writes a handful of updates, not one per step."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    assert progress_interval() == 30.0
    for _ in tqdm(range(1000), file=stream, mininterval=progress_interval(), miniters=1):
        pass
    assert 1 <= stream.getvalue().count("\r") <= 3
    every = io.StringIO()  # the same bar updating on every step, for contrast
    for _ in tqdm(range(1000), file=every, mininterval=0, miniters=1):
        pass
    assert every.getvalue().count("\r") > 900
    with open(os.devnull, "w") as devnull:
        monkeypatch.setattr("sys.stderr", devnull)
        assert progress_interval() == 30.0
