"""Training on clicks: a LETOR data module whose training batches are sessions of shown lists
with clicks, simulated online on the training device or read from a click log (offline).

``ClickDataModule`` wraps a LETOR data module (validation, test, prediction, the data
fingerprint and every other attribute are the wrapped module's, read through). Its training
split is replaced (``LetorDataModule.replace_training_lists``) by

* online (``ClickDataModule.simulated``): the shown lists, one per training query, the top k of
  a production ranker in shown order, with their TRUE labels; every training batch gets one
  fresh session per list, sampled by the click model in ``on_after_batch_transfer`` (on the
  device the model trains on) from uniforms drawn on the CPU by a generator keyed by ``(seed,
  epoch, batch index)`` (:func:`session_seed`): a batch's sessions depend on those three numbers
  alone, so a run resumed from ``last.ckpt`` draws the sessions the uninterrupted run drew, on
  any device;
* offline (``ClickDataModule.logged``): the sessions of a click log
  (:mod:`~differank.datamodules.clicks.click_log`), one list per session, their clicks in the
  labels' place; the same every epoch. A log that records the fingerprints of the data it was
  written for (:func:`training_identity`, as ``task=simulate`` writes them) is refused on other
  data (:func:`check_same_data`).

Either way the training step sees THE CLICK BATCH CONTRACT (docs/clicks.md#the-click-batch):
the usual ``features``, ``mask``, ``qid``, ``doc_index`` (the row of the served split: the
training file's row online, the log's row offline) plus ``clicks`` float [B, L] (0/1, 0 at
padding), ``positions`` int64 [B, L] (0-based, -1 at padding) and, when known,
``propensities`` float [B, L] (P(examined) of each slot: the click model's, or the log's
``propensity`` column; 1 at padding). ``labels`` is removed: nothing that trains on clicks can
read the true labels. Test batches are the ordinary ones (true labels); validation batches
are too, unless the run chooses its epoch from clicks (``ultr.select=clicks``): then they are
held-out click sessions (:class:`~differank.datamodules.clicks.held_out.HeldOutSessions`),
without labels: online, simulated on the validation queries; offline, the sessions of the
log's held-out queries, which then are not trained on.

A log of one session per training query written by ``task=simulate``
(:func:`ClickDataModule.sessions`) holds, in session ``i``, the clicks the online simulation
gives query ``i`` in its first epoch: training one epoch on it equals the online run's first
epoch, step by step.
"""

from __future__ import annotations

import hashlib
import numbers
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.click_log import IDENTITY, ClickLog, ClickLogError
from differank.datamodules.clicks.held_out import HeldOutSessions
from differank.datamodules.clicks.shown_lists import shown_list_tensors
from differank.datamodules.clicks.wrapping import WrappingDataModule
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.normalization import apply_zscore
from differank.datamodules.split_tensors import SplitTensors

if TYPE_CHECKING:
    from differank.datamodules.clicks.parquet_log import ParquetClickLog


def session_seed(seed: int, epoch: int, batch_index: int) -> int:
    """The click generator's seed for training batch ``batch_index`` (from 0) of epoch
    ``epoch`` (from 0) of a run seeded ``seed``: a stable hash of the three numbers (NumPy's
    ``SeedSequence``), so the sessions of a batch never depend on how many batches this process
    drew before it (a resumed run continues the uninterrupted one).

    Example:
        >>> session_seed(0, 1, 2) == session_seed(0, 1, 2) != session_seed(0, 2, 1)
        True
    """
    return _hashed_seed(seed, epoch, batch_index)


def batch_seed(seed: int, batch_number: int) -> int:
    """Deprecated: the seed of the ``batch_number``-th batch drawn by a process, which online
    clicks no longer use (a resumed run redrew its first batches' sessions); see
    :func:`session_seed`."""
    warnings.warn(
        "batch_seed(seed, batch_number) is deprecated and no longer seeds online clicks: they "
        "are keyed by session_seed(seed, epoch, batch_index)",
        FutureWarning,
        stacklevel=2,
    )
    return _hashed_seed(seed, batch_number)


def _hashed_seed(*keys: int) -> int:
    """A ``torch.Generator`` seed hashed from ``keys`` (NumPy's ``SeedSequence``, stable across
    versions and platforms)."""
    state = np.random.SeedSequence(list(keys)).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1  # 62 bits: manual_seed takes a signed int64


class ClickDataModule(WrappingDataModule):
    """A LETOR data module trained on clicks (the module docstring). Build it with
    :meth:`simulated` or :meth:`logged`; ``held_out``: the validation click sessions served in
    place of the validation split (``ultr.select=clicks``), or None."""

    def __init__(
        self,
        data: LetorDataModule,
        training_lists: SplitTensors,
        *,
        click_model: ClickModel | None = None,
        log: ClickLog | None = None,
        seed: int = 0,
        held_out: HeldOutSessions | None = None,
    ) -> None:
        super().__init__()
        if (click_model is None) == (log is None):
            raise ValueError("a click run simulates (click_model) or reads a log (log), not both")
        self.data = data
        self.click_model = click_model
        self.log = log
        self.seed = int(seed)
        self.held_out = held_out
        self.clicks_mode = "online" if click_model is not None else "offline"
        self.batches_drawn = 0  # batches given clicks without their keys (deprecated calls)
        self._log_columns: dict[torch.device, dict[str, torch.Tensor]] = {}
        data.replace_training_lists(training_lists)

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def simulated(
        cls,
        data,
        shown_rows: Sequence[np.ndarray],
        click_model: ClickModel,
        seed: int = 0,
        held_out: HeldOutSessions | None = None,
    ) -> ClickDataModule:
        """Online simulation on the lists ``shown_rows`` (rows of the training split, top
        first; one per served training query, in the split's query order); validation on
        ``held_out`` sessions when given."""
        tensors = shown_list_tensors(data.split_data("train"), shown_rows, "training")
        return cls(data, tensors, click_model=click_model, seed=seed, held_out=held_out)

    @classmethod
    def logged(
        cls, data, log: ClickLog, seed: int = 0, held_out: ClickLog | None = None
    ) -> ClickDataModule:
        """Offline training on the sessions of ``log``; features from its ``doc_row`` column
        (the training split's rows, as normalised for this run) or, without one, its raw
        ``features`` column (this run's feature transform and z-score applied). ``held_out``:
        the sessions held out of the same log (``ultr.select_holdout``), served as the
        validation click batches (:meth:`HeldOutSessions.logged`), their features found alike."""
        check_same_data(log, data)
        sessions = None
        if held_out is not None:
            sessions = HeldOutSessions.logged(held_out, _log_features(data, held_out))
        features = torch.from_numpy(_log_features(data, log))
        offsets = log.offsets
        tensors = SplitTensors(
            features,
            torch.from_numpy(log.click.astype(np.float32)),
            np.arange(len(log.click)),
            offsets,
            log.qid[offsets[:-1]],
        )
        return cls(data, tensors, log=log, seed=seed, held_out=sessions)

    # ---- the wrapped data module -------------------------------------------------------------

    def val_dataloader(self):
        if self.held_out is None:
            return self._wrapped().val_dataloader()
        return self.held_out.loader(self.data.eval_batch_size, self.trainer)

    # ---- the click batch ---------------------------------------------------------------------

    def on_after_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        """Training batches become click batches (on the training device); others pass."""
        trainer = self.trainer
        if trainer is None or not trainer.training:
            return batch
        # Lightning counts the batch being transferred only after this hook: its index in the
        # epoch is the last counted one's + 1 (as Lightning's training loop computes batch_idx)
        batch_index = trainer.fit_loop.epoch_loop.batch_idx + 1
        return self.click_batch(batch, epoch=trainer.current_epoch, batch_index=batch_index)

    def click_batch(
        self,
        batch: dict[str, torch.Tensor],
        *,
        epoch: int | None = None,
        batch_index: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """A training batch of the served lists as the click batch contract (module docstring):
        online, the session of training batch ``batch_index`` of ``epoch`` (both from 0; the
        same whatever was drawn before, :func:`session_seed`); offline, the logged one (the
        keys are not used). ``labels`` removed."""
        batch = dict(batch)
        labels, mask = batch.pop("labels"), batch["mask"]
        if self.click_model is not None:
            if epoch is None or batch_index is None:
                warnings.warn(
                    "click_batch(batch) without epoch= and batch_index= is deprecated: the "
                    "batch is keyed as the next of epoch 0 drawn by this data module; pass "
                    "the batch's epoch and index in it (from 0)",
                    FutureWarning,
                    stacklevel=2,
                )
                epoch, batch_index = 0, self.batches_drawn
                self.batches_drawn += 1
            for name, value in (("epoch", epoch), ("batch_index", batch_index)):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                    raise ValueError(
                        f"click_batch: {name} must be an int >= 0 (counted from 0), got {value!r}"
                    )
            # drawn on the CPU, whatever the training device: the same uniforms on any device
            key = session_seed(self.seed, int(epoch), int(batch_index))
            generator = torch.Generator().manual_seed(key)
            batch["clicks"] = self.click_model.simulate(labels, mask, generator).float()
            batch["propensities"] = self.click_model.propensities(labels, mask).float()
            slots = torch.arange(mask.shape[1], device=mask.device).expand(mask.shape)
            batch["positions"] = slots.masked_fill(~mask, -1)
            return batch
        columns = self._log_on(mask.device)
        rows = batch["doc_index"].clamp(min=0)
        batch["clicks"] = labels.float() * mask
        batch["positions"] = columns["position"][rows].masked_fill(~mask, -1)
        if "propensity" in columns:
            batch["propensities"] = columns["propensity"][rows].masked_fill(~mask, 1.0)
        return batch

    def sessions(self, passes: int = 1) -> Iterator[tuple[int, dict[str, torch.Tensor], dict]]:
        """``passes`` epochs of online sessions, in the training order: ``(epoch, batch, click
        batch)`` on the host, exactly the sessions ``fit`` would draw (``task=simulate``)."""
        if self.click_model is None:
            raise ValueError("sessions are simulated: this data module reads a click log")
        loader = self._wrapped().train_dataloader()
        for epoch in range(passes):
            for index, batch in enumerate(loader):
                yield epoch, batch, self.click_batch(batch, epoch=epoch, batch_index=index)

    def _log_on(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The log's per-row columns on ``device`` (copied once)."""
        if device not in self._log_columns:
            log = self.log
            assert log is not None
            columns = {"position": torch.from_numpy(log.position)}
            if log.propensity is not None:
                columns["propensity"] = torch.from_numpy(log.propensity)
            self._log_columns[device] = {k: v.to(device) for k, v in columns.items()}
        return self._log_columns[device]


def training_identity(data) -> dict[str, str]:
    """The fingerprints of ``data``'s training split a click log records (``ClickLog``'s
    ``train_qids_sha256`` and ``train_files_sha256``): the sha256 of its per-row query ids
    (int64, in the row order ``doc_row`` indexes), and the sha256 over its files' sha256 where
    the data has files. Two folds of the same row count differ in the first."""
    qids = np.ascontiguousarray(data.split_data("train").qids, dtype="<i8")
    identity = {"train_qids_sha256": hashlib.sha256(qids.tobytes()).hexdigest()}
    file_digests = getattr(data, "file_sha256", None)
    digests = file_digests("train") if file_digests is not None else []
    if digests and all(digests):
        identity["train_files_sha256"] = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    return identity


def check_same_data(log: ClickLog | ParquetClickLog, data) -> None:
    """Refuse ``log`` on ``data`` when a fingerprint it records (:func:`training_identity`)
    differs from the data's: its ``doc_row`` values would index other documents. A log without
    fingerprints (a real log) is not checked."""
    current = training_identity(data)
    for name in IDENTITY:
        recorded = getattr(log, name)
        if recorded is None or name not in current or recorded == current[name]:
            continue
        what = "query ids" if name == "train_qids_sha256" else "files"
        raise ClickLogError(
            f"{log.source}: written for other data: the training split's {what} it records "
            f"have {name} {recorded}, this run's training split has {current[name]}. Train on "
            "the data and fold it was written for (the data= and data.fold= of the run that "
            "wrote it), or write a log for this data with task=simulate"
        )


def _log_features(data, log: ClickLog) -> np.ndarray:
    """float32 [N, F]: the features of every log row (see :meth:`ClickDataModule.logged`)."""
    n_features = data.n_features
    if log.doc_row is not None:
        split = data.split_data("train")
        outside = log.doc_row >= split.num_rows
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise ClickLogError(
                f"{log.source}: row {row} (session {log.session[row]}): doc_row "
                f"{log.doc_row[row]} is outside the {split.num_rows} rows of this run's "
                "training split (a doc_row log needs the data it was written for: same data "
                "and fold)"
            )
        return np.ascontiguousarray(split.features[log.doc_row])
    assert log.features is not None
    if log.features.shape[1] != n_features:
        raise ClickLogError(
            f"{log.source}: features has {log.features.shape[1]} columns, the data "
            f"{n_features}: a log's features must be the run's features, in order"
        )
    return run_features(data, log.features, log.source)


def run_features(data, raw: np.ndarray, source: str = "the click log") -> np.ndarray:
    """float32 [n, F]: a log's raw features as ``data`` normalises its own (its feature
    transform, then its z-score); per-query normalisation is refused (a log's rows are not
    the data's queries)."""
    if getattr(data, "normalization", "none") == "query_minmax":
        raise ClickLogError(
            f"{source}: a features log cannot be normalised per query "
            "(data.normalization=query_minmax); use zscore or none, or a doc_row log"
        )
    features = raw.copy()
    transform = data.feature_transform
    if transform is not None:
        features = transform(torch.from_numpy(features)).numpy().astype(np.float32)
    if data.feature_mean is not None:
        apply_zscore(features, data.feature_mean, data.feature_std)
    return features
