"""CLI smoke test on real Kafka and Redis: ``produce``, ``consume --idle-exit``, ``decode --once``,
``watch --iterations 1`` and ``status`` through :func:`ldpstream.cli.main`, as an operator runs them."""

from __future__ import annotations

import json

import pytest

from ldpstream.cli import main
from ldpstream.config import RedisConfig
from ldpstream.registry import Registry
from ldpstream.store import SketchKey, keys
from tests.integration.helpers import write_registry

pytestmark = pytest.mark.integration

LABELS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru"]
METRICS = {"app_language": {"id": 1, "mechanism": "krr", "k": 8, "epsilon": 2.0, "labels": LABELS,
                            "windows": ["all", "1h"]}}
CLIENTS = 20_000


def test_produce_consume_decode_watch_and_status_through_the_cli(
        kafka_bootstrap, redis_url, fresh_topic, key_prefix, tmp_path, capsys):
    topic = fresh_topic(partitions=2)
    dead_letter_topic = fresh_topic(partitions=1, stem="dlq")
    registry = str(write_registry(tmp_path / "metrics.toml", topic, METRICS))
    kafka = ["--kafka", kafka_bootstrap]
    redis = ["--redis", redis_url, "--prefix", key_prefix]

    def run(*argv: str) -> str:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr().out
        assert code == 0, (argv, out)
        return out

    produced = json.loads(run("produce", "app_language", *kafka, *redis, "--registry", registry, "--clients",
                              str(CLIENTS), "--seed", "3", "--per-message", "20", "--json"))
    assert produced["reports_acked"] == CLIENTS and produced["messages"] == CLIENTS // 20
    assert sum(produced["true_counts"]) == CLIENTS

    out = run("consume", *kafka, *redis, "--registry", registry, "--group", f"g-{key_prefix}",
              "--dead-letter-topic", dead_letter_topic, "--idle-exit", "3", "--metrics-port", "0")
    assert f"applied {CLIENTS:,} reports from {CLIENTS // 20:,} messages" in out

    run("decode", *kafka, *redis, "--registry", registry, "--once", "--no-kafka", "--metrics-port", "0")

    screen = run("watch", "app_language", "--redis", redis_url, "--prefix", key_prefix, "--iterations", "1")
    assert "metric app_language  window all" in screen and f"reports {CLIENTS:,}" in screen
    assert all(label in screen for label in LABELS) and "95% interval" in screen

    status = json.loads(run("status", "--json", *kafka, *redis, "--registry", registry))
    assert status["metrics"]["app_language"]["reports"] == CLIENTS
    assert all(p["lag"] == 0 for p in status["partitions"])
    assert status["dead_letters"] == {} and status["last_decode"] is not None


@pytest.mark.parametrize(("argv", "message"), [
    (["nothing_here"], "no metric or association named 'nothing_here' in the registry"),
    (["app_languag"], "no metric or association named 'app_languag' in the registry "),
    (["app_language", "--window", "2h"], "metric 'app_language' has no window '2h'"),
])
def test_watch_exits_non_zero_on_a_name_or_window_the_registry_does_not_know(
        redis_url, key_prefix, tmp_path, capsys, argv, message):
    registry = str(write_registry(tmp_path / "metrics.toml", "t", METRICS))
    code = main(["watch", *argv, "--redis", redis_url, "--prefix", key_prefix, "--registry", registry,
                 "--iterations", "3", "--interval", "0"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err
    if argv == ["app_languag"]:
        assert "(did you mean 'app_language'?)" in captured.err


def test_watch_waits_for_a_known_metric_with_nothing_published(redis_url, key_prefix, tmp_path, capsys):
    registry = str(write_registry(tmp_path / "metrics.toml", "t", METRICS))
    assert main(["watch", "app_language", "--redis", redis_url, "--prefix", key_prefix, "--registry", registry,
                 "--iterations", "2", "--interval", "0"]) == 0
    assert capsys.readouterr().out.count("no estimate of 'app_language' (all) published yet") == 2


def test_cli_reports_a_missing_registry_as_an_error_not_a_traceback(tmp_path, capsys, kafka_bootstrap):
    code = main(["produce", "app_language", "--kafka", kafka_bootstrap, "--registry", str(tmp_path / "none.toml")])
    assert code == 1
    assert "does not exist" in capsys.readouterr().err


def test_decode_once_exits_non_zero_naming_the_metrics_that_failed(redis_url, key_prefix, tmp_path, capsys):
    registry_path = write_registry(tmp_path / "metrics.toml", "t", METRICS)
    metric = Registry.load(registry_path)["app_language"]
    # A sketch key that is not a sketch (someone wrote into the prefix): the metric cannot be decoded.
    client = RedisConfig(redis_url).client()  # standalone or cluster
    name = keys.sketch_key(key_prefix, "t", 0, SketchKey(metric.name, metric.fingerprint, 7))
    client.hset(name, "not", "a sketch")
    client.sadd(keys.index_key(key_prefix, metric.name, metric.fingerprint), name)
    client.close()
    code = main(["decode", "--once", "--no-kafka", "--metrics-port", "0", "--registry", str(registry_path),
                 "--redis", redis_url, "--prefix", key_prefix])
    assert code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # the service's log of the failure comes first
    assert last.startswith("ldpstream decode: error: 1 of 1 metric(s) and association(s) failed")
    assert "app_language" in last


def test_produce_without_redis_publishes_the_reports_and_says_the_truth_was_not(kafka_bootstrap, fresh_topic, tmp_path,
                                                                               capsys):
    topic = fresh_topic(partitions=1)
    registry = write_registry(tmp_path / "metrics.toml", topic, {"m": {"id": 1, "mechanism": "krr", "k": 4,
                                                                       "epsilon": 1.0}})
    code = main(["produce", "m", "--kafka", kafka_bootstrap, "--registry", str(registry), "--redis",
                 "redis://127.0.0.1:1/0", "--clients", "100", "--no-progress", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["reports_acked"] == 100
    assert "the truth is not published (Redis:" in captured.err
