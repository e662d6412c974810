"""The last few results of a deterministic computation, by a key of its inputs' content."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class RecentResults(Generic[T]):
    """Keeps the ``size`` most recently used results; an equal key returns the kept one."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        self._items[key] = value = compute()
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value
