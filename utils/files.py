"""Files and directories written whole or not at all: built beside the target, then renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    A reader sees the old file or the new one, never half of one; an interrupted write
    leaves no temporary file behind. An ``OSError`` names the path.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise OSError(f"cannot write {str(path)!r}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise OSError(f"cannot write {str(path)!r}: {err.strerror or err}") from err
        raise
    return path


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def check_output_dir(out_dir: str | os.PathLike, marker: str) -> Path:
    """``out_dir`` if it is new, empty, or an earlier result that holds ``marker``; else a ``ValueError``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / marker).is_file())):
        raise ValueError(f"output {str(out_dir)!r} exists and is not a directory this command wrote (no {marker}); "
                         "choose a new or empty directory")
    return out_dir


@contextmanager
def staged_directory(out_dir: str | os.PathLike, marker: str):
    """Yield a staging directory beside ``out_dir``; on success it replaces ``out_dir`` whole.

    ``out_dir`` must be new, empty, or an earlier result of the same kind (it holds the
    file ``marker``); anything else is refused before any work. An exception inside the
    block removes the staging directory and leaves ``out_dir`` as it was.
    """
    out_dir = check_output_dir(out_dir, marker)
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=parent))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp creates 0700; results are ordinary directories
    try:
        yield staging
        old = None
        if out_dir.exists():  # the earlier result goes only once the new one is complete
            old = out_dir.with_name(f".{out_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out_dir.rename(old)
        staging.rename(out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
