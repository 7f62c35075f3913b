"""Consumer memory depends on cohorts × k and the batch size, not on how many reports it has folded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from consumers.sketch_store import RedisSketchStore
from producers.loadgen import simulate_and_publish
from producers.publisher import ReportPublisher
from tests.integration.helpers import applied_reports, registry_for, wait_for, write_registry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METRIC = {"pages": {"id": 31, "mechanism": "orappor", "k": 128, "epsilon": 2.0, "cohorts": 64, "hashes": 1,
                    "support": 1024}}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_peak_memory_is_flat_when_ten_times_more_reports_are_folded(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path):
    topic = fresh_topic(partitions=4)
    registry = registry_for(topic, METRIC)
    path = write_registry(tmp_path / "metrics.toml", topic, METRIC)
    store = RedisSketchStore.from_url(redis_url, key_prefix)
    publisher = ReportPublisher(kafka_bootstrap)
    env = {**os.environ, "LDPSTREAM_KAFKA": kafka_bootstrap, "LDPSTREAM_REDIS": redis_url}
    # The first 0.3 M reports wait in Kafka before the consumer starts, so its batches are full-sized from
    # the start: whatever memory a batch needs is in the first peak, and the next 2.7 M must not add to it.
    produced = simulate_and_publish(registry["pages"], publisher, clients=300_000, distribution="zipf:1.2",
                                    seed=1, per_message=100, chunk=300_000).records_acked
    proc = subprocess.Popen(
        [sys.executable, "-m", "ldpstream.cli", "consume", "--registry", str(path), "--prefix", key_prefix,
         "--group", f"g-{key_prefix}", "--batch-size", "2000", "--metrics-port", "0",
         "--kafka-config", "queued.max.messages.kbytes=16384"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: applied_reports(store, topic, 4) >= produced, 180, "the first reports to be applied")
        peaks = [peak_rss_mib(proc.pid)]
        produced += simulate_and_publish(registry["pages"], publisher, clients=2_700_000, distribution="zipf:1.2",
                                         seed=2, per_message=100, chunk=300_000).records_acked
        wait_for(lambda: applied_reports(store, topic, 4) >= produced, 180, "all reports to be applied")
        peaks.append(peak_rss_mib(proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"consumer peak RSS after 0.3 M and 3 M reports: {peaks[0]:.1f} MiB, {peaks[1]:.1f} MiB")
    assert applied_reports(store, topic, 4) == produced == 3_000_000
    # Ten times the reports may not grow the peak resident set by more than 10% (or 16 MiB, allocator slack).
    assert peaks[1] - peaks[0] <= max(0.10 * peaks[0], 16.0), peaks
