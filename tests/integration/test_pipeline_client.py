"""The client SDK (:class:`ldpstream.producers.client.LdpClient`) on real Kafka: a report of every mechanism kind
reaches the topic and decodes against the registry; an unreachable broker fails fast and clearly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ldpstream.consumers.fold import fold_messages
from ldpstream.errors import ServiceError
from ldpstream.producers.client import LdpClient
from ldpstream.registry import Registry
from ldpstream.wire import decode_messages, payload_size, reports_from_payloads
from tests.integration.helpers import topic_reader

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

CANDIDATES = [f"https://site-{i}.example/" for i in range(20)]
LABELS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko", "it", "tr", "vi", "pl"]
REPORTS_PER_METRIC = 40


def sdk_registry(topic: str) -> Registry:
    """Every mechanism kind of ``deploy/metrics.toml``, plus a nearly noiseless k-RR to check values."""
    return Registry.from_dict({"defaults": {"topic": topic, "windows": ["all", "1h"]}, "metrics": {
        "app_language": {"id": 1, "mechanism": "krr", "k": 16, "epsilon": 2.0, "labels": LABELS},
        "screen_size_bucket": {"id": 2, "mechanism": "krappor", "k": 32, "epsilon": 1.0},
        "font_choice": {"id": 3, "mechanism": "orr", "k": 32, "epsilon": 2.0, "cohorts": 64, "support": 256},
        "homepage_orappor": {"id": 4, "mechanism": "orappor", "k": 128, "epsilon": 2.0, "cohorts": 16,
                             "hashes": 1, "candidates": CANDIDATES},
        "homepage_rappor": {"id": 5, "mechanism": "rappor", "k": 128, "hashes": 2, "cohorts": 32, "p": 0.25,
                            "q": 0.75, "f": 0.5, "candidates": CANDIDATES},
        "exact_language": {"id": 6, "mechanism": "krr", "k": 16, "epsilon": 10.0, "labels": LABELS},
    }})


def _value_for(metric_name: str, i: int):
    if metric_name in ("app_language", "exact_language"):
        return LABELS[i % len(LABELS)]
    if metric_name == "screen_size_bucket":
        return i % 32
    if metric_name == "font_choice":
        return (7 * i) % 256
    return CANDIDATES[i % len(CANDIDATES)]


def _read(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list:
    consumer = topic_reader(bootstrap, topic)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(500, 0.2) if m.error() is None)
    finally:
        consumer.close()
    return got


def test_client_reports_of_every_mechanism_kind_reach_kafka_and_decode(kafka_bootstrap, fresh_topic):
    topic = fresh_topic(partitions=2)
    registry = sdk_registry(topic)
    # One device reporting many values in one bucket (to exercise the wire): once_per_bucket off.
    client = LdpClient(registry, kafka_bootstrap, secret=b"device-secret-0001", delivery_timeout=10.0,
                       once_per_bucket=False)
    event_time = int(time.time()) - 123
    for name in registry.metrics:
        for i in range(REPORTS_PER_METRIC):
            client.report(name, _value_for(name, i), event_time=event_time)
    total = REPORTS_PER_METRIC * len(registry.metrics)
    stats = client.flush()
    assert stats.records_acked == stats.messages_acked == total and not stats.errors

    messages = _read(kafka_bootstrap, topic, total)
    assert len(messages) == total
    values = [m.value() for m in messages]
    decoded = decode_messages(values)
    assert not decoded.malformed and decoded.record_count == total
    for batch in decoded.batches:
        assert (batch.event_time == event_time).all()
    by_id = registry.by_id
    for batch in decoded.batches:
        for metric_id in np.unique(batch.metric_id):
            metric = by_id[int(metric_id)]
            rows = batch.metric_id == metric_id
            assert (batch.fingerprint[rows] == metric.fingerprint).all()
            assert batch.payloads.shape[1] == payload_size(metric.mechanism)
            assert (batch.cohort[rows] < metric.mechanism.cohorts).all()

    # The consumer's validation accepts every record, per metric.
    timestamps = np.array([m.timestamp()[1] // 1000 for m in messages], dtype=np.int64)
    folded = fold_messages(values, timestamps, registry)
    assert not folded.rejections
    assert folded.applied == {name: REPORTS_PER_METRIC for name in registry.metrics}

    # A RAPPOR client keeps its cohort (derived from its secret) across reports.
    rappor = registry["homepage_rappor"]
    rappor_cohorts = {int(c) for b in decoded.batches for c in b.cohort[b.metric_id == rappor.id]}
    assert len(rappor_cohorts) == 1

    # With ε = 10 (the registry's largest) k-RR keeps the true symbol but with probability 15/(e^10 + 15)
    # ≈ 6.8e-4 a report: the label → symbol mapping survives the trip. Beyond 5 changed symbols in these
    # reports has probability below 1e-9 (Poisson tail), so more means the mapping is wrong.
    exact = registry["exact_language"]
    symbols = np.concatenate([reports_from_payloads(exact.mechanism, b.payloads[b.metric_id == exact.id])
                              for b in decoded.batches if (b.metric_id == exact.id).any()])
    expected = np.bincount([i % len(LABELS) for i in range(REPORTS_PER_METRIC)], minlength=16)
    changed = np.abs(np.bincount(symbols, minlength=16) - expected).sum() // 2
    assert changed <= 5


def test_an_unreachable_broker_makes_flush_raise_a_service_error_naming_the_bootstrap():
    registry = sdk_registry("ldp-reports")
    client = LdpClient(registry, "127.0.0.1:1", secret=b"device-secret-0002", delivery_timeout=2.0)
    client.report("app_language", "en")
    client.report("homepage_rappor", CANDIDATES[0])
    started = time.monotonic()
    with pytest.raises(ServiceError) as info:
        client.flush()
    elapsed = time.monotonic() - started
    assert "127.0.0.1:1" in str(info.value)
    assert elapsed < 10, f"flush took {elapsed:.1f} s with a 2 s delivery timeout"


def _readme_block(language: str, after: str) -> str:
    """The first ``language`` code block of the README after the line holding ``after``, dedented."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"```{language}\n", text.index(after)) + len(language) + 4
    return textwrap.dedent(text[start:text.index("```", start)])


def test_the_readmes_three_lines_report_a_privatized_value(kafka_bootstrap, fresh_topic, tmp_path):
    topic = fresh_topic(partitions=1)
    metric = _readme_block("toml", "## Adding a metric")
    (tmp_path / "metrics.toml").write_text(f'[defaults]\ntopic = "{topic}"\n\n{metric}', encoding="utf-8")
    app = _readme_block("python", "Clients report it, in three lines")
    assert len(app.strip().splitlines()) == 3, app
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LDPSTREAM_")}
    done = subprocess.run([sys.executable, "-c", app], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**environ, "LDPSTREAM_KAFKA": kafka_bootstrap, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr

    secret = tmp_path / "data" / "ldpstream" / "device-secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_bytes()) == 32
    (message,) = _read(kafka_bootstrap, topic, 1)
    registry = Registry.load(tmp_path / "metrics.toml")
    decoded = decode_messages([message.value()])
    (batch,) = decoded.batches
    assert batch.metric_id.tolist() == [registry["checkout_step"].id]
    assert batch.fingerprint.tolist() == [registry["checkout_step"].fingerprint]
