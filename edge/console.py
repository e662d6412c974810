"""A clean console for long jobs: library output goes to a log file, progress bars stay on the terminal.

TVM prints its warnings from C++ straight to file descriptor 2, where no Python handler can
reach them; :func:`library_log` points descriptor 2 at a log file for the duration of a job
and gives Python's ``sys.stderr`` (progress bars, status lines) a copy of the real terminal.
Python ``warnings`` and ``logging`` records land in the same file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

LOG_NAME = "edgekit.log"


@contextlib.contextmanager
def library_log(verbose: bool = False):
    """Yield the path of a log file receiving library output; with ``verbose`` it reaches the terminal too.

    Without ``verbose``, C++ output on descriptor 2 goes to the file only; with it, descriptor 2
    is left alone (the terminal shows everything) and Python warnings and logging go to both.
    """
    fd, name = tempfile.mkstemp(prefix="edgekit-", suffix=".log")
    log_path = Path(name)
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    handlers = [handler] + ([logging.StreamHandler(sys.stderr)] if verbose else [])
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    root.handlers[:] = handlers
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    saved_stderr = sys.stderr
    try:
        if not verbose:
            # C++ writes to descriptor 2: send it to the log, keep Python's stderr on the terminal
            sys.stderr = os.fdopen(terminal_fd, "w", buffering=1, closefd=False)
            os.dup2(fd, 2)
        yield log_path
    except BaseException:
        log_path.unlink(missing_ok=True)  # the job failed: there is no output directory to keep it in
        raise
    finally:
        if sys.stderr is not saved_stderr:
            sys.stderr.flush()
            sys.stderr = saved_stderr
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
        os.close(fd)
        logging.captureWarnings(False)
        root.handlers[:], root.level = saved
        handler.close()


def keep_log(log_path: Path, directory: Path) -> Path:
    """Move the job's log into ``directory`` (the finished output) as ``edgekit.log``."""
    target = Path(directory) / LOG_NAME
    shutil.move(str(log_path), target)
    return target

