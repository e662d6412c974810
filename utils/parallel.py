"""Run a GIL-releasing kernel over a range of work items on all cores."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache

MIN_ITEMS_PER_TASK = 2048


def thread_count() -> int:
    """Worker threads: ``EDGEKIT_THREADS`` if set, else the CPUs this process may use."""
    env = os.environ.get("EDGEKIT_THREADS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"EDGEKIT_THREADS must be a positive integer, got {env!r}")
        return int(env)
    return len(os.sched_getaffinity(0))


@cache
def pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgekit")


def parallel_map(total: int, fn, min_items: int = MIN_ITEMS_PER_TASK) -> list:
    """``[fn(t0, t1) ...]`` over a split of ``range(total)`` into contiguous pieces."""
    workers = thread_count()
    tasks = min(workers, max(1, total // min_items))
    if tasks <= 1:
        return [fn(0, total)] if total else []
    bounds = [total * k // tasks for k in range(tasks + 1)]
    return list(pool(workers).map(fn, bounds[:-1], bounds[1:]))
