"""``ldpstream serve`` against a running pipeline on real Kafka and Redis, and in a real browser.

A consumer group member and the decoder (every second, publishing to Redis and to an estimates topic) run in
threads; ``ldpstream produce`` (the command) simulates clients of an association of two k-RR metrics, of a
k-RAPPOR metric and of a discovery metric (strings without a dictionary, decoded live), and publishes the values
(strings) it drew as the truth; ``ldpstream discover --publish`` stores an offline dictionary beside them. Then:

- every object the decoder published, read from Redis, from the estimates topic and through ``serve``'s API,
  validates against the JSON Schemas of ``docs/schema/`` (each object names its schema);
- the API serves every metric and association with its windows, the truth exactly as drawn, and the status
  (counts, partitions, ingest rate, lag), behind a bearer token;
- headless Chromium (Debian's ``chromium`` and ``chromium-driver``, through selenium) loads the page, shows bars
  with interval whiskers, the truth and the joint heat map with its test, sees the estimates change after more
  clients report and the decoder runs again, and saves a screenshot (``LDPSTREAM_SCREENSHOT=PATH`` copies it
  there: ``docs/live-view.png`` was made so). Without the browser the test skips saying what to install; under
  CI it fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from ldpstream.cli import main
from ldpstream.config import KafkaConfig
from ldpstream.consumers.worker import ConsumerSettings, SketchConsumer
from ldpstream.decoder.service import DecoderService
from ldpstream.kafka import ensure_topics
from ldpstream.operations.serve import LiveView, make_server, serve_in_thread, url_of
from ldpstream.registry import Registry
from ldpstream.store import RedisSketchStore
from ldpstream.store import keys as key_schema
from tests.integration.helpers import registry_for, topic_reader, wait_for, write_registry
from tests.published_schema import validate

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LANGS = ["en", "es", "zh", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko"]
FONTS = ["serif", "sans", "mono", "slab", "script", "display"]
OSES = ["android", "ios", "web", "tv", "car", "watch"]
METRICS = {
    "app_language": {"id": 1, "mechanism": "krr", "k": 12, "epsilon": 3.0, "labels": LANGS,
                     "windows": ["all", "1h"], "bucket_seconds": 3600, "retention": "2d"},
    "font": {"id": 2, "mechanism": "krr", "k": 6, "epsilon": 3.0, "labels": FONTS, "bucket_seconds": 3600,
             "retention": "2d"},
    "os": {"id": 3, "mechanism": "krappor", "k": 6, "epsilon": 2.0, "labels": OSES, "bucket_seconds": 3600},
}
ASSOCIATIONS = {"language_by_font": {"id": 1, "metrics": ["app_language", "font"], "candidates": 4,
                                     "windows": ["all"]}}
DICTIONARY = ["ab", "ba", "abab", "bb"]
#: A discovery metric (decoded live into a dictionary, schema dictionary/2) and the strings its clients draw.
DISCOVERY = ("word", {"id": 40, "bucket_seconds": 3600, "retention": "2d",
                      "discovery": {"epsilon": 12.0, "length": 4, "ngram": 2, "alphabet": "ab", "full_bits": 32,
                                    "ngram_bits": 32, "cohorts": 8}})
WORDS = ["ab", "ba", "abab"]
TOKEN = "serve-test-" + uuid.uuid4().hex


class Pipeline:
    """The running pipeline of this module and the server over it."""

    def __init__(self, kafka: str, redis_url: str, tmp: Path) -> None:
        self.kafka = kafka
        self.redis_url = redis_url
        run = uuid.uuid4().hex[:10]
        self.prefix = f"test:serve:{run}"
        self.topic = f"test-serve-{run}"
        self.estimates_topic = f"test-serve-estimates-{run}"
        ensure_topics(kafka, [self.topic], partitions=2)
        ensure_topics(kafka, [self.estimates_topic], partitions=1)
        self.registry_file = write_registry(tmp / "metrics.toml", self.topic, {**METRICS, DISCOVERY[0]: DISCOVERY[1]},
                                            ASSOCIATIONS)
        self.registry = Registry.load(self.registry_file)
        self.store = RedisSketchStore.from_url(redis_url, self.prefix)
        self.stop = threading.Event()
        self.consumer = SketchConsumer(self.registry, self.store,
                                       ConsumerSettings(KafkaConfig(kafka), group_id=f"g-{run}"))
        self.producer = Producer({"bootstrap.servers": kafka, "acks": "all", "enable.idempotence": True})
        self.decoder = DecoderService(self.registry, self.store, producer=self.producer,
                                      estimates_topic=self.estimates_topic)
        self.threads = [threading.Thread(target=self.consumer.run, args=(self.stop,), daemon=True),
                        threading.Thread(target=self.decoder.run, args=(1.0, self.stop), daemon=True)]
        self.produced: dict[str, int] = {}
        self.truth: dict[str, np.ndarray] = {}
        self.server = make_server(LiveView(self.registry, self.store, KafkaConfig(kafka)), "127.0.0.1", 0, TOKEN)
        self.url = url_of(self.server)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        serve_in_thread(self.server)

    def produce(self, name: str, clients: int, seed: int) -> None:
        """``ldpstream produce NAME`` (the command), as a user runs it; the true counts it prints are kept."""
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["produce", name, "--registry", str(self.registry_file), "--kafka", self.kafka, "--redis",
                         self.redis_url, "--prefix", self.prefix, "--clients", str(clients), "--seed", str(seed),
                         "--dist", "zipf:1.1", "--dependence", "0.6", "--json"])
        assert code == 0
        counts = np.asarray(json.loads(printed.getvalue().strip().splitlines()[-1])["true_counts"])
        members = ASSOCIATIONS.get(name, {}).get("metrics", [])
        self.truth[name] = self.truth.get(name, 0) + counts
        for axis, member in enumerate(members):
            self.truth[member] = self.truth.get(member, 0) + counts.sum(axis=1 - axis)
        for member in members or [name]:
            self.produced[member] = self.produced.get(member, 0) + clients

    def produce_strings(self, name: str, clients: int, seed: int) -> None:
        """``ldpstream produce NAME --strings FILE`` for a discovery metric; the strings drawn are kept."""
        strings = self.registry_file.parent / "words.txt"
        strings.write_text("\n".join(WORDS) + "\n")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["produce", name, "--registry", str(self.registry_file), "--kafka", self.kafka, "--redis",
                         self.redis_url, "--prefix", self.prefix, "--clients", str(clients), "--seed", str(seed),
                         "--strings", str(strings), "--json"])
        assert code == 0
        counts = np.asarray(json.loads(printed.getvalue().strip().splitlines()[-1])["true_counts"])
        self.truth[name] = self.truth.get(name, 0) + counts
        self.produced[name] = self.produced.get(name, 0) + clients

    def discover(self, name: str, clients: int = 40_000) -> int:
        """``ldpstream discover --simulate ... --publish NAME``: a tiny dictionary found from n-gram reports; the
        command's exit code."""
        strings = self.registry_file.parent / "strings.txt"
        strings.write_text("\n".join(DICTIONARY) + "\n")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(["discover", "--simulate", "--method", "ngram", "--strings", str(strings), "--alphabet", "ab",
                         "--length", "4",
                         "--epsilon", "12", "--n", str(clients), "--seed", "3", "--json", "--publish", name,
                         "--redis", self.redis_url, "--prefix", self.prefix])

    def wait_decoded(self, timeout: float = 120.0) -> None:
        """Until every metric's ``all`` estimate counts every report produced (the decoder runs every second)."""
        def done() -> bool:
            for name, count in self.produced.items():
                published = self.store.latest_estimate(name, "all")
                if published is None or published["n_reports"] != count:
                    return False
            joint = self.store.latest_joint("language_by_font", "all")
            return joint is not None and joint["n_reports"] == self.produced["font"]
        wait_for(done, timeout, "the decoder to publish every report produced", interval=0.25)

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path.lstrip("/"))
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        for thread in self.threads:
            thread.join(timeout=30)
        self.producer.flush(10)
        AdminClient({"bootstrap.servers": self.kafka}).delete_topics([self.topic, self.estimates_topic])
        client = self.store.client
        names = list(client.scan_iter(f"{self.prefix}:*", count=1000))
        if names:
            client.delete(*names)


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    running = Pipeline(kafka_bootstrap, redis_url, tmp_path_factory.mktemp("serve"))
    running.start()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def first_load(pipeline: Pipeline) -> Pipeline:
    """30,000 associated clients, 20,000 clients of ``os`` and 20,000 of the discovery metric ``word``, produced by
    the command and decoded, and an offline dictionary ``urls``."""
    pipeline.produce("language_by_font", 30_000, seed=1)
    pipeline.produce("os", 20_000, seed=2)
    pipeline.produce_strings("word", 20_000, seed=4)
    assert pipeline.discover("urls") == 0
    pipeline.wait_decoded()
    return pipeline


def test_what_the_decoder_publishes_to_redis_follows_the_schemas(first_load: Pipeline):
    client = first_load.store.client
    seen = set()
    for name, metric in first_load.registry.metrics.items():
        if metric.part_of is not None:
            continue  # an n-gram slot of the discovery metric: no estimate of its own
        expected = "dictionary/2" if metric.discovers else "marginal-estimate/1"
        for window in metric.windows:
            raw = client.get(key_schema.estimate_key(first_load.prefix, name, window.name))
            assert raw is not None, (name, window.name)
            seen.add(validate(json.loads(raw), expected))
            for past in client.lrange(key_schema.history_key(first_load.prefix, name, window.name), 0, -1):
                validate(json.loads(past), expected)
    raw = client.get(key_schema.joint_key(first_load.prefix, "language_by_font", "all"))
    assert raw is not None
    seen.add(validate(json.loads(raw), "joint-estimate/1"))
    # The offline dictionary: the same key layout and schema as the live one.
    offline = client.get(key_schema.estimate_key(first_load.prefix, "urls", "all"))
    assert offline is not None and json.loads(offline)["discovery"]["source"] == "offline"
    validate(json.loads(offline), "dictionary/2")
    assert seen == {"marginal-estimate/1", "joint-estimate/1", "dictionary/2"}
    # One store: discover --publish may not overwrite what the decoder publishes (nor the reverse).
    before = client.get(key_schema.estimate_key(first_load.prefix, "word", "all"))
    assert first_load.discover("word", clients=2_000) != 0
    assert client.get(key_schema.estimate_key(first_load.prefix, "word", "all")) == before


def test_what_the_decoder_produces_to_the_estimates_topic_follows_the_schemas(first_load: Pipeline):
    first_load.producer.flush(10)
    consumer = topic_reader(first_load.kafka, first_load.estimates_topic)
    kinds: dict[str, int] = {}
    keys = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ({"app_language:all", "os:all", "joint:language_by_font:all",
                                                    "word:all"} <= keys):
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            body = json.loads(message.value())
            name = validate(body)
            kinds[name] = kinds.get(name, 0) + 1
            keys.add(message.key().decode())
    finally:
        consumer.close()
    assert {"app_language:all", "app_language:1h", "font:all", "os:all", "joint:language_by_font:all",
            "word:all"} <= keys
    assert kinds.get("marginal-estimate/1", 0) >= 4 and kinds.get("joint-estimate/1", 0) >= 1
    assert kinds.get("dictionary/2", 0) >= 1


def test_the_api_serves_every_estimate_by_the_schemas_with_the_truth_as_drawn(first_load: Pipeline):
    status, body = first_load.get("/api/estimates")
    assert status == 200
    assert set(body["metrics"]) == {"app_language", "font", "os", "language_by_font", "word", "urls"}
    assert set(body["metrics"]["app_language"]) == {"all", "1h"}
    expected = {"language_by_font": "joint-estimate/1", "urls": "dictionary/2", "word": "dictionary/2"}
    for name, windows in body["metrics"].items():
        for window, published in windows.items():
            validate(published, expected.get(name, "marginal-estimate/1"))
            assert published["window"] == window
    # The dictionary: discovered from n-gram reports, as stored in Redis.
    urls = body["metrics"]["urls"]["all"]
    assert {v["value"] for v in urls["values"]} == set(DICTIONARY) and urls["n_reports"] == 40_000
    raw = first_load.store.client.get(key_schema.estimate_key(first_load.prefix, "urls", "all"))
    assert raw is not None and json.loads(raw) == urls
    # The live dictionary: the strings drawn found, and the truth as produce drew them.
    # Every string drawn is there and significant. (Another string may be too: one a pass over part of the
    # reports called significant stays until the retirement rule retires it, and the final test has level 0.10.)
    word = body["metrics"]["word"]["all"]
    significant = {e["value"] for e in word["discovery"]["dictionary"] if e["significant"]}
    assert set(WORDS) <= significant and word["n_reports"] == 20_000
    assert {v["value"]: v["count"] for v in body["truth"]["word"]["values"]} == dict(
        zip(WORDS, first_load.truth["word"].tolist(), strict=True))
    # The truth is exactly what the produce commands drew (counts), marked as such.
    for name in ("app_language", "font", "os"):  # (the dictionaries' truths are over strings: above)
        truth = body["truth"][name]
        assert truth["kind"] == "truth" and truth["source"] == "simulation"
        assert [v["count"] for v in truth["values"]] == first_load.truth[name].tolist()
        assert truth["n"] == first_load.produced[name]
        assert [v["value"] for v in truth["values"]] == list(METRICS[name]["labels"])
    joint_truth = body["truth"]["language_by_font"]
    drawn = first_load.truth["language_by_font"]
    assert np.allclose(joint_truth["table"], drawn / drawn.sum()) and joint_truth["n"] == 30_000
    assert joint_truth["x_values"] == LANGS and joint_truth["y_values"] == FONTS
    # Marginal truths are the joint's margins (the association's members report together).
    table = np.asarray(joint_truth["table"])
    font = np.array([v["frequency"] for v in body["truth"]["font"]["values"]])
    assert np.allclose(table.sum(axis=0), font)

    status, one = first_load.get("/api/metrics/language_by_font")
    assert status == 200 and set(one["metrics"]) == {"language_by_font"}
    validate(one["metrics"]["language_by_font"]["all"], "joint-estimate/1")
    assert first_load.get("/api/metrics/nope")[0] == 404


def test_watch_and_report_read_the_live_and_the_offline_dictionary_alike(first_load: Pipeline, tmp_path: Path):
    for name, truth in (("word", True), ("urls", False)):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["report", name, "--out", str(tmp_path / f"{name}.png"), "--redis", first_load.redis_url,
                         "--prefix", first_load.prefix]) == 0
            assert main(["watch", name, "--iterations", "1", "--redis", first_load.redis_url, "--prefix",
                         first_load.prefix]) == 0
        text = printed.getvalue()
        assert ("with the simulation's truth" in text) is truth, text  # produce drew word's strings
        assert "discovered dictionary" in text and (tmp_path / f"{name}.png").stat().st_size > 0


def test_the_api_needs_the_token_and_the_page_does_not(first_load: Pipeline):
    assert first_load.get("/api/estimates", token=None)[0] == 401
    assert first_load.get("/api/status", token="wrong")[0] == 401
    with urllib.request.urlopen(first_load.url, timeout=30) as response:
        assert response.status == 200 and b"app.js" in response.read()


def test_the_status_holds_counts_partitions_lag_and_the_ingest_rate(first_load: Pipeline):
    status, body = first_load.get("/api/status")
    assert status == 200
    assert body["metrics"]["os"]["reports"] == 20_000
    assert body["associations"]["language_by_font"]["reports"] == 30_000
    assert {p["topic"] for p in body["partitions"]} == {first_load.topic}
    assert body["ingest"]["lag"] == 0  # everything produced was applied before the decode counted it
    assert body["last_decode"] is not None


def test_the_serve_command_binds_loopback_and_takes_its_token_from_the_environment(first_load: Pipeline):
    env = {**os.environ, "LDPSTREAM_SERVE_TOKEN": "from-the-environment"}
    command = [sys.executable, "-m", "ldpstream", "serve", "--port", "0", "--registry", str(first_load.registry_file),
               "--kafka", first_load.kafka, "--redis", first_load.redis_url, "--prefix", first_load.prefix]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving the live view on http://127.0.0.1:") and "bearer token" in line, line
        url = line.split(" on ", 1)[1].split()[0]
        request = urllib.request.Request(url + "api/metrics/os",
                                         headers={"Authorization": "Bearer from-the-environment"})
        with urllib.request.urlopen(request, timeout=30) as response:
            validate(json.loads(response.read())["metrics"]["os"]["all"], "marginal-estimate/1")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "api/metrics/os", timeout=30)
        with refused.value:
            assert refused.value.code == 401
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0  # SIGTERM: a clean shutdown


def _closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _health(view: LiveView) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """/healthz and /readyz of a server over ``view``, asked without a token (status, body) each."""
    server = make_server(view, "127.0.0.1", 0, TOKEN)
    serve_in_thread(server)
    try:
        answers = []
        for path in ("healthz", "readyz"):
            try:
                with urllib.request.urlopen(url_of(server) + path, timeout=30) as response:
                    answers.append((response.status, json.loads(response.read())))
            except urllib.error.HTTPError as error:
                with error:
                    answers.append((error.code, json.loads(error.read())))
        return answers[0], answers[1]
    finally:
        server.shutdown()
        server.server_close()


def test_readiness_says_whether_redis_and_kafka_answer(kafka_bootstrap: str, redis_url: str):
    registry = registry_for("test-serve-ready", {"lang": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}})
    ready = LiveView(registry, RedisSketchStore.from_url(redis_url, "test:serve:ready"), KafkaConfig(kafka_bootstrap))
    assert _health(ready) == ((200, {"alive": True}), (200, {"ready": True, "redis": "ok", "kafka": "ok"}))
    no_redis = LiveView(registry, RedisSketchStore.from_url(f"redis://127.0.0.1:{_closed_port()}/0", "x"),
                        KafkaConfig(kafka_bootstrap))
    alive, readiness = _health(no_redis)
    assert alive == (200, {"alive": True})
    assert readiness == (503, {"ready": False, "redis": "unreachable (ConnectionError)", "kafka": "ok"})
    no_kafka = LiveView(registry, RedisSketchStore.from_url(redis_url, "test:serve:ready"),
                        KafkaConfig(f"127.0.0.1:{_closed_port()}"))
    started = time.monotonic()
    alive, readiness = _health(no_kafka)
    assert alive[0] == 200 and readiness == (503, {"ready": False, "redis": "ok",
                                                   "kafka": "unreachable (ConnectionError)"})
    assert time.monotonic() - started < 10  # the Kafka probe gives up after 2 s


def test_the_serve_command_refuses_a_token_file_others_may_read(first_load: Pipeline, tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("long-enough-token-0123456789\n")
    token.chmod(0o644)
    command = [sys.executable, "-m", "ldpstream", "serve", "--port", "0", "--token-file", str(token),
               "--registry", str(first_load.registry_file), "--kafka", first_load.kafka, "--redis",
               first_load.redis_url, "--prefix", first_load.prefix]
    env = {k: v for k, v in os.environ.items() if k != "LDPSTREAM_SERVE_TOKEN"}
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "may be read by others" in refused.stderr and "chmod o-rwx" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


# ---------------------------------------------------------------- the browser


def _browser() -> Any:
    """A headless Chromium driven by chromedriver (skip, or under CI fail, when they are missing)."""
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    if chromium is None or driver is None or webdriver is None:
        message = ("the browser test needs Debian's chromium and chromium-driver (apt-get install chromium "
                   "chromium-driver) and selenium (pip install -e '.[test]')")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1500,1250", "--hide-scrollbars"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def _card(browser: Any, name: str) -> dict[str, str] | None:
    found: dict[str, str] | None = browser.execute_script(
        "const c = document.querySelector(`section.card[data-name='${arguments[0]}']`);"
        "return c ? {...c.dataset} : null;", name)
    return found


@pytest.mark.browser
def test_the_page_in_a_real_browser_shows_live_estimates_and_sees_them_change(first_load: Pipeline, tmp_path: Path):
    browser = _browser()
    try:
        browser.get(first_load.url + "#token=" + TOKEN)
        wait_for(lambda: (_card(browser, "app_language") or {}).get("nReports") == "30000", 60,
                 "the page to show the first decode")
        # Bars with whiskers, the truth beside them, the heat map with its test, the ingest rate and the lag.
        values = browser.execute_script(
            "return [...document.querySelectorAll(\"section[data-name='app_language'] g.value\")]"
            ".map(g => ({...g.dataset, whiskers: g.querySelectorAll('line.whisker').length,"
            " truth: g.querySelectorAll('line.truth').length}));")
        assert len(values) == len(LANGS)
        assert all(v["whiskers"] == 3 and v["truth"] == 1 for v in values)
        assert all(float(v["low"]) <= float(v["frequency"]) + 1e-9 <= float(v["high"]) + 2e-9 for v in values)
        found = browser.execute_script(
            "return [...document.querySelectorAll(\"section[data-name='urls'] g.value\")]"
            ".map(r => r.dataset.value)")
        assert sorted(found) == sorted(DICTIONARY)
        # The live dictionary: its strings with intervals and the strings the simulation drew.
        words = browser.execute_script(
            "return [...document.querySelectorAll(\"section[data-name='word'] g.value\")]"
            ".map(g => ({...g.dataset, truth: g.querySelectorAll('line.truth').length}));")
        assert set(WORDS) <= {w["value"] for w in words}
        assert all(w["truth"] == 1 for w in words if w["value"] in WORDS)
        assert (_card(browser, "word") or {}).get("kind") == "dictionary"
        cells = browser.execute_script("return document.querySelectorAll(\"table.heat td[data-share]\").length")
        assert cells == 5 * 5  # 4 candidates + "Other" on each side
        test_text = browser.execute_script("return document.querySelector('.test').textContent")
        assert "independence test" in test_text and ("p =" in test_text or "p <" in test_text)
        wait_for(lambda: browser.execute_script("return document.getElementById('connection').dataset.state")
                 == "live", 10, "the pill to say live (the status read after the estimates)")
        wait_for(lambda: browser.execute_script("return document.getElementById('lag').textContent") == "0", 30,
                 "the status (lag 0: every report produced was applied)")
        before = _card(browser, "app_language")

        # More clients report; the running consumer folds them and the decoder's next passes publish them.
        first_load.produce("language_by_font", 20_000, seed=3)
        wait_for(lambda: (_card(browser, "app_language") or {}).get("nReports") == "50000", 120,
                 "the page to show the next decode")
        after = _card(browser, "app_language")
        assert before is not None and after is not None
        assert float(after["snapshotTime"]) > float(before["snapshotTime"])
        first_load.wait_decoded()
        wait_for(lambda: (_card(browser, "language_by_font") or {}).get("nReports") == "50000", 60,
                 "the joint table of the next decode")
        wait_for(lambda: browser.execute_script(
            "return document.getElementById('ingest-rate').dataset.rate !== ''"), 30, "an ingest rate")
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1500, int(height) + 140)  # the whole page in one screenshot
        time.sleep(1.5)  # one more poll, so that the screenshot shows a settled page
        shot = tmp_path / "live-view.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000
        if os.environ.get("LDPSTREAM_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["LDPSTREAM_SCREENSHOT"])
    finally:
        browser.quit()


#: Per card with a bar chart: the chart's and its texts' boxes against the card's inner box and the viewport.
_FIT = """
return [...document.querySelectorAll("section.card")].filter((c) => c.querySelector("svg")).map((c) => {
  const box = c.getBoundingClientRect(), style = getComputedStyle(c);
  const left = box.left + parseFloat(style.paddingLeft) - 1, right = box.right - parseFloat(style.paddingRight) + 1;
  const chart = c.querySelector("svg").getBoundingClientRect();
  const texts = [...c.querySelectorAll("svg text")].map((t) => t.getBoundingClientRect());
  return {name: c.dataset.name, chart: [chart.left, chart.right], inner: [left, right], card: box.right,
          viewport: document.documentElement.clientWidth, texts: texts.length,
          outside: texts.filter((t) => t.left < left || t.right > right).length};
});
"""


@pytest.mark.browser
def test_every_bar_chart_fits_its_card_at_1400_and_500_px(first_load: Pipeline):
    browser = _browser()
    try:
        browser.get(first_load.url + "#token=" + TOKEN)
        wait_for(lambda: (_card(browser, "app_language") or {}).get("nReports") is not None, 60, "the first decode")
        for width in (1400, 500):
            browser.set_window_size(width, 1200)
            time.sleep(1.5)  # a resize and a poll: the charts are laid out again
            cards = browser.execute_script(_FIT)
            assert {c["name"] for c in cards} >= {"app_language", "font", "os", "word", "urls"}, cards
            for c in cards:
                assert c["texts"] > 0 and c["outside"] == 0, (width, c)
                assert c["inner"][0] <= c["chart"][0] and c["chart"][1] <= c["inner"][1], (width, c)
                assert c["card"] <= c["viewport"] + 0.5, (width, c)
    finally:
        browser.quit()


@pytest.mark.browser
def test_the_live_pill_turns_stale_when_the_last_decode_is_older_than_three_intervals(first_load: Pipeline):
    store = RedisSketchStore.from_url(first_load.redis_url, first_load.prefix + ":stale")
    server = make_server(LiveView(first_load.registry, store, None, decode_interval=1.0), "127.0.0.1", 0, TOKEN)
    serve_in_thread(server)
    browser = _browser()
    pill = "const p = document.getElementById('connection'); return [p.dataset.state, p.textContent]"
    try:
        store.record_decode([])
        browser.get(url_of(server) + "#token=" + TOKEN)
        wait_for(lambda: browser.execute_script(pill)[0] == "live", 30, "the pill to say live")
        wait_for(lambda: browser.execute_script(pill)[0] == "stale", 30, "the pill to turn stale (3 intervals: 3 s)")
        assert "last decode" in browser.execute_script(pill)[1]
        store.record_decode([])  # the decoder is back
        wait_for(lambda: browser.execute_script(pill)[0] == "live", 30, "the pill to say live again")
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()
        store.client.delete(key_schema.last_decode_key(first_load.prefix + ":stale"))
