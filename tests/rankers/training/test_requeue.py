"""The SLURM requeue signal is handled at the next step boundary, never inside a checkpoint
save (rankers/training/requeue.py); the end-to-end requeue is tests/test_slurm.py (slow)."""

import os
import signal
from types import SimpleNamespace

from lightning_fabric.plugins.environments import SLURMEnvironment

from differank.rankers.training.requeue import DeferredRequeue


def trainer_under(environment):
    return SimpleNamespace(strategy=SimpleNamespace(cluster_environment=environment))


def test_the_requeue_handler_runs_at_the_next_batch_end_and_is_restored_after_training():
    calls = []

    def lightning_handler(signum, frame):
        calls.append(signum)

    previous = signal.signal(signal.SIGUSR1, lightning_handler)
    try:
        deferred = DeferredRequeue()
        trainer = trainer_under(SLURMEnvironment(auto_requeue=True))
        deferred.on_train_start(trainer, None)
        os.kill(os.getpid(), signal.SIGUSR1)  # lands "inside a save": only recorded
        assert calls == []
        deferred.on_train_batch_end(trainer)
        assert calls == [signal.SIGUSR1]
        deferred.on_validation_end(trainer, None)  # nothing pending: nothing runs twice
        assert calls == [signal.SIGUSR1]
        deferred.on_train_end(trainer, None)
        assert signal.getsignal(signal.SIGUSR1) is lightning_handler
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_outside_slurm_nothing_is_rewired():
    previous = signal.getsignal(signal.SIGUSR1)
    deferred = DeferredRequeue()
    deferred.on_train_start(trainer_under(None), None)
    deferred.on_train_end(trainer_under(None), None)
    assert signal.getsignal(signal.SIGUSR1) is previous


def test_a_slurm_environment_without_a_requeue_signal_is_left_alone():
    """Lightning leaves ``requeue_signal`` None where there is no SIGUSR1 (Windows)."""
    previous = signal.getsignal(signal.SIGUSR1)
    environment = SLURMEnvironment(auto_requeue=True)
    environment.requeue_signal = None
    deferred = DeferredRequeue()
    deferred.on_train_start(trainer_under(environment), None)
    deferred.on_train_end(trainer_under(environment), None)
    assert signal.getsignal(signal.SIGUSR1) is previous
