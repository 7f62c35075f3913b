"""``ldpstream demo`` ended by SIGTERM or Ctrl-C (SIGINT) mid-run, as a subprocess on real Kafka and Redis: it
exits 143 or 130 after printing the reports Kafka acknowledged against those counted, and leaves neither its
topic nor any Redis key under its prefix. ``produce`` interrupted alike prints its totals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.helpers import write_registry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_demo_counts_then_removes_its_topic_and_keys(
        kafka_bootstrap, kafka_config, redis_url, redis_config, key_prefix, tmp_path, sent, code):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    errors = tmp_path / "stderr"
    with errors.open("w") as err, subprocess.Popen(
            [sys.executable, "-m", "ldpstream", "demo", "--kafka", kafka_bootstrap, "--redis", redis_url, "--prefix",
             key_prefix, "--clients", "2000000", "--duration", "60", "--no-screen", "--metrics-port", "0",
             "--serve-port", "-1"], env=env, stdout=subprocess.PIPE, stderr=err, text=True) as process:
        assert process.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not any(line.startswith("metric app_language") for line in lines) and time.monotonic() < deadline:
                assert process.poll() is None, (lines, errors.read_text())
                time.sleep(0.2)  # wait for a first estimate: reports are flowing
            run_id = next(re.match(r"demo (\w+):", line).group(1) for line in lines if line.startswith("demo "))
            prefix = f"{key_prefix}demo:{run_id}"
            assert any(True for _ in redis_config.client().scan_iter(match=f"{prefix}:*"))  # it wrote keys
            process.send_signal(sent)
            assert process.wait(timeout=120) == code, ("".join(lines), errors.read_text())
        finally:
            if process.poll() is None:
                process.kill()
        reader.join(timeout=10)
    out = "".join(lines)
    assert f"interrupted ({sent.name})" in out, out
    counted = re.search(r"reports acknowledged by Kafka: ([\d,]+); counted in Redis: ([\d,]+)", out)
    assert counted is not None, out
    acked, applied = (int(group.replace(",", "")) for group in counted.groups())
    assert 0 < acked < 2_000_000 and applied == acked, out
    assert f"removed topic ldp-demo-{run_id} and " in out, out
    topics = AdminClient(kafka_config.admin()).list_topics(timeout=10).topics
    assert f"ldp-demo-{run_id}" not in topics
    assert list(redis_config.client().scan_iter(match=f"{prefix}:*")) == []


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_produce_prints_its_totals(kafka_bootstrap, redis_url, key_prefix, fresh_topic, tmp_path,
                                                  sent, code):
    registry = write_registry(tmp_path / "metrics.toml", fresh_topic(partitions=1),
                              {"m": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
            [sys.executable, "-m", "ldpstream", "produce", "m", "--registry", str(registry), "--kafka", kafka_bootstrap,
             "--redis", redis_url, "--prefix", key_prefix, "--clients", "1000000", "--rate", "20000"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            time.sleep(4)  # started, and some chunks sent
            assert process.poll() is None
            process.send_signal(sent)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == code, (out, err)
    totals = re.fullmatch(rf"interrupted \({sent.name}\): ([\d,]+) reports acknowledged by Kafka in [\d,]+ messages, "
                          r"[\d.]+ s \([\d,]+ reports/s\)\n", out)
    assert totals is not None, (out, err)
    assert 0 < int(totals.group(1).replace(",", "")) < 1_000_000
    assert "\r" not in err  # not a terminal: no progress bar
