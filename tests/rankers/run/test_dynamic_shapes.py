"""Exports that stay exact at every list length: each scorer (linear, MLP, transformer, ConeRank,
an ensemble of them), exported once to ONNX and TorchScript with its serving transform and
z-score inside the graph, scores like PyTorch eager within 1e-5 at list lengths 1, 2, 10, 100
and 1,000 and batch sizes 1 and 7, with padded slots (NaN features, mask False) in the batch.

A trace records one example's shapes (2 queries of 3 documents); a graph that specialised an
axis to it (pytorch/pytorch#122321: a transformer export broken at another sequence length)
fails here at the first other length."""

import numpy as np
import pytest
import torch

from differank.datamodules.transforms import SignedLog1p, fit
from differank.rankers.checkpoints import Scorer
from differank.rankers.run.ensemble import EnsembleRanker
from differank.rankers.run.export import export_onnx, export_torchscript
from differank.rankers.scorers.conerank import ConeRank
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.mlp import MLPRanker
from differank.rankers.scorers.transformer import TransformerRanker

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

F = 46  # LETOR 4.0's feature count
LENGTHS = (1, 2, 10, 100, 1000)
BATCHES = (1, 7)
TOLERANCE = 1e-5


def statistics(seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        "mean": torch.rand(F, generator=generator, dtype=torch.float64) * 0.5,
        "std": 0.2 + torch.rand(F, generator=generator, dtype=torch.float64) * 0.3,
    }


def gaussrank():
    rows = np.random.default_rng(0).random((2000, F), dtype=np.float32)
    return fit("gaussrank", rows).module()


def linear_scorer() -> Scorer:
    torch.manual_seed(1)
    ranker = LinearRanker(F)
    torch.nn.init.normal_(ranker.linear.weight, std=F**-0.5)  # it starts at zero
    return Scorer(ranker, **statistics(1), transform=SignedLog1p())


def mlp_scorer() -> Scorer:
    torch.manual_seed(2)
    return Scorer(MLPRanker(F, hidden=(32, 16)), **statistics(2), transform=gaussrank())


def transformer_scorer() -> Scorer:
    torch.manual_seed(3)
    ranker = TransformerRanker(F, d_model=16, num_layers=2, num_heads=2, dim_feedforward=32)
    return Scorer(ranker, **statistics(3))


def conerank_scorer() -> Scorer:
    """ConeRank with an MLP encoder: served as the encoder and a fixed direction."""
    cone = ConeRank(F, n_basis=4, encoder_hidden=(16,), embed_dim=8, seed=4)
    return Scorer(cone.serving_ranker(), **statistics(4))


def ensemble_scorer() -> Scorer:
    """What rankers/run/ensemble.py builds: members behind their own transforms, scores
    standardised per query over the real documents, then averaged. Two members, one scoring
    each document alone and one attending over the list, keep its export short."""
    members = [linear_scorer(), transformer_scorer()]
    return Scorer(EnsembleRanker(members, weights=[1.0, 2.0]))


SCORERS = {
    "linear": linear_scorer,
    "mlp": mlp_scorer,
    "transformer": transformer_scorer,
    "conerank": conerank_scorer,
    "ensemble": ensemble_scorer,
}


def padded_batch(queries: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """LETOR-like features in [0, 1] of ``queries`` lists, the first ``length`` long, the
    others shorter (down to one document); padded slots hold NaN."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.rand(queries, length, F, generator=generator)
    sizes = torch.tensor([max(1, length - (length * q) // queries) for q in range(queries)])
    mask = torch.arange(length) < sizes[:, None]
    return torch.where(mask[..., None], features, float("nan")), mask


def call(scorer, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return scorer(features, mask) if scorer.uses_mask else scorer(features)


@pytest.fixture(scope="module", params=sorted(SCORERS))
def exported(request, tmp_path_factory):
    """(name, eager scorer, its TorchScript file, its ONNX file), exported once per scorer."""
    scorer = SCORERS[request.param]().eval()
    folder = tmp_path_factory.mktemp(request.param)
    scripted = export_torchscript(scorer, folder / "scorer.pt")
    pytest.importorskip("onnxscript", reason="onnxscript is the optional export extra")
    return request.param, scorer, scripted, export_onnx(scorer, folder / "scorer.onnx")


def onnx_runner(path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the test machine is shared
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [node.name for node in session.get_inputs()]

    def run(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        feeds = {"features": features.numpy(), "mask": mask.numpy()}
        return torch.from_numpy(session.run(["scores"], {n: feeds[n] for n in names})[0])

    return run


def torchscript_runner(path, uses_mask: bool):
    scripted = torch.jit.load(str(path))

    def run(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return scripted(features, mask) if uses_mask else scripted(features)

    return run


@pytest.mark.parametrize("runtime", ["onnxruntime", "torchscript"])
def test_the_export_scores_like_eager_at_every_length_and_batch(exported, runtime):
    name, scorer, scripted, onnx_path = exported
    if runtime == "onnxruntime":
        run = onnx_runner(onnx_path)
    else:
        run = torchscript_runner(scripted, scorer.uses_mask)
    worst = {}
    for length in LENGTHS:
        for queries in BATCHES:
            features, mask = padded_batch(queries, length, seed=length + queries)
            served = run(features, mask)
            assert served.shape == (queries, length), (name, runtime, queries, length)
            eager = call(scorer, features, mask)
            assert bool(torch.isfinite(eager[mask]).all())
            worst[(queries, length)] = float((served[mask] - eager[mask]).abs().max())
            if queries > 1:  # a padded query scores as it does alone, without padding
                size = int(mask[-1].sum())
                alone = call(scorer, features[-1:, :size], mask[-1:, :size])
                assert torch.allclose(served[-1, :size], alone[0], rtol=0, atol=TOLERANCE)
    assert max(worst.values()) < TOLERANCE, f"{name} in {runtime}: max |Δscore| {worst}"
