"""What every click data module shares: it wraps a LETOR data module, serves the wrapped
module's loaders except the ones it replaces (the training split's clicks, held-out validation
sessions), and answers every other attribute (``n_features``, ``split_data``, ...) from it.

Public API::

    WrappingDataModule   # base of ClickDataModule and StreamingClickDataModule
"""

from __future__ import annotations

import pytorch_lightning as pl

from differank.datamodules.letor import LetorDataModule


class WrappingDataModule(pl.LightningDataModule):
    """A data module over ``self.data`` (a :class:`LetorDataModule`, set by the subclass's
    ``__init__``): its loaders are the wrapped module's unless a subclass replaces one; a
    full-batch solver is refused (clicks are trained by gradient)."""

    data: LetorDataModule

    def __getattr__(self, name: str):
        """Everything not defined here is the wrapped data module's."""
        if name == "data":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.data, name)

    def _wrapped(self) -> LetorDataModule:
        self.data.trainer = self.trainer  # the loaders read the device and the DDP rank from it
        return self.data

    def prepare_data(self) -> None:
        self._wrapped().prepare_data()

    def setup(self, stage: str) -> None:
        self._wrapped().setup(stage)

    def train_dataloader(self):
        return self._wrapped().train_dataloader()

    def val_dataloader(self):
        return self._wrapped().val_dataloader()

    def test_dataloader(self):
        return self._wrapped().test_dataloader()

    def predict_dataloader(self):
        return self._wrapped().predict_dataloader()

    def full_batch(self, split: str):
        raise ValueError(
            "full-batch solvers (model=domination_cd, model=hinge_cutting_plane) do not train "
            "on clicks: use a gradient-trained model (model=linear, mlp, transformer)"
        )
