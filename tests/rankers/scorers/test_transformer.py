"""The listwise transformer scorer: permutation equivariance, padding and masking, finite outputs
on degenerate lists, the mask reaching it through the modules, feature noise, ConeRank with a
list encoder, export with a fitted feature transform, and a short training run."""

import numpy as np
import pytest
import torch

from differank.datamodules.transforms import GaussRank, fit
from differank.losses.cone import ConeLoss
from differank.losses.listnet import ListNetLoss
from differank.rankers.checkpoints import Scorer
from differank.rankers.run.ensemble import load_member
from differank.rankers.run.export import export_onnx, export_torchscript
from differank.rankers.scorers.conerank import ConeRank
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.transformer import TransformerRanker
from differank.rankers.training.module import RankingModule

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

F = 6


def ranker(**options) -> TransformerRanker:
    torch.manual_seed(0)
    return TransformerRanker(F, d_model=16, num_heads=4, **options).eval()


def inputs(b=3, l=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(b, l, F, generator=g)
    lengths = torch.tensor([l, 4, 1][:b])
    mask = torch.arange(l) < lengths[:, None]
    return features, mask


@pytest.mark.parametrize("latent_cross", [False, True])
def test_scores_are_permutation_equivariant(latent_cross):
    model = ranker(latent_cross=latent_cross)
    features, mask = inputs()
    scores = model(features, mask)
    order = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    permuted = model(features[:, order], mask[:, order])
    torch.testing.assert_close(permuted, scores[:, order], rtol=1e-5, atol=1e-6)


def test_padding_never_changes_real_scores():
    model = ranker()
    features, mask = inputs()
    scores = model(features, mask)
    nan_padded = features.masked_fill(~mask.unsqueeze(-1), float("nan"))
    assert torch.equal(model(nan_padded, mask), scores)  # zeroed before the projection
    longer = torch.cat([features, torch.randn(3, 5, F)], dim=1)  # more keys, masked out
    wider = torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(longer, wider)[:, :7], scores, rtol=0, atol=1e-6)
    assert bool((scores[~mask] == 0).all())


def test_a_real_document_changes_the_others_scores():
    model = ranker()
    features, mask = inputs()
    scores = model(features, mask)
    moved = features.clone()
    moved[0, 0] += 3.0
    assert not torch.allclose(model(moved, mask)[0, 1:], scores[0, 1:])  # context-aware
    assert torch.equal(model(moved, mask)[1:], scores[1:])  # other queries untouched
    flat = ranker(num_layers=0)  # no attention: a per-document model
    torch.testing.assert_close(flat(moved, mask)[0, 1:], flat(features, mask)[0, 1:])


def test_single_document_and_empty_rows_are_finite_with_finite_gradients():
    model = ranker().train()
    features, _ = inputs()
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, 0] = True  # a one-document query, and two rows without a real document
    features = features.masked_fill(~mask.unsqueeze(-1), float("nan"))
    scores = model(features, mask)
    assert bool(torch.isfinite(scores).all()) and bool((scores[1:] == 0).all())
    scores.sum().backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)


def test_without_a_mask_every_slot_is_a_document():
    model = ranker()
    features, _ = inputs()
    torch.testing.assert_close(model(features), model(features, torch.ones(3, 7, dtype=bool)))


def test_options_are_checked():
    with pytest.raises(ValueError, match="must divide"):
        TransformerRanker(F, d_model=10, num_heads=4)
    with pytest.raises(ValueError, match="dropout"):
        TransformerRanker(F, dropout=1.0)
    with pytest.raises(ValueError, match="latent_cross"):
        TransformerRanker(F, latent_cross="yes")


def batch():
    features, mask = inputs()
    labels = torch.tensor([[2.0, 1, 0, 0, 1, 0, 2], [1, 0, 0, 2, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]])
    doc_index = torch.where(mask, torch.arange(21).view(3, 7), -1)
    return {
        "features": features,
        "labels": labels,
        "mask": mask,
        "qid": torch.arange(3),
        "doc_index": doc_index,
    }


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3)


def test_the_module_hands_the_mask_to_rankers_that_use_it():
    seen = []

    class Recording(TransformerRanker):
        def forward(self, features, mask=None):
            seen.append(mask)
            return super().forward(features, mask)

    module = RankingModule(
        lambda n_features: Recording(n_features, d_model=8, num_heads=2),
        ListNetLoss(),
        adamw,
        n_features=F,
    )
    data = batch()
    module.batch_loss(data)
    module.validation_step(data, 0)
    module._keep_scores(data)
    assert len(seen) == 3 and all(torch.equal(m, data["mask"]) for m in seen)
    linear = RankingModule(LinearRanker, ListNetLoss(), adamw, n_features=F)
    assert linear.ranker.uses_mask is False and linear(data["features"], data["mask"]).shape == (
        3,
        7,
    )


def test_feature_noise_is_for_training_batches_and_real_documents_only():
    module = RankingModule(LinearRanker, ListNetLoss(), adamw, n_features=F, augment_noise=0.5)
    data = batch()
    noisy = module.augment(data)
    changed = (noisy["features"] != data["features"]).any(-1)
    assert torch.equal(changed, data["mask"])
    assert RankingModule(LinearRanker, ListNetLoss(), adamw, n_features=F).augment(data) is data
    with pytest.raises(ValueError, match="augment_noise"):
        RankingModule(LinearRanker, ListNetLoss(), adamw, n_features=F, augment_noise=-1.0)


def test_conerank_takes_a_list_encoder():
    cone = ConeRank(
        F, n_basis=3, transformer={"d_model": 8, "num_heads": 2}, embed_dim=5, seed=0
    ).eval()
    assert cone.uses_mask and not ConeRank(F, n_basis=3).uses_mask
    data = batch()
    encoded = cone.loss_target(data["features"], data["mask"])
    assert encoded.shape == (3, 7, 5) and bool((encoded[~data["mask"]] == 0).all())
    ConeLoss()(encoded, data["labels"], data["mask"], **cone.loss_inputs()).backward()
    nan_padded = data["features"].masked_fill(~data["mask"].unsqueeze(-1), float("nan"))
    scores = cone(data["features"], data["mask"])
    assert torch.equal(cone(nan_padded, data["mask"]), scores)
    served = cone.serving_ranker()  # enc(x)·v with v fixed: no pseudo-inverse to export
    assert served.uses_mask and "basis" not in dict(served.named_parameters())
    torch.testing.assert_close(served(nan_padded, data["mask"]), scores)
    mlp = ConeRank(F, n_basis=3, encoder_hidden=[4], seed=0)  # per-document: no mask
    assert not mlp.serving_ranker().uses_mask
    torch.testing.assert_close(mlp.serving_ranker()(data["features"]), mlp(data["features"]))
    with pytest.raises(ValueError, match="not both"):
        ConeRank(F, encoder_hidden=[4], transformer={})


def transformed_scorer():
    # one attention block and ~70 knots per feature keep the ONNX export quick
    train = np.random.default_rng(0).lognormal(size=(500, F)).round(1).astype(np.float32)
    gauss = fit("gaussrank", train).module()
    mean, std = torch.rand(F), torch.rand(F) + 0.5
    model = ranker(latent_cross=True, num_layers=1)
    return Scorer(model, mean=mean, std=std, transform=gauss).eval()


def serving_inputs(b, l):
    features, mask = inputs(b, l, seed=2)
    features = features.exp()  # raw, skewed features as in LETOR files
    return features.masked_fill(~mask.unsqueeze(-1), float("nan")), mask


def test_torchscript_export_takes_features_and_mask(tmp_path):
    scorer = transformed_scorer()
    scripted = torch.jit.load(str(export_torchscript(scorer, tmp_path / "scorer.pt")))
    for b, l in [(1, 1), (3, 17)]:
        features, mask = serving_inputs(b, l)
        expected = scorer(features, mask)
        assert bool(torch.isfinite(expected).all())
        torch.testing.assert_close(scripted(features, mask), expected, rtol=1e-5, atol=1e-5)


def test_onnx_export_takes_features_and_mask(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    pytest.importorskip("onnx", reason="onnx is the optional export extra")
    scorer = transformed_scorer()
    session = ort.InferenceSession(
        str(export_onnx(scorer, tmp_path / "scorer.onnx")), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["features", "mask"]
    for b, l in [(1, 1), (3, 17), (2, 0)]:  # lists of length 0 too
        features, mask = serving_inputs(b, l)
        served = session.run(None, {"features": features.numpy(), "mask": mask.numpy()})[0]
        torch.testing.assert_close(
            torch.from_numpy(served), scorer(features, mask), rtol=1e-4, atol=1e-4
        )


def test_a_short_run_trains_and_its_exported_scorer_scores_raw_features_like_the_run(tmp_path):
    from differank.datamodules.synthetic import SyntheticLetorDataModule
    from tests.conftest import run_config

    sizes = dict(n_train_queries=30, n_val_queries=10, n_test_queries=10)
    overrides = [f"data.{k}={v}" for k, v in sizes.items()] + [
        "model=transformer",
        "model.ranker.d_model=16",
        "model.ranker.dim_feedforward=32",
        "model.augment_noise=0.1",
        "data.transform=gaussrank",
        "loss=listnet",
        "trainer.max_epochs=1",
        "logger=csv",
    ]
    run = tmp_path / "run"
    value = run_config(overrides, run)
    assert 0.0 <= value <= 1.0 and (run / "checkpoints" / "best.ckpt").is_file()
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["differank"]["data"]["transform"].startswith("gaussrank (tables sha256")
    scorer = load_member(run / "checkpoints" / "best.ckpt")  # rebuilt from the run's config
    assert isinstance(scorer.transform, GaussRank) and scorer.uses_mask
    raw = SyntheticLetorDataModule(**sizes, normalization="none").full_batch("test")
    scripted = torch.jit.load(str(export_torchscript(scorer, tmp_path / "scorer.pt")))
    scores = scripted(raw["features"], raw["mask"])[raw["mask"]].double()
    lines = (run / "predictions" / "test.txt").read_text().split()
    expected = torch.tensor([float(x) for x in lines], dtype=torch.float64)
    torch.testing.assert_close(
        scores, expected[raw["doc_index"][raw["mask"]]], rtol=1e-4, atol=1e-4
    )
