"""An immutable, hashable label set, so the spec's dataclasses stay hashable."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Labels(Mapping[str, str]):
    """An immutable, hashable, sorted label set (so that SLO and SloSpec stay hashable)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: tuple[tuple[str, str], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return f"Labels({dict(self._items)!r})"
