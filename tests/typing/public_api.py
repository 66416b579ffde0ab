"""The public API as a type checker sees it, pinned: mypy reads this file (pyproject.toml's
``[tool.mypy] files``, and tests/test_typing.py), and any change to a pinned signature or return
type is an error. It is never run, and pytest does not collect it (no ``test_`` prefix).

Each public function is called with its documented keywords: a renamed or dropped keyword, a
changed parameter type or a return type other than the one pinned fails mypy here.
"""

from os import PathLike
from pathlib import Path

import numpy as np
import torch
from typing_extensions import assert_type  # typing.assert_type is Python 3.11+

import differank
from differank.datamodules import (
    ParquetColumns,
    read_letor,
    read_parquet,
    read_query_files,
    write_parquet,
)
from differank.losses import (
    approx_metric_loss,
    approx_ndcg_loss,
    cone_loss,
    convex_loss,
    distill_loss,
    domination_loss,
    lambda_loss,
    listmle_loss,
    listnet_loss,
    mse_loss,
    neural_ndcg_loss,
    ordinal_loss,
    poly1_softmax_loss,
    ranknet_loss,
    sigmoid_bce_loss,
    softmax_loss,
    structured_hinge_loss,
)
from differank.rankers.checkpoints import Scorer
from differank.rankers.run.estimator import Ranker
from differank.rankers.tuning.tune import TuneResult

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # X [N, F], y [N], qid [N]


def losses(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
    """Every exported loss keeps its signature through ``list_loss``: ``(scores, labels,
    mask=None, *, options..., reduction)`` -> Tensor."""
    assert_type(lambda_loss(scores, labels), torch.Tensor)
    assert_type(
        lambda_loss(
            scores,
            labels,
            mask,
            weighting="ndcgLoss2++",
            k=10,
            sigma=1.0,
            mu=10.0,
            eps=1e-10,
            logarithm="binary",
            reduction="none",
        ),
        torch.Tensor,
    )
    assert_type(lambda_loss(scores=scores, labels=labels, mask=None), torch.Tensor)
    assert_type(ranknet_loss(scores, labels, mask, reduction="sum"), torch.Tensor)
    assert_type(listnet_loss(scores, labels, mask, reduction="mean"), torch.Tensor)
    assert_type(
        listmle_loss(scores, labels, mask, ties="random", position_aware=True, eps=1e-10),
        torch.Tensor,
    )
    assert_type(softmax_loss(scores, labels, mask), torch.Tensor)
    assert_type(poly1_softmax_loss(scores, labels, mask, epsilon=1.0), torch.Tensor)
    assert_type(approx_ndcg_loss(scores, labels, mask, alpha=1.0, eps=1e-10), torch.Tensor)
    assert_type(
        approx_metric_loss(scores, labels, mask, metric="ndcg", k=10, temperature=1.0),
        torch.Tensor,
    )
    assert_type(
        neural_ndcg_loss(
            scores,
            labels,
            mask,
            temperature=1.0,
            k=None,
            powered_relevancies=True,
            transposed=False,
            stochastic=False,
            n_samples=32,
            beta=0.1,
            log_scores=True,
            sinkhorn_tolerance=1e-6,
            sinkhorn_iterations=50,
        ),
        torch.Tensor,
    )
    assert_type(
        domination_loss(
            scores,
            labels,
            mask,
            margins=None,
            layer_margins=None,
            margin_scale=0.0,
            margin_offset=0.0,
            flat=False,
            pool=False,
        ),
        torch.Tensor,
    )
    assert_type(
        structured_hinge_loss(scores, labels, mask, k=10, ystar="compatible", solver="dp"),
        torch.Tensor,
    )
    assert_type(sigmoid_bce_loss(scores, labels, mask, max_label=1.0), torch.Tensor)
    assert_type(mse_loss(scores, labels, mask), torch.Tensor)
    assert_type(ordinal_loss(scores, labels, mask, n=3, thresholds=[0.0, 1.0]), torch.Tensor)
    assert_type(
        distill_loss(scores, labels, mask, scores, form="listwise", alpha=0.0, temperature=1.0),
        torch.Tensor,
    )
    # options given as dataclass fields (ConeOptions, ConvexOptions) are **options: only the
    # named parameters and the return type are checked
    generator = torch.Generator()
    basis = torch.eye(3)
    assert_type(
        cone_loss(scores, labels, mask, basis, generator=generator, alpha=1.0), torch.Tensor
    )
    assert_type(
        convex_loss(scores, labels, mask, samples=None, generator=generator, delta="auc"),
        torch.Tensor,
    )


def estimator(X: np.ndarray, y: np.ndarray, qid: np.ndarray, path: Path) -> None:
    """``differank.Ranker`` is the class (imported lazily at run time) and ``load_ranker``
    returns the serving scorer."""
    assert_type(differank.Ranker, type[Ranker])
    ranker = differank.Ranker(loss="listnet", model="linear", max_epochs=2, verbose=False)
    assert_type(ranker.fit(X, y, qid=qid, eval_set=[(X, y)], eval_qid=qid), Ranker)
    assert_type(ranker.predict(X), np.ndarray)
    assert_type(ranker.score(X, y, qid=qid), float)
    assert_type(ranker.save(path), Path)
    assert_type(Ranker.load(path), Ranker)
    assert_type(differank.load_ranker(path), Scorer)
    assert_type(differank.load_ranker(str(path)), Scorer)
    assert_type(differank.__version__, str)


def tuning(folder: Path) -> None:
    """``differank.tune`` (imported lazily at run time) returns where its report and chosen
    checkpoint are."""
    result = differank.tune(["data=mq2008", "tune.budget=20m"], output_dir=folder)
    assert_type(result, TuneResult)
    assert_type(result.report, Path)
    assert_type(result.checkpoint, Path | None)
    assert_type(result.chosen, str | None)


def readers(path: Path, text: str, folder: PathLike[str]) -> None:
    """The data readers of ``differank.datamodules`` (imported lazily at run time)."""
    assert_type(read_letor(path), Arrays)
    assert_type(read_letor([text, path], nan_policy="zero", null_value=0.0), Arrays)
    assert_type(read_query_files(folder, nan_policy="error"), dict[str, Arrays])
    columns = ParquetColumns(label="relevance", qid="query_id", features=None)
    assert_type(read_parquet(text, columns=columns, label_range=(0.0, 4.0)), Arrays)
    X, y, qid = read_parquet(folder, nan_policy="zero", null_value=0.0, memory_map=False)
    assert_type(write_parquet(path, X, y, qid, columns=columns, compression="zstd"), Path)
    assert_type(write_parquet(text, [[0.5]], [1], [7], docids=["d1"]), Path)
