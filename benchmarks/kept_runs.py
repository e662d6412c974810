"""Finished runs kept beside a results file, reused when their job is the same (imported by the
benchmark scripts from their folder)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def kept_path(folder: str | Path, job: dict) -> Path:
    """Where ``job``'s finished run is kept: a file named by a hash of the job."""
    return Path(folder) / f"{hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]}.json"


def kept_run(path: Path, job: dict) -> dict | None:
    """The run kept at ``path`` if it was made for ``job``, else None."""
    if path.exists() and (saved := json.loads(path.read_text()))["job"] == job:
        return saved
    return None
