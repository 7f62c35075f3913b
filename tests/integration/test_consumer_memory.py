"""Consumer memory depends on cohorts × k, the batch size and Kafka's buffers, not on how many reports it has
folded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ldpstream.producers.loadgen import simulate_and_publish
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.store import RedisSketchStore
from tests.integration.helpers import applied_reports, registry_for, wait_for, write_registry

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pipelines]

METRIC = {"pages": {"id": 31, "mechanism": "orappor", "k": 128, "epsilon": 2.0, "cohorts": 64, "hashes": 1,
                    "support": 1024}}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_peak_memory_is_flat_as_millions_more_reports_are_folded(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=4)
    registry = registry_for(topic, METRIC)
    path = write_registry(tmp_path / "metrics.toml", topic, METRIC)
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    publisher = ReportPublisher(kafka_bootstrap)
    env = {**os.environ, "LDPSTREAM_KAFKA": kafka_bootstrap, "LDPSTREAM_REDIS": redis_url}
    # The first 0.5 M reports (16 MB of records) wait in Kafka before the consumer starts: more than its
    # fetch and queue buffers hold (capped below), so batches and buffers are full-sized from the start and
    # whatever memory they need is in the first peak; the next 4.5 M must not add to it.
    produced = simulate_and_publish(registry["pages"], publisher, clients=500_000, distribution="zipf:1.2",
                                    seed=1, per_message=100, chunk=250_000).records_acked
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldpstream.cli", "consume", "--registry", str(path), "--prefix", key_prefix,
         "--group", f"g-{key_prefix}", "--batch-size", "2000", "--metrics-port", "0",
         "--consumer-config", "queued.max.messages.kbytes=4096", "--consumer-config", "fetch.max.bytes=4194304",
         "--consumer-config", "max.partition.fetch.bytes=1048576"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: applied_reports(store, topic, 4) >= produced, 180, "the first reports to be applied")
        peaks = [peak_rss_mib(proc.pid)]
        for wave in range(5):
            produced += simulate_and_publish(registry["pages"], publisher, clients=1_500_000,
                                             distribution="zipf:1.2", seed=2 + wave, per_message=100,
                                             chunk=250_000).records_acked
            wait_for(lambda p=produced: applied_reports(store, topic, 4) >= p, 180, "all reports to be applied")
            peaks.append(peak_rss_mib(proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)
    print("consumer peak RSS (MiB) after 0.5, 2, 3.5, 5, 6.5 and 8 M reports:", [round(p, 1) for p in peaks])
    assert applied_reports(store, topic, 4) == produced == 8_000_000
    # Once warm, more than twice the reports may not grow the peak resident set beyond allocator slack. Warm is
    # after 3.5 M reports: the allocator's arenas keep growing that long (one run measured 178.9, 186.8, 190.1,
    # 191.6, 196.3, 196.3, 197.9, 197.9, 197.9 MiB at 0.5 M and every 1.5 M more, flat from 6.5 M on; a
    # baseline at 2 M once saw 10.9 MiB more by 5 M, over the bound, with no leak behind it).
    assert peaks[5] - peaks[2] <= max(0.05 * peaks[2], 8.0), peaks
