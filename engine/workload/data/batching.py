"""Training batches: samples stacked once, drawn in a seeded order that depends only on
the seed and the epoch (so a resumed run sees the same batches), moved to the device."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from engine.core.errors import ConfigError

# A fixed-length training set smaller than this moves to the accelerator once.
_DEVICE_RESIDENT_BYTES = 512 * 2**20


def _stack(dataset: Any) -> dict[str, torch.Tensor] | None:
    """All samples as one tensor per field when every sample has the same shape."""
    if isinstance(dataset, Mapping):
        return {k: torch.as_tensor(v) for k, v in dataset.items()}
    features, labels = getattr(dataset, "features", None), getattr(dataset, "labels", None)
    if isinstance(features, Mapping) and isinstance(labels, torch.Tensor):  # data.EncodedSplit
        if not all(isinstance(v, torch.Tensor) for v in features.values()):
            return None  # dynamic padding: one tensor per sample
        return {**features, "labels": labels}
    if hasattr(dataset, "column_names") and hasattr(dataset, "with_format"):  # datasets.Dataset
        columns = dataset.with_format("torch")[:]
        if all(isinstance(v, torch.Tensor) for v in columns.values()):
            return dict(columns)
        return None
    items = [dataset[i] for i in range(len(dataset))]
    if not items:
        return None
    keys = list(items[0].keys())
    try:
        return {k: torch.stack([torch.as_tensor(item[k]) for item in items]) for k in keys}
    except (RuntimeError, KeyError):
        return None  # ragged (dynamic padding): collate batch by batch


def _length(dataset: Any) -> int:
    if isinstance(dataset, Mapping):
        return len(next(iter(dataset.values())))
    return len(dataset)


class BatchSource:
    """Batches in a seeded order that depends on nothing but the seed and the epoch."""

    def __init__(self, dataset: Any, batch_size: int, device: torch.device, seed: int,
                 collate: Callable[[list[Any]], Mapping[str, torch.Tensor]] | None = None,
                 shuffle: bool = True) -> None:
        self.size = _length(dataset)
        if self.size == 0:
            raise ConfigError("the training set is empty", "give more --train-samples or check the data")
        self.batch_size = batch_size
        self.device = device
        self.seed = seed
        self.shuffle = shuffle
        self.dataset = dataset
        self.collate = collate
        self.stacked = _stack(dataset)  # None when samples differ in length: collate per batch
        if self.stacked is None and collate is None:
            raise ConfigError("samples have different shapes and no collate function was given",
                              "pad to a fixed length, or pass the data's collate function")
        self._resident = False
        if self.stacked is not None:
            nbytes = sum(t.numel() * t.element_size() for t in self.stacked.values())
            if device.type != "cpu" and nbytes <= _DEVICE_RESIDENT_BYTES:
                self.stacked = {k: v.to(device) for k, v in self.stacked.items()}
                self._resident = True
        self._epoch = -1
        self._order: torch.Tensor | None = None
        self._generator = torch.Generator().manual_seed(seed)

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.size / self.batch_size)

    def order(self, epoch: int) -> torch.Tensor:
        """The sample order of `epoch`: the epoch-th permutation of a generator seeded once."""
        if not self.shuffle:
            return torch.arange(self.size)
        if epoch < self._epoch:
            self._generator = torch.Generator().manual_seed(self.seed)
            self._epoch = -1
        while self._epoch < epoch:
            self._order = torch.randperm(self.size, generator=self._generator)
            self._epoch += 1
        assert self._order is not None
        return self._order

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        """The index-th batch of the run (0-based, across epochs)."""
        epoch, offset = divmod(index, self.batches_per_epoch)
        rows = self.order(epoch)[offset * self.batch_size:(offset + 1) * self.batch_size]
        if self.stacked is not None:
            if self._resident:
                rows = rows.to(self.device)
            out = {k: v.index_select(0, rows) for k, v in self.stacked.items()}
        else:
            assert self.collate is not None
            out = dict(self.collate([self.dataset[int(i)] for i in rows]))
        if not self._resident and self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out
