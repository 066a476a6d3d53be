"""The one lazy-row class: an item's rows in a part's array (what `Store.read` returns as features and extras),
and a part's array read through zarr item by item (too big to hold whole)."""

from __future__ import annotations

from typing import Any

import numpy as np

from store.integrity import DamagedItem, DamagedPart, damaged_item


class RowView:
    """Rows [row0, row0 + n) of an array, sliced lazily like an array: `v[...]`, `v[a:b]`, `v[i, j]`,
    `np.asarray(v)`, `.shape`, `.dtype`. The array is opened on first use (`load`): a part's array in the part
    cache, or the view of a part read through zarr. For the latter (`guard` given: the store's `_guarded`),
    each read goes through `guard(get, key)`, which adds what zarr does not check (a chunk failing its
    checksum, a chunk file gone after the read: zarr reads it as zeros); rows picked by an index array are one
    zarr read (`oindex`)."""

    def __init__(self, load: Any, row0: int, n: int, tail: tuple[int, ...] | None = None,
                 item: str | None = None, guard: Any = None) -> None:
        self._load, self._base, self.row0, self.n = load, None, row0, n
        self._tail = tail  # the array's shape after the row axis, when the index knows it
        self.item = item  # named in the error when the part's array does not read back
        self._guard = guard

    @property
    def base(self) -> Any:
        if self._base is None:
            try:
                self._base = self._load() if callable(self._load) else self._load
            except DamagedPart as e:
                raise self._named(e) from None
        return self._base

    def _named(self, e: DamagedPart) -> DamagedItem:
        return damaged_item(e.folder, self.item, e.problem) if self.item is not None else e

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n, *(self._tail if self._tail is not None else self.base.shape[1:]))

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.n

    def _rows(self, key: Any) -> Any:
        if key is Ellipsis:
            return slice(self.row0, self.row0 + self.n)
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            if step == 1:
                return slice(self.row0 + start, self.row0 + max(start, stop))
            return np.arange(start, stop, step) + self.row0
        if isinstance(key, int | np.integer):
            k = int(key) + (self.n if key < 0 else 0)
            if not 0 <= k < self.n:
                raise IndexError(f"row {key} out of range for {self.n} rows")
            return self.row0 + k
        rows = np.asarray(key)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        rows = np.where(rows < 0, rows + self.n, rows)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"rows out of range for {self.n} rows")
        return rows + self.row0

    def __getitem__(self, key: Any) -> Any:
        rest: tuple = ()
        if isinstance(key, tuple):
            key, rest = (key[0], key[1:]) if key else (Ellipsis, ())
            if key is Ellipsis and rest:  # v[..., j]: Ellipsis over the row axis and the ones before j
                return np.asarray(self[...])[(Ellipsis, *rest)]
        rows = self._rows(key)
        at = (rows, *rest) if rest else rows
        try:
            base = self.base
            if self._guard is None:
                return base[at]
            return self._guard(base.oindex.__getitem__ if isinstance(rows, np.ndarray) else base.__getitem__, at)
        except DamagedPart as e:  # a lazy part's chunk that fails its checksum, or a file gone
            raise self._named(e) from None

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self[...])
        return out.astype(dtype) if dtype is not None else out
