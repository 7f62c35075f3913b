"""The README's first command, `ldpstream demo`, end to end on real Kafka and Redis (short run)."""

from __future__ import annotations

import json

import pytest

from ldpstream.cli import main

pytestmark = pytest.mark.integration


def test_demo_runs_the_pipeline_and_counts_every_acknowledged_report(kafka_bootstrap, redis_url, capsys):
    code = main(["demo", "--kafka", kafka_bootstrap, "--redis", redis_url, "--clients", "20000",
                 "--duration", "2", "--no-screen", "--metrics-port", "0", "--serve-port", "0",
                 "--log-level", "info", "--log-format", "json"])
    out, err = capsys.readouterr()
    assert code == 0
    (start,) = [json.loads(line) for line in err.splitlines() if '"event": "start"' in line]
    assert (start["command"], start["metric"], start["clients"]) == ("demo", "app_language", 20000)
    assert "reports acknowledged by Kafka: 20,000; counted in Redis: 20,000" in out
    assert "metric app_language" in out and "95% interval" in out
    assert "live web view on http://127.0.0.1:" in out  # the page, beside the terminal view
