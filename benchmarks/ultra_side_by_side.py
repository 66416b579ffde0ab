"""differank's click simulation and click training beside ULTRA_pytorch's, on the same lists of
the same data, in one process (docs/clicks.md#speed-against-ultra).

    python benchmarks/ultra_side_by_side.py ULTRA_CHECKOUT [--data DIR] [--out FILE]

ULTRA_pytorch is fetched, never vendored: ``git clone https://github.com/ULTR-Community/
ULTRA_pytorch`` (any checkout; its last commit is of 2023) and pass its folder. Its code needs
``six``, ``tabulate`` and ``pandas`` (``pip install --target DIR six tabulate pandas`` and
``PYTHONPATH=DIR``); ``ultra/ranking_model/base_ranking_model.py`` imports TensorFlow but uses
none of it (only in comments), so when TensorFlow is absent the script registers an empty module
of that name before importing ULTRA (after TensorBoard has settled that TensorFlow is absent).
Everything that runs is ULTRA's own code. Without the checkout the script says why and exits 1.

Data: MQ2008 Fold1's training queries (``--data``, default ``$LETOR_DIR/MQ2008``), each shown
list its first 10 documents in file order (ULTRA pads shorter lists to 10), raw features (no
normalisation), labels 0..2.
ULTRA reads a copy of the training file holding those first 10 documents of each query without
their ``#docid`` comments: its LibSVM reader cannot parse the comments, and with ``rank_cut`` it
indexes features by file line while storing only the kept lines (an IndexError), so the copy is
cut beforehand and read with ``rank_cut=None``: the same lists. ULTRA's feed hands its model
document ids as float32 arrays, which ``torch.as_tensor(..., dtype=torch.int64)`` refuses in
torch 2 (a TypeError in ``base_algorithm.py``); the script casts them to int64 between the two
(counted in ULTRA's time). ``IPWrank.train`` ends, after its optimizer step, with
``clip_grad_value_`` on its click labels, tensors without gradients: older torch did nothing,
torch 2.13 raises a RuntimeError on the empty gradient list; the script catches exactly that
error (the step's work is done by then; only IPWrank's loss printout is skipped).

1. Click models alone (PBM η = 1, cascade, UBM η = 1; ε⁻ = 0.1, ε⁺ = 1): ULTRA's
   ``sampleClicksForOneList`` over every list (10 slots each), against differank's
   ``model.simulate`` on batches of 256 lists [256, 10]. Unit: slots simulated per second
   (one click decision per shown slot).
2. Training steps: one step = a batch of 256 sessions with PBM clicks + forward, backward and
   optimizer step of a [512, 256, 128] MLP under IPS with the softmax loss (ULTRA's IPWrank with
   its DNN, Adagrad lr 0.05, ``ClickSimulationFeed.get_batch`` as ``main.py`` calls it; differank's
   ``ClickDataModule`` batch + ``click_batch`` + ``RankingModule.training_step`` with
   ``IPS(label_sum_weighting=True)``, ``SoftmaxLoss``, ``MLPRanker(hidden=[512, 256, 128],
   dropout=0)``, Adagrad lr 0.05, in a plain loop: Lightning's own per-step bookkeeping is not
   counted). ULTRA's DNN adds layer normalisation and ELU; differank's MLP has ReLU, no norm.
   A last row times differank's model alone on one fixed click batch (no batch built, no
   session drawn): the share of a step that is the MLP's arithmetic, which both sides pay.

CPU, one torch thread, process CPU time (a shared machine), the fastest of ``--repeats``
interleaved repeats (differank, ULTRA, differank, ...).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import sys
import tempfile
import time
import types
from functools import partial
from pathlib import Path

import measure
import numpy as np
import torch

OUT = measure.ROOT / "benchmarks" / "results" / "ultra_side_by_side.md"
LIST_SIZE = 10
BATCH = 256
# ULTRA's dependencies installed with pip --target (module docstring)
COMMAND = "PYTHONPATH=/tmp/ultra-deps python benchmarks/ultra_side_by_side.py"


def load_ultra(checkout: Path):
    """ULTRA's package from ``checkout``, imported as ``ultra`` (see the module docstring)."""
    if not (checkout / "ultra" / "__init__.py").is_file():
        raise SystemExit(f"{checkout}: not an ULTRA_pytorch checkout (no ultra/__init__.py)")
    if importlib.util.find_spec("tensorflow") is None:
        from tensorboard.compat import tf as tensorboard_tf

        tensorboard_tf.io  # noqa: B018  # settle TensorBoard's own TensorFlow stub first
        import torch.utils.tensorboard  # noqa: F401

        empty = types.ModuleType("tensorflow")
        empty.__spec__ = importlib.machinery.ModuleSpec("tensorflow", None)  # torch probes it
        sys.modules["tensorflow"] = empty
    spec = importlib.util.spec_from_file_location(
        "ultra", checkout / "ultra" / "__init__.py", submodule_search_locations=[]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ultra"] = module
    spec.loader.exec_module(module)
    return module


def shown_lists(data_dir: Path):
    """(LetorDataModule of Fold1 without normalisation, first-10 rows of each training query,
    labels [Q, 10] float32 with padding 0, mask [Q, 10])."""
    from differank.datamodules.letor import LetorDataModule

    data = LetorDataModule(data_dir, fold=1, normalization="none", batch_size=BATCH)
    split = data.split_data("train")
    rows = [split.query_rows[q][:LIST_SIZE] for q in split.queries]
    labels = torch.zeros(len(rows), LIST_SIZE)
    mask = torch.zeros(len(rows), LIST_SIZE, dtype=torch.bool)
    for q, r in enumerate(rows):
        labels[q, : len(r)] = torch.from_numpy(split.labels[r])
        mask[q, : len(r)] = True
    return data, rows, labels, mask


def click_models(ultra):
    """name -> (ULTRA's model, differank's model), the same parameters."""
    from differank.datamodules.clicks.cascade import CascadeModel
    from differank.datamodules.clicks.pbm import PositionBasedModel
    from differank.datamodules.clicks.ubm import UserBrowsingModel

    cm = ultra.utils.click_models
    return {
        "PBM (η = 1)": (
            cm.PositionBiasedModel(0.1, 1.0, 2, 1.0),
            PositionBasedModel(max_label=2, eta=1.0, positions=LIST_SIZE),
        ),
        "cascade": (cm.CascadeModel(0.1, 1.0, 2, 1.0), CascadeModel(max_label=2, positions=10)),
        "UBM (η = 1)": (
            cm.UserBrowsingModel(0.1, 1.0, 2, 1.0),
            UserBrowsingModel(max_label=2, eta=1.0, positions=LIST_SIZE),
        ),
    }


def click_rates(
    ultra, labels, mask, repeats: int, batch_sizes: list[int]
) -> list[tuple[str, int, float, float]]:
    """(model, lists per call, differank slots/s, ULTRA slots/s) per click model and batch size
    (ULTRA draws list by list whatever its batch: its rate is measured once per model)."""
    label_lists = [[int(v) for v in row] for row in labels.tolist()]
    generator = torch.Generator().manual_seed(0)
    results = []
    for name, (theirs, ours) in click_models(ultra).items():

        def theirs_run(theirs=theirs):
            for label_list in label_lists:
                theirs.sampleClicksForOneList(list(label_list))

        theirs_s = None
        for size in batch_sizes:
            # every list once per pass, in calls of `size` lists (the last call may be shorter)
            starts = range(0, len(labels), size)
            batches = [(labels[i : i + size], mask[i : i + size]) for i in starts]

            def ours_run(ours=ours, batches=batches):
                for _ in range(20):
                    for batch_labels, batch_mask in batches:
                        ours.simulate(batch_labels, batch_mask, generator)

            ours_s, theirs_now = interleaved(ours_run, theirs_run, repeats)
            theirs_s = theirs_now if theirs_s is None else min(theirs_s, theirs_now)
            slots = len(label_lists) * LIST_SIZE
            results.append((name, size, 20 * slots / ours_s, slots / theirs_s))
    return results


def interleaved(first, second, repeats: int) -> tuple[float, float]:
    """The fastest process CPU time of each of two functions, run alternately."""
    first(), second()  # warm-up
    a, b = [], []
    for _ in range(repeats):
        a.append(measure.call_seconds(first, time.process_time))
        b.append(measure.call_seconds(second, time.process_time))
    return min(a), min(b)


def read_text(path: Path) -> str:
    """A LETOR file's text (gzip-compressed or not)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as file:
        return file.read()


def ultra_libsvm_copy(sources: list[Path], folder: Path) -> Path:
    """ULTRA's LibSVM layout of Fold1's training files (comments dropped) under ``folder``."""
    (folder / "train").mkdir(parents=True)
    lines = [line for source in sources for line in read_text(source).splitlines()]
    kept, seen = [], collections.Counter()
    for line in lines:  # the first LIST_SIZE documents of each query, in file order
        qid = line.split()[1]
        seen[qid] += 1
        if seen[qid] <= LIST_SIZE:
            kept.append(re.sub(r"\s*#.*$", "", line))
    (folder / "train" / "train.txt").write_text("\n".join(kept) + "\n")
    (folder / "settings.json").write_text(json.dumps({"feature_size": 46, "max_label": 2}))
    return folder


def ultra_step(ultra, checkout: Path, folder: Path):
    """A function running one ULTRA training step (IPWrank, DNN, ClickSimulationFeed)."""
    click_model = folder / "pbm.json"
    pbm = ultra.utils.click_models.PositionBiasedModel(0.1, 1.0, 2, 1.0)
    click_model.write_text(json.dumps(pbm.getModelJson()))
    with contextlib.redirect_stdout(io.StringIO()):
        train_set = ultra.utils.data_utils.read_data(f"{folder}/", "train", None, None)
        settings = {
            "train_input_feed": "ultra.input_layer.ClickSimulationFeed",
            "train_input_hparams": f"click_model_json={click_model}",
            "ranking_model": "ultra.ranking_model.DNN",
            "ranking_model_hparams": "hidden_layer_sizes=[512, 256, 128]",
            "learning_algorithm": "ultra.learning_algorithm.IPWrank",
            "learning_algorithm_hparams": "propensity_estimator_json="
            f"{checkout}/example/PropensityEstimator/randomized_pbm_0.1_1.0_4_1.0.json",
            "metrics": ["ndcg"],
            "metrics_topn": [10],
            "objective_metric": "ndcg_10",
        }
        settings["max_candidate_num"] = train_set.rank_list_size
        settings["selection_bias_cutoff"] = train_set.rank_list_size
        train_set.pad(settings["max_candidate_num"])
        model = ultra.utils.find_class(settings["learning_algorithm"])(train_set, settings)
        feed = ultra.utils.find_class(settings["train_input_feed"])(
            model, BATCH, settings["train_input_hparams"]
        )

    def step():
        with contextlib.redirect_stdout(io.StringIO()):  # IPWrank prints every step's loss
            input_feed, _ = feed.get_batch(train_set, check_validation=True)
            for name in model.docid_inputs_name:  # see the module docstring: torch >= 2 needs
                input_feed[name] = input_feed[name].astype(np.int64)  # integer document ids
            try:
                model.train(input_feed)
            except RuntimeError as error:  # the no-op clip after the step (module docstring)
                if "nested_tensorlist" not in str(error):
                    raise

    return step


def differank_step(data, rows):
    """A function running one differank training step (module docstring)."""
    from differank.datamodules.clicks.datamodule import ClickDataModule
    from differank.datamodules.clicks.pbm import PositionBasedModel
    from differank.losses import SoftmaxLoss
    from differank.losses.unbiased.ips import IPS
    from differank.rankers.scorers.mlp import MLPRanker
    from differank.rankers.training.module import RankingModule

    clicks = ClickDataModule.simulated(
        data, rows, PositionBasedModel(max_label=2, eta=1.0, positions=LIST_SIZE), seed=0
    )
    module = RankingModule(
        ranker=partial(MLPRanker, hidden=[512, 256, 128], dropout=0.0),
        loss=SoftmaxLoss(),
        optimizer=partial(torch.optim.Adagrad, lr=0.05),
        n_features=data.n_features,
        estimator=IPS(label_sum_weighting=True),
    )
    optimizer = module.make_optimizer(module.parameters())
    loader = clicks.train_dataloader()
    batches = iter(())  # (index, batch) of the current epoch
    epoch = -1

    def step(batch=None):
        nonlocal batches, epoch
        if batch is None:
            index, batch = next(batches, (None, None))
            if batch is None:
                batches, epoch = enumerate(loader), epoch + 1
                index, batch = next(batches)
            batch = clicks.click_batch(batch, epoch=epoch, batch_index=index)
        loss = module.training_step(batch, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    fixed = clicks.click_batch(next(iter(loader)), epoch=0, batch_index=0)
    return step, partial(step, fixed), sum(p.numel() for p in module.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ultra", type=Path, help="an ULTRA_pytorch checkout")
    parser.add_argument("--data", type=Path, default=None, help="MQ2008 (default $LETOR_DIR)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--click-batches",
        nargs="+",
        type=int,
        default=[BATCH],
        help="lists per differank simulate call (ULTRA's batch is 256)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from differank.datamodules.download import data_home

    data_dir = args.data or data_home() / "MQ2008"
    checkout = args.ultra.resolve()
    ultra = load_ultra(checkout)
    data, rows, labels, mask = shown_lists(data_dir)
    rates = click_rates(ultra, labels, mask, args.repeats, args.click_batches)
    with tempfile.TemporaryDirectory() as folder:
        cwd = os.getcwd()
        os.chdir(folder)  # ULTRA's SummaryWriter() writes ./runs
        try:
            copy = ultra_libsvm_copy(data.split_files("train"), Path(folder))
            theirs = ultra_step(ultra, checkout, copy)
            ours, model_alone, parameters = differank_step(data, rows)
            floor_s, _ = interleaved(
                lambda: [model_alone() for _ in range(args.steps)], lambda: None, args.repeats
            )
            ours_s, theirs_s = interleaved(
                lambda: [ours() for _ in range(args.steps)],
                lambda: [theirs() for _ in range(args.steps)],
                args.repeats,
            )
        finally:
            os.chdir(cwd)
    lines = [
        "# differank beside ULTRA_pytorch: simulated clicks and click-training steps (CPU)",
        "",
        f"`{COMMAND} {' '.join(sys.argv[1:])}`",
        "",
        f"MQ2008 Fold1 training queries ({len(rows)} lists of their first {LIST_SIZE} "
        "documents), one torch thread, process CPU time, fastest of "
        f"{args.repeats} interleaved repeats; ULTRA_pytorch at {checkout} "
        f"(benchmarks/ultra_side_by_side.py's docstring: what each side runs).",
        "",
        "| click model | lists per differank call | differank slots/s | ULTRA slots/s | ratio |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {size} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.1f}× |"
            for name, size, ours, theirs in rates
        ),
        "",
        f"| training (PBM clicks, IPS, softmax, MLP 512-256-128, batch {BATCH}) "
        "| differank steps/s | ULTRA steps/s | ratio |",
        "|---|---:|---:|---:|",
        f"| one step: sessions + forward + backward + Adagrad | {args.steps / ours_s:.1f} | "
        f"{args.steps / theirs_s:.1f} | {theirs_s / ours_s:.1f}× |",
        f"| differank's model alone: one fixed batch, forward + backward + Adagrad | "
        f"{args.steps / floor_s:.1f} | | |",
        "",
        f"differank's MLP has {parameters:,} parameters (ULTRA's DNN the same layers plus layer "
        "normalisation).",
    ]
    measure.publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
