"""The device secret: long enough, private, created whole, and the same for processes that race to create
it (it keys the HMACs that derive a client's cohort and its memoized responses)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os

import pytest

from ldpstream.errors import ParameterError
from ldpstream.producers import LdpClient, load_or_create_secret
from ldpstream.registry import Registry

REGISTRY = Registry.from_dict({"metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})


@pytest.mark.parametrize("secret", [b"", b"short", b"x" * 15])
def test_the_sdk_refuses_a_short_secret(secret):
    with pytest.raises(ParameterError, match="at least 16 random bytes"):
        LdpClient(REGISTRY, "127.0.0.1:1", secret=secret, producer_config={"log_level": 0})


def test_a_secret_file_others_may_read_is_refused(tmp_path):
    path = tmp_path / "secret"
    load_or_create_secret(path)
    os.chmod(path, 0o644)
    with pytest.raises(ParameterError, match="may be read by others"):
        load_or_create_secret(path)


def test_a_truncated_secret_file_is_refused(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"")
    os.chmod(path, 0o600)
    with pytest.raises(ParameterError, match="at least 16"):
        load_or_create_secret(path)


def test_a_directory_is_not_a_secret(tmp_path):
    with pytest.raises(ParameterError, match="is a directory"):
        load_or_create_secret(tmp_path)


def _create(path: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    barrier.wait()
    try:
        out.put(load_or_create_secret(path))
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(repr(exc))


def test_processes_racing_to_create_the_secret_all_get_the_same_one(tmp_path):
    path = str(tmp_path / "device" / "secret")
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(8), context.Queue()
    workers = [context.Process(target=_create, args=(path, barrier, out)) for _ in range(8)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(10)
    assert all(isinstance(r, bytes) for r in results), results
    assert len(set(results)) == 1 and len(results[0]) == 32
    assert sorted(os.listdir(tmp_path / "device")) == ["secret"]  # no temporary file left behind
    assert (os.stat(path).st_mode & 0o777) == 0o600


def test_a_metric_is_reported_at_most_once_per_bucket_and_the_state_survives_a_restart(tmp_path):
    from ldpstream.producers import ReportPublisher

    registry = Registry.from_dict({"defaults": {"bucket_seconds": 3600},
                                   "metrics": {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}}})
    publisher = ReportPublisher("127.0.0.1:1", config={"log_level": 0})
    secret_file = tmp_path / "secret"
    device = LdpClient(registry, publisher, secret_file=secret_file)
    assert device.report("m", 1, event_time=7200) is True
    assert device.report("m", 2, event_time=7300) is False  # same hour: nothing sent
    assert device.report("m", 2, event_time=10_800) is True  # the next hour
    restarted = LdpClient(registry, publisher, secret_file=secret_file)
    assert restarted.report("m", 3, event_time=10_900) is False  # remembered beside the secret
    assert (secret_file.parent / "secret.reported").stat().st_mode & 0o777 == 0o600
    free = LdpClient(registry, publisher, secret_file=secret_file, once_per_bucket=False)
    assert free.report("m", 3, event_time=10_900) is True
