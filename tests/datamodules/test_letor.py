"""datamodules/letor.py: layouts, folds, grouping, normalisation, max_list, loaders, cache."""

import gzip
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from differank.datamodules import letor_text, reader
from differank.datamodules.folds import MissingLetorFileError, resolve_fold_files
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import write_letor
from tests.conftest import ROOT

MQ2008 = (
    Path(os.environ["LETOR_DIR"]) / "MQ2008"
    if os.environ.get("LETOR_DIR")
    else ROOT.parent / "shared" / "data" / "MQ2008"
)
FOLDS_TSV = "fold\ttrain\tvali\ttest\n" + "".join(
    f"Fold{f}\t{','.join(f'S{(f + i - 1) % 5 + 1}' for i in range(3))}\t"
    f"S{(f + 2) % 5 + 1}\tS{(f + 3) % 5 + 1}\n"
    for f in range(1, 6)
)


def make_part(seed, first_qid, n_queries=4, n_features=4):
    """Random LETOR rows: (features, labels, qids, docids)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 12, size=n_queries)
    qids = np.repeat(np.arange(first_qid, first_qid + n_queries), lengths)
    n = len(qids)
    labels = rng.integers(0, 3, size=n)
    features = rng.uniform(0, 1, size=(n, n_features)).round(4)
    docids = [f"S{seed}-doc{i}" for i in range(n)]
    return features, labels, qids, docids


@pytest.fixture
def s_files(tmp_path):
    """Five gz S files of 5 features and folds.tsv; feature 5 is 0 except in S5."""
    root = tmp_path / "sfiles"
    for k in range(1, 6):
        features, labels, qids, docids = make_part(k, 100 * k, n_features=5)
        if k != 5:
            features[:, 4] = 0.0
        write_letor(root / f"S{k}.txt.gz", features, labels, qids, docids)
    (root / "folds.tsv").write_text(FOLDS_TSV)
    return root


def concatenate(paths, out):
    text = b"".join(gzip.decompress(p.read_bytes()) for p in paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(text)


def module(root, **options):
    options.setdefault("cache_dir", Path(root).parent / "cache")
    return LetorDataModule(root, **options)


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "loop"])
def test_a_fold_file_that_is_not_a_regular_file_is_named_not_missing(tmp_path, kind):
    root = tmp_path / "folds"
    write_letor(root / "Fold1" / "train.txt", *make_part(1, 1))
    write_letor(root / "Fold1" / "test.txt", *make_part(2, 50))
    vali = root / "Fold1" / "vali.txt"
    what = {"directory": "a directory", "fifo": r"a FIFO \(named pipe\)"}
    what |= {"device": "a character device", "loop": "a symbolic link loop"}
    if kind == "directory":
        vali.mkdir()
    elif kind == "fifo":
        os.mkfifo(vali)
    else:
        vali.symlink_to(os.devnull if kind == "device" else vali.name)
    with pytest.raises(ValueError, match=f"vali.txt is {what[kind]}, not a regular file") as info:
        resolve_fold_files(root, 1)
    assert not isinstance(info.value, FileNotFoundError)


def test_folds_tsv_matches_the_letor_table():
    assert FOLDS_TSV.splitlines()[1].split() == ["Fold1", "S1,S2,S3", "S4", "S5"]
    assert FOLDS_TSV.splitlines()[5].split() == ["Fold5", "S5,S1,S2", "S3", "S4"]


@pytest.mark.parametrize("fold", [1, 2])
def test_both_layouts_give_the_same_splits(s_files, tmp_path, fold):
    files = resolve_fold_files(s_files, fold)
    names = {"train": "train.txt", "val": "vali.txt", "test": "test.txt"}
    fold_root = tmp_path / "folds"
    for split, paths in files.items():
        concatenate(paths, fold_root / f"Fold{fold}" / names[split])
    by_s, by_fold = module(s_files, fold=fold), module(fold_root, fold=fold)
    assert by_s.split_files("train") == [
        s_files / f"S{(fold + i - 1) % 5 + 1}.txt.gz" for i in range(3)
    ]
    assert by_fold.split_files("val") == [fold_root / f"Fold{fold}" / "vali.txt"]
    for split in ("train", "val", "test"):
        a, b = by_s.split_data(split), by_fold.split_data(split)
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.query_ids, b.query_ids)
        assert a.docids.tolist() == b.docids.tolist()
    # train = concatenation of the S files in the fold's order
    expected = [f"S{(fold + i - 1) % 5 + 1}-doc" for i in range(3)]
    docids = by_s.split_data("train").docids
    prefixes = list(dict.fromkeys(d.split("-")[0] + "-doc" for d in docids))
    assert prefixes == expected


def test_n_features_is_the_max_over_the_training_files_and_loads_lazily(s_files):
    dm = module(s_files)
    assert dm._splits is None
    assert dm.n_features == 5
    batch = next(iter(dm.train_dataloader()))
    assert batch["features"].shape[-1] == 5
    assert (dm.split_data("train").features[:, 4] == dm.split_data("train").features[0, 4]).all()
    assert dm.label_levels == (0.0, 1.0, 2.0)


def unseen_fold(tmp_path, test_columns):
    """Train/vali with features 1..3 (2 never written in train); test writes ``test_columns``."""
    root = tmp_path / "unseen"
    (root / "Fold1").mkdir(parents=True)
    (root / "Fold1" / "train.txt").write_text("1 qid:1 1:1 3:1\n0 qid:1 1:2 3:5\n")
    (root / "Fold1" / "vali.txt").write_text("1 qid:2 1:1 3:1\n0 qid:2 1:3\n")
    line = " ".join(f"{j}:7" for j in test_columns)
    (root / "Fold1" / "test.txt").write_text(f"1 qid:3 {line}\n0 qid:3 1:1\n")
    return root


@pytest.mark.parametrize("columns, named", [([1, 4], "feature 4"), ([1, 2, 3], "feature 2")])
def test_a_feature_absent_from_training_is_an_error_naming_file_and_feature(
    tmp_path, columns, named
):
    with pytest.raises(ValueError, match=rf"Fold1/test.txt: {named} occurs in no training file"):
        _ = module(unseen_fold(tmp_path, columns)).n_features


def test_unseen_features_drop_zeroes_them_and_logs_the_count(tmp_path, caplog):
    root = unseen_fold(tmp_path, [1, 2, 3, 4, 5])
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.letor"):
        dm = module(root, unseen_features="drop", normalization="none")
        assert dm.n_features == 3
    assert "test.txt: dropped 3 feature(s) that occur in no training file (2, 4, 5)" in caplog.text
    np.testing.assert_array_equal(dm.split_data("test").features, [[7, 0, 7], [1, 0, 0]])
    np.testing.assert_array_equal(dm.split_data("train").features, [[1, 0, 1], [2, 0, 5]])


def test_plain_text_fold_layout_and_gz(tmp_path):
    root = tmp_path / "data"
    for name, seed in (("train.txt", 1), ("vali.txt.gz", 2), ("test.txt", 3)):
        write_letor(root / "Fold3" / name, *make_part(seed, 100 * seed))
    dm = module(root, fold=3)
    assert dm.split_files("val") == [root / "Fold3" / "vali.txt.gz"]
    assert dm.num_rows("val") == len(make_part(2, 200)[1])


def test_missing_files_are_named(s_files, tmp_path):
    (s_files / "S4.txt.gz").unlink()
    with pytest.raises(MissingLetorFileError, match=r"S4\.txt\.gz") as info:
        module(s_files).setup()
    assert isinstance(info.value, ValueError) and isinstance(info.value, FileNotFoundError)
    fold_root = tmp_path / "folds"
    write_letor(fold_root / "Fold1" / "train.txt", *make_part(1, 1))
    write_letor(fold_root / "Fold1" / "test.txt", *make_part(2, 50))
    with pytest.raises(MissingLetorFileError, match=r"Fold1/vali\.txt"):
        _ = module(fold_root).n_features
    with pytest.raises(MissingLetorFileError, match="Fold2"):
        module(fold_root, fold=2).split_files("train")
    with pytest.raises(MissingLetorFileError, match="does not exist"):
        module(tmp_path / "nowhere").setup()


def test_bad_folds_tsv(s_files):
    (s_files / "folds.tsv").write_text("fold\ttrain\tvali\ttest\nFold1\tS1,S2,S3\tS4\tS5\n")
    with pytest.raises(ValueError, match="no row for Fold2"):
        module(s_files, fold=2).setup()
    (s_files / "folds.tsv").write_text("name\ta\tb\tc\n")
    with pytest.raises(ValueError, match="folds.tsv:1: header"):
        module(s_files).setup()


def test_parse_errors_surface_with_file_and_line(tmp_path):
    root = tmp_path / "data"
    write_letor(root / "Fold1" / "train.txt", *make_part(1, 1))
    write_letor(root / "Fold1" / "vali.txt", *make_part(2, 50))
    (root / "Fold1" / "test.txt").write_text("0 qid:1 1:0.5\n1 qid:1 1:oops\n")
    with pytest.raises(ValueError, match=r"Fold1/test\.txt:2: feature value"):
        module(root).setup()


def test_noncontiguous_qids_form_one_query_in_file_order(tmp_path, caplog):
    root = tmp_path / "data"
    qids = np.array([1, 1, 2, 2, 1, 3, 1])
    labels = np.array([0, 1, 2, 0, 2, 1, 0])
    features = np.arange(7 * 2, dtype=float).reshape(7, 2)
    for name in ("train.txt", "vali.txt", "test.txt"):
        write_letor(root / "Fold1" / name, features, labels, qids, [f"d{i}" for i in range(7)])
    with caplog.at_level(logging.INFO, logger="differank.datamodules.letor"):
        dm = module(root, normalization="none")
        dm.setup()
    assert "1 query ids occur in non-contiguous blocks" in caplog.text
    split = dm.split_data("test")
    assert split.query_ids.tolist() == [1, 2, 3]
    assert [r.tolist() for r in split.query_rows] == [[0, 1, 4, 6], [2, 3], [5]]
    batch = dm.full_batch("test")
    assert batch["qid"].tolist() == [1, 2, 3]
    assert batch["doc_index"][0].tolist() == [0, 1, 4, 6]
    assert batch["labels"][0].tolist() == [0, 1, 2, 0]
    torch.testing.assert_close(batch["features"][0, 2], torch.tensor([8.0, 9.0]))


def test_normalization_none_keeps_float32_values_memory_mapped(s_files):
    dm = module(s_files, normalization="none")
    raw = reader.read_letor_file(s_files / "S5.txt.gz", cache_dir=s_files.parent / "c")
    test = dm.split_data("test").features
    assert test.dtype == np.float32 and isinstance(test, np.memmap)
    np.testing.assert_array_equal(test, raw.features)


def test_zscore_is_fitted_on_train_only(s_files):
    none = module(s_files, normalization="none")
    zscore = module(s_files, normalization="zscore")
    train = none.split_data("train").features.astype(np.float64)
    mean, std = train.mean(0), train.std(0)
    std[std == 0] = 1.0  # feature 5 is constant (0) on train: centred, not divided
    assert zscore.feature_std[4] == 1.0
    for split in ("train", "val", "test"):
        expected = (none.split_data(split).features - mean) / std
        np.testing.assert_allclose(zscore.split_data(split).features, expected, atol=1e-5)
    z_train = zscore.split_data("train").features
    np.testing.assert_allclose(z_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(z_train[:, :4].std(0), 1, atol=1e-5)
    assert not np.allclose(zscore.split_data("test").features.mean(0), 0, atol=1e-3)
    assert np.isfinite(zscore.split_data("test").features).all()


def test_query_minmax(s_files):
    none = module(s_files, normalization="none")
    qnorm = module(s_files, normalization="query_minmax")
    for split in ("train", "test"):
        raw, out = none.split_data(split), qnorm.split_data(split)
        for rows in raw.query_rows:
            x = raw.features[rows].astype(np.float64)
            low, span = x.min(0), x.max(0) - x.min(0)
            expected = np.where(span > 0, (x - low) / np.where(span > 0, span, 1), 0.0)
            np.testing.assert_allclose(out.features[rows], expected, atol=1e-6)
    assert (qnorm.split_data("train").features[:, 4] == 0).all()  # constant -> 0


def rows_seen(loader):
    seen = []
    for batch in loader:
        seen.extend(batch["doc_index"][batch["mask"]].tolist())
    return seen


def test_eval_loaders_serve_every_row_and_query_exactly_once(s_files):
    dm = module(s_files, eval_batch_size=3, max_list=2)
    dm.setup()
    for split, loader in (
        ("val", dm.val_dataloader()),
        ("test", dm.test_dataloader()),
        ("test", dm.predict_dataloader()),
    ):
        assert sorted(rows_seen(loader)) == list(range(dm.num_rows(split)))
        qids = [q for batch in loader for q in batch["qid"].tolist()]
        assert sorted(qids) == sorted(dm.split_data(split).query_ids.tolist())
    # eval order is deterministic
    assert rows_seen(dm.test_dataloader()) == rows_seen(dm.test_dataloader())


def test_loaders_are_torch_dataloaders_and_lightning_moves_the_batches(s_files):
    """No framework code re-implemented: torch's own DataLoader iterates, Lightning's own
    ``transfer_batch_to_device`` moves (a no-op for tensors already on the device)."""
    dm = module(s_files)
    dm.setup()
    loaders = (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader())
    assert all(type(loader) is DataLoader for loader in loaders)
    assert "transfer_batch_to_device" not in vars(type(dm))
    batch = next(iter(loaders[0]))
    moved = dm.transfer_batch_to_device(batch, torch.device("cpu"), 0)
    assert moved.keys() == batch.keys()
    assert all(moved[key] is batch[key] for key in batch)


def test_doc_index_points_at_the_rows_of_the_source_text(s_files):
    dm = module(s_files, normalization="none")
    split = dm.split_data("train")
    for batch in dm.train_dataloader():
        index = batch["doc_index"][batch["mask"]].numpy()
        np.testing.assert_array_equal(batch["labels"][batch["mask"]].numpy(), split.labels[index])
        np.testing.assert_array_equal(
            batch["qid"].repeat_interleave(batch["mask"].sum(1)).numpy(), split.qids[index]
        )


def test_max_list_caps_training_only_and_keeps_relevant_documents(tmp_path):
    root = tmp_path / "data"
    # query 1: 2 relevant of 12; query 2: 8 relevant of 10; query 3: 3 docs
    labels = np.array([0] * 5 + [2] + [0] * 5 + [1] + [1, 2] * 4 + [0, 0] + [0, 1, 0])
    qids = np.repeat([1, 2, 3], [12, 10, 3])
    features = np.random.default_rng(0).uniform(size=(25, 3))
    for name in ("train.txt", "vali.txt", "test.txt"):
        write_letor(root / "Fold1" / name, features, labels, qids)
    dm = module(root, max_list=4, batch_size=3)
    draws, loader = set(), dm.train_dataloader()
    for _ in range(5):
        (batch,) = list(loader)
        assert batch["features"].shape[1] == 4
        by_qid = dict(zip(batch["qid"].tolist(), range(3), strict=True))
        kept = batch["doc_index"][by_qid[1]][batch["mask"][by_qid[1]]].tolist()
        assert {5, 11} <= set(kept) and len(kept) == 4 and kept == sorted(kept)
        q2 = batch["mask"][by_qid[2]]
        levels = set(batch["labels"][by_qid[2]][q2].tolist())
        assert len(levels) >= 2 and q2.sum() == 4
        assert batch["mask"][by_qid[3]].sum() == 3
        draws.add(tuple(kept))
    assert len(draws) > 1  # a new subsample each time the query is drawn
    assert dm.full_batch("train")["mask"].sum(1).tolist() == [12, 10, 3]
    for loader in (dm.val_dataloader(), dm.test_dataloader()):
        assert sorted(rows_seen(loader)) == list(range(25))


def test_train_loader_is_seeded_and_reshuffled_per_epoch(s_files):
    def epochs(seed):
        loader = module(s_files, batch_size=2, seed=seed).train_dataloader()
        return [[batch["qid"].tolist() for batch in loader] for _ in range(3)]

    first, again, other = epochs(0), epochs(0), epochs(1)
    assert first == again
    assert first != other
    assert first[0] != first[1]
    for epoch in first:
        flat = sorted(q for batch in epoch for q in batch)
        assert flat == sorted(module(s_files).split_data("train").query_ids.tolist())


def test_drop_train_queries_without_pairs(tmp_path, caplog):
    root = tmp_path / "data"
    labels = np.array([1, 1, 0, 2, 0, 0, 1])
    qids = np.array([1, 1, 2, 2, 3, 3, 4])  # queries 1, 3, 4 have no pair
    features = np.ones((7, 2))
    for name in ("train.txt", "vali.txt", "test.txt"):
        write_letor(root / "Fold1" / name, features, labels, qids)
    kept = module(root)
    assert kept.full_batch("train")["qid"].tolist() == [1, 2, 3, 4]
    with caplog.at_level(logging.INFO, logger="differank.datamodules.letor"):
        dm = module(root, drop_train_queries_without_pairs=True)
        dm.setup()
    assert "dropped 3 of 4 training queries" in caplog.text
    assert dm.full_batch("train")["qid"].tolist() == [2]
    assert [b["qid"].tolist() for b in dm.train_dataloader()] == [[2]]
    assert dm.num_rows("train") == 7
    assert dm.full_batch("val")["qid"].tolist() == [1, 2, 3, 4]
    assert dm.full_batch("test")["qid"].tolist() == [1, 2, 3, 4]


def test_full_batch(s_files):
    dm = module(s_files)
    for split in ("train", "val", "test"):
        batch = dm.full_batch(split)
        data = dm.split_data(split)
        assert batch["features"].shape == (len(data.query_ids), max(map(len, data.query_rows)), 5)
        assert int(batch["mask"].sum()) == dm.num_rows(split)
    with pytest.raises(ValueError, match="split must be one of"):
        dm.full_batch("dev")


def test_setup_is_idempotent(s_files):
    dm = module(s_files)
    dm.setup("fit")
    splits = dm._splits
    dm.setup("test")
    dm.setup()
    assert dm._splits is splits


def test_a_warm_module_parses_nothing_and_normalises_nothing(s_files, monkeypatch):
    first = module(s_files)
    first.setup()

    def no_work(*args, **kwargs):
        raise AssertionError("a warm start must not parse or normalise")

    monkeypatch.setattr(letor_text, "scan", no_work)
    monkeypatch.setattr(LetorDataModule, "_copy_features", no_work)
    second = module(s_files)
    second.setup()
    for split in ("train", "val", "test"):
        features = second.split_data(split).features
        assert isinstance(features, np.memmap) and features.dtype == np.float32
        np.testing.assert_array_equal(first.split_data(split).features, features)
    np.testing.assert_array_equal(first.feature_mean, second.feature_mean)
    np.testing.assert_array_equal(first.feature_std, second.feature_std)
    other = module(s_files, normalization="query_minmax")  # another normalisation: new entry
    with pytest.raises(AssertionError, match="warm start"):
        other.setup()


def test_file_sha256_comes_from_the_cache(s_files, monkeypatch):
    import hashlib

    dm = module(s_files)
    expected = [hashlib.sha256(p.read_bytes()).hexdigest() for p in dm.split_files("train")]
    dm.setup()
    monkeypatch.setattr(reader, "file_sha256", no_rehash)
    assert dm.file_sha256("train") == expected


def no_rehash(path):
    raise AssertionError("file_sha256 must not read the files")


def test_a_split_entry_whose_shape_disagrees_is_rebuilt_with_a_warning(s_files, caplog):
    module(s_files).setup()
    splits = s_files.parent / "cache" / "letor" / "splits"
    for entry in splits.iterdir():
        np.save(entry / "features.npy", np.zeros((2, 5), np.float32))
    with caplog.at_level(logging.WARNING):
        dm = module(s_files)
        dm.setup()
    assert "disagrees with its metadata (features)" in caplog.text
    assert dm.split_data("test").features.shape == (dm.num_rows("test"), 5)


def test_default_cache_dir_from_environment(s_files, tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFERANK_CACHE", str(tmp_path / "envcache"))
    LetorDataModule(s_files).setup()
    assert len(list((tmp_path / "envcache" / "letor").glob("*/meta.json"))) == 5
    assert len(list((tmp_path / "envcache" / "letor" / "splits").glob("*/features.npy"))) == 3


def test_both_layouts_in_one_directory_is_an_error(s_files):
    write_letor(s_files / "Fold1" / "train.txt", *make_part(1, 1))
    with pytest.raises(ValueError, match="holds both LETOR layouts"):
        module(s_files).setup()


def test_txt_next_to_txt_gz_is_an_error(s_files):
    write_letor(s_files / "S4.txt", *make_part(4, 400, n_features=5))
    with pytest.raises(ValueError, match=r"ambiguous LETOR file: both .*S4\.txt and .*S4\.txt\.gz"):
        module(s_files).setup()


@pytest.mark.parametrize(
    "row, message",
    [
        ("Fold1\tS1,S2,S5\tS4\tS5", "S5.txt.gz is used in train and in test"),
        ("Fold1\tS1,S2,S3\tS4\tS4", "S4.txt.gz is used in val and in test"),
        ("Fold1\tS1,S1,S3\tS4\tS5", "S1.txt.gz is used twice in train"),
        ("Fold1\tS1,S2,S3\t,\tS5", "folds.tsv:2: the val column names no file"),
        ("Fold1\tS1,S2,S3\tS5", "folds.tsv:2: expected 4 columns"),
    ],
)
def test_folds_tsv_mistakes_are_errors(s_files, row, message):
    (s_files / "folds.tsv").write_text(f"fold\ttrain\tvali\ttest\n{row}\n")
    with pytest.raises(ValueError, match=message):
        module(s_files).setup()


def test_a_training_split_without_preference_pairs_warns(tmp_path, caplog):
    root = tmp_path / "data"
    for name in ("train.txt", "vali.txt", "test.txt"):
        write_letor(root / "Fold1" / name, np.ones((4, 2)), [1, 1, 0, 0], [1, 1, 2, 2])
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.letor"):
        module(root).setup()
    assert "has no preference pair" in caplog.text


def test_max_epochs_zero_is_refused_at_setup(s_files):
    dm = module(s_files)
    dm.trainer = SimpleNamespace(max_epochs=0)
    with pytest.raises(ValueError, match="trainer.max_epochs=0 trains nothing"):
        dm.setup("fit")
    dm.setup("test")  # evaluating is fine


def test_value_rules_fail_at_setup_with_file_and_line(tmp_path):
    root = tmp_path / "data"
    write_letor(root / "Fold1" / "train.txt", *make_part(1, 1))
    write_letor(root / "Fold1" / "vali.txt", *make_part(2, 50))
    (root / "Fold1" / "test.txt").write_text("0 qid:1 1:0.5\n1 qid:1 1:nan\n3 qid:1 1:NULL\n")
    with pytest.raises(ValueError, match=r"Fold1/test\.txt:3: feature 1 is NULL"):
        module(root).setup()
    with pytest.raises(ValueError, match=r"Fold1/test\.txt:2: feature 1 is not finite"):
        module(root, null_value=0.0).setup()
    with pytest.raises(ValueError, match=r"Fold1/test\.txt:3: label 3 outside label_range"):
        module(root, null_value=0.0, nan_policy="zero", label_range=(0, 2)).setup()
    dm = module(root, null_value=-1.0, nan_policy="zero", normalization="none")
    np.testing.assert_array_equal(dm.split_data("test").features[:, 0], [0.5, 0.0, -1.0])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"fold": 0}, "fold must be in 1..5"),
        ({"fold": 6}, "fold must be in 1..5"),
        ({"fold": "1"}, "fold must be an int"),
        ({"normalization": "minmax"}, "normalization must be one of"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"eval_batch_size": 2.5}, "eval_batch_size must be an int"),
        ({"max_list": 1}, "max_list must be >= 2"),
        ({"bucket_by_length": "yes"}, "bucket_by_length must be True or False"),
        ({"nan_policy": "skip"}, "nan_policy must be one of"),
        ({"null_value": "NaN"}, "null_value must be a number"),
        ({"label_range": (3, 1)}, "label_range"),
        ({"drop_train_queries_without_pairs": 1}, "drop_train_queries_without_pairs"),
        ({"cache_dir": 3}, "cache_dir must be a path"),
        ({"unseen_features": "keep"}, "unseen_features must be one of"),
        ({"verify_cache_hash": "no"}, "verify_cache_hash must be True or False"),
        ({"num_workers": -1}, "num_workers must be >= 0"),
        ({"seed": True}, "seed must be an int"),
        ({"root": None}, "root must be the path"),
    ],
)
def test_options_are_validated(tmp_path, options, message):
    kwargs = {"root": tmp_path, **options}
    with pytest.raises(ValueError, match=message):
        LetorDataModule(**kwargs)


def test_construction_touches_no_files(tmp_path):
    dm = LetorDataModule(tmp_path / "not-yet", label_range=[0, 2])  # Hydra gives lists
    assert dm.label_range == (0.0, 2.0)
    with pytest.raises(MissingLetorFileError, match="not-yet"):
        _ = dm.n_features


def test_workers(s_files):
    dm = module(s_files, num_workers=1, max_list=3)
    assert sorted(rows_seen(dm.test_dataloader())) == list(range(dm.num_rows("test")))
    assert sum(len(b["qid"]) for b in dm.train_dataloader()) == 4 * 3


@pytest.mark.skipif(not MQ2008.is_dir(), reason=f"MQ2008 not found at {MQ2008} (set LETOR_DIR)")
def test_mq2008_fold1_counts(tmp_path):
    dm = LetorDataModule(MQ2008, fold=1, cache_dir=tmp_path)
    assert dm.n_features == 46
    assert dm.label_levels == (0.0, 1.0, 2.0)
    splits = ("train", "val", "test")
    counts = {s: (len(dm.split_data(s).query_ids), dm.num_rows(s)) for s in splits}
    assert counts == {"train": (471, 9630), "val": (157, 2707), "test": (156, 2874)}
    assert [p.name for p in dm.split_files("train")] == ["S1.txt.gz", "S2.txt.gz", "S3.txt.gz"]
    assert dm.split_data("train").docids[0] == "GX008-86-4444840"
    assert sorted(rows_seen(dm.test_dataloader())) == list(range(2874))
    lengths = dm.full_batch("train")["mask"].sum(1)
    assert int(lengths.max()) <= 121
