"""datamodules/prefetch.py: the next batch is built in a thread, the batches are the plain
DataLoader's, and a loop that stops early leaves no thread behind (worker processes: the
plain DataLoader, tests/datamodules/test_letor.py::test_workers)."""

import threading

import torch
from torch.utils.data import DataLoader

from differank.datamodules.prefetch import PrefetchingDataLoader


class Squares(torch.utils.data.Dataset):
    def __init__(self):
        self.threads = set()

    def __len__(self):
        return 10

    def __getitem__(self, index):
        self.threads.add(threading.current_thread().name)
        return torch.tensor([index * index])


def test_same_batches_as_a_plain_loader_built_in_another_thread():
    dataset = Squares()
    plain = [b.tolist() for b in DataLoader(dataset, batch_size=3)]
    dataset.threads.clear()
    prefetched = [b.tolist() for b in PrefetchingDataLoader(dataset, batch_size=3)]
    assert prefetched == plain and len(prefetched) == 4
    assert dataset.threads and all(name.startswith("batches") for name in dataset.threads)


def test_stopping_early_leaves_no_thread():
    before = threading.active_count()
    for batch in PrefetchingDataLoader(Squares(), batch_size=2):
        assert batch.tolist() == [[0], [1]]
        break
    assert threading.active_count() == before


class BatchOfSquares(Squares):
    """A dataset that forms a whole batch at once, as QueryBatchDataset does."""

    def __getitems__(self, keys):
        return {"squares": torch.tensor(keys) ** 2, "keys": list(keys)}


def test_a_dataset_forming_whole_batches_gets_the_plain_loaders_keys_and_collate():
    def collate(batch):
        return {**batch, "collated": True}

    sampler = torch.utils.data.BatchSampler(range(7), batch_size=3, drop_last=False)
    plain = list(DataLoader(BatchOfSquares(), batch_sampler=sampler, collate_fn=collate))
    prefetched = list(
        PrefetchingDataLoader(BatchOfSquares(), batch_sampler=sampler, collate_fn=collate)
    )
    assert [b["keys"] for b in prefetched] == [[0, 1, 2], [3, 4, 5], [6]]
    for mine, theirs in zip(prefetched, plain, strict=True):
        assert mine["collated"] and mine["keys"] == theirs["keys"]
        assert torch.equal(mine["squares"], theirs["squares"])


def test_pinned_or_unbatched_loaders_take_the_plain_iterator():
    assert [b.tolist() for b in PrefetchingDataLoader(Squares(), batch_size=None)][:2] == [[0], [1]]


def test_the_random_stream_after_an_epoch_is_the_plain_loaders():
    """The plain iterator draws its base seed from the generator: so does the fast path, so
    dropout and noise after it see the same numbers (a run reproduces across the two)."""

    def after_epoch(loader_class, generator=None):
        torch.manual_seed(5)
        if generator is not None:
            generator.manual_seed(9)
        list(loader_class(Squares(), batch_size=3, shuffle=True, generator=generator))
        return torch.rand(3), None if generator is None else generator.get_state()

    plain, fast = after_epoch(DataLoader), after_epoch(PrefetchingDataLoader)
    assert torch.equal(plain[0], fast[0])
    plain, fast = (after_epoch(c, torch.Generator()) for c in (DataLoader, PrefetchingDataLoader))
    assert torch.equal(plain[0], fast[0]) and torch.equal(plain[1], fast[1])
