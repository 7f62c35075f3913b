"""``ldpstream serve`` without Kafka or Redis: the API over the in-memory store (shapes, the truth, non-finite
numbers, the token, unknown names, the static page), the ingest rate, the token's sources, and every object
the decoder publishes (marginals over one and several buckets, joint tables, retractions) against the JSON
Schemas of ``docs/schema/``. The same over a running pipeline and in a browser: tests/integration/test_live_view.py."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.cli.discover import published_dictionary
from ldpstream.cli.main import build_parser
from ldpstream.cli.serve import TOKEN_ENV, read_token
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.deploy.serve import LiveView, finite, make_server, serve_in_thread, url_of
from ldpstream.errors import ParameterError
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore
from tests.published_schema import FILES, validate, validator
from tests.unit import test_decoder_joint as joint
from tests.unit.joint_feed import JointFeeder

NOW, OLD, RECENT = joint.NOW, joint.OLD, joint.RECENT

TOKEN = "unit-test-token"


@pytest.fixture
def registry() -> Registry:
    return joint.make_registry()


@pytest.fixture
def store(registry) -> InMemorySketchStore:
    """The decoder's joint unit tests' data: old and recent associated clients, and a second association."""
    store = InMemorySketchStore(clock=lambda: NOW)
    feed = JointFeeder(registry, store, now=NOW)
    feed.add("lang_os", *joint.OLD_VALUES, joint.OLD_TIME, seed=11)
    feed.add("lang_os", *joint.RECENT_VALUES, joint.RECENT_TIME, seed=12)
    feed.add("lang_flags", *joint.FLAG_VALUES, joint.OLD_TIME, seed=13)
    return store


@pytest.fixture
def producer() -> joint.FakeProducer:
    return joint.FakeProducer()


@pytest.fixture
def service(registry, store, producer) -> DecoderService:
    return DecoderService(registry, store, producer=producer, metrics=DecoderMetrics(CollectorRegistry()))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served(service, store, registry) -> Iterator[tuple[str, LiveView]]:
    service.run_once(now=NOW)
    view = LiveView(registry, store, None, status_every=0.0)
    server = make_server(view, "127.0.0.1", 0, TOKEN)
    serve_in_thread(server)
    try:
        yield url_of(server), view
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, token: str | None = TOKEN) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


def test_every_schema_is_a_valid_draft_2020_12_schema_with_a_versioned_id():
    for name, file in FILES.items():
        schema = validator(name).schema
        assert schema["$id"].endswith(":" + name.split("/")[1]), schema["$id"]
        assert file.endswith(f".v{name.split('/')[1]}.schema.json")
        assert schema["properties"]["schema"]["const"] == name


def test_everything_the_decoder_publishes_and_produces_follows_the_schemas(service, store, producer):
    service.run_once(now=NOW)
    service.run_once(now=NOW + 5 * 3600)  # the 1h windows empty: retractions on the topic
    kinds = [validate(body) for _, _, body in producer.messages]
    assert {"marginal-estimate/1", "joint-estimate/1", "retraction/1"} <= set(kinds)
    for name in ("lang", "os", "flags"):
        for published in store.estimate_history(name, "all"):
            validate(published, "marginal-estimate/1")
    for published in store.joint_history("lang_os", "1h"):  # one bucket of pairs
        validate(published, "joint-estimate/1")


def test_a_schema_refuses_what_it_does_not_describe(service, store):
    service.run_once(now=NOW)
    published = store.latest_estimate("lang", "all")
    assert published is not None
    broken = {**published, "values": [{**published["values"][0], "low_95": 1.5}]}
    assert not validator("marginal-estimate/1").is_valid(broken)
    assert not validator("marginal-estimate/1").is_valid({**published, "unknown_field": 1})
    joint = store.latest_joint("lang_os", "all")
    assert joint is not None
    assert not validator("joint-estimate/1").is_valid({**joint, "independence": {"statistic": 1.0}})


def test_the_api_serves_every_metric_and_association_with_its_windows(served, store):
    url, _ = served
    status, kind, body = get(url + "api/estimates")
    assert status == 200 and kind == "application/json"
    estimates = json.loads(body)
    assert set(estimates["metrics"]) == {"lang", "os", "flags", "lang_os", "lang_flags"}
    assert estimates["metrics"]["lang"]["1h"] == store.latest_estimate("lang", "1h")
    assert estimates["metrics"]["lang_os"]["all"] == store.latest_joint("lang_os", "all")
    assert estimates["truth"] == {}  # no simulation published one
    status, _, body = get(url + "api/metrics/lang_os")
    assert status == 200 and set(json.loads(body)["metrics"]) == {"lang_os"}
    status, _, body = get(url + "api/metrics/nothing")
    assert status == 404 and "nothing" in json.loads(body)["error"]
    assert get(url + "api/nothing")[0] == 404


def test_the_api_wants_the_token_and_the_page_and_its_files_do_not(served):
    url, _ = served
    assert get(url + "api/estimates", token=None)[0] == 401
    assert get(url + "api/status", token="not-it")[0] == 401
    for path, kind in (("", "text/html"), ("app.js", "text/javascript"), ("style.css", "text/css")):
        status, got, body = get(url + path, token=None)
        assert status == 200 and got.startswith(kind) and body
    assert get(url + "../pyproject.toml", token=None)[0] == 404
    assert get(url + "web/index.html", token=None)[0] == 404  # only the page's files, by name


def test_a_loopback_server_answers_its_own_names_only(served):
    url, _ = served
    port = url.rstrip("/").rsplit(":", 1)[1]
    request = urllib.request.Request(url + "api/estimates", headers={"Host": f"attacker.example:{port}",
                                                                      "Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    with refused.value:
        assert refused.value.code == 421
    assert get(url.replace("127.0.0.1", "localhost") + "api/estimates")[0] == 200


def test_the_truth_is_served_as_frequencies_beside_the_estimates(served, store, registry):
    url, _ = served
    store.add_truth("lang", np.array([5, 3, 2, 0, 0, 0]))
    store.add_truth("lang_os", np.arange(24).reshape(6, 4))
    store.add_truth("os", np.array([1, 2]))  # a stale shape (the registry changed): not served
    estimates = json.loads(get(url + "api/estimates")[2])
    lang = estimates["truth"]["lang"]
    assert lang["kind"] == "truth" and lang["source"] == "simulation" and lang["n"] == 10
    assert [v["value"] for v in lang["values"]] == list(registry.metrics["lang"].value_names())
    assert [v["frequency"] for v in lang["values"]] == [0.5, 0.3, 0.2, 0.0, 0.0, 0.0]
    joint = estimates["truth"]["lang_os"]
    assert (joint["x"], joint["y"]) == ("lang", "os") and joint["n"] == sum(range(24))
    assert np.allclose(joint["table"], np.arange(24).reshape(6, 4) / sum(range(24)))
    assert "os" not in estimates["truth"]


def test_non_finite_numbers_are_served_as_null(served, store):
    url, _ = served
    store.publish_estimate("lang", "all", '{"metric": "lang", "residual": NaN, "x": [Infinity, 1.0]}', history=1)
    body = get(url + "api/metrics/lang")[2]
    assert b"NaN" not in body and b"Infinity" not in body
    assert json.loads(body)["metrics"]["lang"]["all"] == {"metric": "lang", "residual": None, "x": [None, 1.0]}
    assert finite({"a": (math.inf, 2.0), "b": "NaN"}) == {"a": [None, 2.0], "b": "NaN"}


def test_the_status_counts_the_reports_and_measures_the_ingest_rate_between_samples(registry, service, store):
    clock = Clock(1000.0)
    view = LiveView(registry, store, None, status_every=1.0, clock=clock)
    first = view.status()
    assert first["metrics"]["lang"]["reports"] == OLD + RECENT + 2000
    assert first["ingest"]["reports_per_second"] is None  # one sample: no rate yet
    clock.now += 0.5
    assert view.status() is first  # younger than status_every: the same report
    clock.now += 1.5
    second = view.status()
    assert second["ingest"]["reports_per_second"] == 0.0 and second["ingest"]["lag"] == 0
    service.run_once(now=NOW)
    clock.now += 2.0
    assert view.status()["last_decode"] is not None


def test_the_token_comes_from_a_file_or_the_environment_never_the_command_line(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert read_token(None) is None
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert read_token(None) == "from-env"
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    assert read_token(secret) == "from-file"
    secret.write_text("  \n")
    with pytest.raises(ParameterError, match="empty"):
        read_token(secret)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--token", "x"])
    args = build_parser().parse_args(["serve"])
    assert args.addr == "127.0.0.1"



def test_a_published_dictionary_is_served_by_its_schema(served, store):
    url, _ = served
    out = {"discovered": [{"string": "ba", "estimate": 0.2, "std_error": 0.01},
                          {"string": "ab", "estimate": 0.7, "std_error": 0.3}],
           "candidates": 5, "ngrams": [["ab", "ba"], ["ab"]], "seconds": {"ngrams": 0.5, "decode": 1.0},
           "parameters": {"n": 1000}}
    body = published_dictionary("urls", out, 1000, when=NOW)
    validate(body, "dictionary/2")
    assert [v["value"] for v in body["values"]] == ["ab", "ba"]  # by decreasing estimate
    assert body["values"][0]["high_95"] == 1.0 and body["values"][1]["low_95"] == pytest.approx(0.2 - 0.0196)
    assert body["discovery"]["source"] == "offline" and body["discovery"]["ngrams"] == [2, 1]
    store.publish_dictionary("urls", json.dumps(body), 10)
    # one store: where the decoder publishes a live dictionary, so watch and report read it as any estimate
    assert store.latest_estimate("urls", "all") == body and store.estimate_history("urls", "all") == [body]
    served_body = json.loads(get(url + "api/metrics/urls")[2])
    validate(served_body["metrics"]["urls"]["all"], "dictionary/2")
    assert "urls" in json.loads(get(url + "api/estimates")[2])["metrics"]
