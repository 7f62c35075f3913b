"""``ldpstream serve`` without Kafka or Redis: the API over the in-memory store (shapes, the truth, non-finite
numbers, the token, unknown names, the static page), the ingest rate, the token's sources, and every object
the decoder publishes (marginals over one and several buckets, joint tables, retractions) against the JSON
Schemas of ``docs/schema/``. The same over a running pipeline and in a browser: tests/integration/test_live_view.py."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.cli import serve as serve_command
from ldpstream.cli.discover import published_dictionary
from ldpstream.cli.main import build_parser
from ldpstream.cli.serve import TOKEN_ENV, read_token
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.errors import ConfigError, ParameterError
from ldpstream.operations import serve as serve_module
from ldpstream.operations.serve import LiveView, finite, make_server, serve_in_thread, url_of
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore
from tests.published_schema import FILES, validate, validator
from tests.unit.decoder import test_joint as joint
from tests.unit.decoder.joint_feed import JointFeeder

NOW, OLD, RECENT = joint.NOW, joint.OLD, joint.RECENT

TOKEN = "unit-test-token-0123456789"


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
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment")
    assert read_token(None) == "from-the-environment"
    secret = tmp_path / "token"
    secret.write_text("from-a-file-0123456789\n")
    secret.chmod(0o600)
    assert read_token(secret) == "from-a-file-0123456789"
    secret.write_text("  \n")
    with pytest.raises(ParameterError, match="empty"):
        read_token(secret)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--token", "x"])
    args = build_parser().parse_args(["serve"])
    assert args.addr == "127.0.0.1" and args.decode_interval == 10.0


def test_a_token_file_others_may_read_and_a_short_token_are_refused(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    secret = tmp_path / "token"
    secret.write_text("long-enough-token-0123456789\n")
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match=r"may be read by others .*chmod o-rwx"):
        read_token(secret)
    secret.chmod(0o640)  # its group may read it (Kubernetes mounts secrets 0440)
    assert read_token(secret) == "long-enough-token-0123456789"
    secret.write_text("x\n")
    with pytest.raises(ParameterError, match=f"{secret}: the bearer token has 1 bytes, it needs at least 16"):
        read_token(secret)
    monkeypatch.setenv(TOKEN_ENV, "fifteen-bytes!!")
    with pytest.raises(ParameterError, match=r"\$LDPSTREAM_SERVE_TOKEN: the bearer token has 15 bytes"):
        read_token(None)
    monkeypatch.setenv(TOKEN_ENV, "sixteen-bytes!!!")
    assert read_token(None) == "sixteen-bytes!!!"
    with pytest.raises(ParameterError, match="at least 16"):
        make_server(LiveView(joint.make_registry(), InMemorySketchStore()), "127.0.0.1", 0, "short")


def test_the_command_states_the_limits_of_the_server():
    for name in ("MIN_TOKEN_BYTES", "MAX_CONNECTIONS", "HEAD_TIMEOUT", "IDLE_TIMEOUT", "STALE_INTERVALS"):
        assert getattr(serve_command, name) == getattr(serve_module, name), name


# ---------------------------------------------------------------- connections: limits on real sockets


@pytest.fixture
def limited(registry, store) -> Iterator[tuple[str, int, serve_module.LiveViewServer]]:
    """A server with small limits: 4 requests at once, heads within 1 s, idle keep-alive closed after 1 s."""
    server = make_server(LiveView(registry, store, None, status_every=0.0), "127.0.0.1", 0, TOKEN,
                         max_connections=4, head_timeout=1.0, idle_timeout=1.0)
    serve_in_thread(server)
    try:
        yield "127.0.0.1", server.server_address[1], server
    finally:
        server.shutdown()
        server.server_close()


def closed_after(sock: socket.socket, within: float = 10.0) -> float:
    """Seconds until the peer closes ``sock`` (reading and dropping what it sends); ``within`` if it does not."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < within:
        try:
            if not sock.recv(65536):
                break
        except TimeoutError:
            continue
        except OSError:
            break
    return time.monotonic() - start


def answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The head and body of one answer read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def request(host: str, port: int, path: str, token: str | None = TOKEN) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode()


def test_connections_waiting_for_a_request_hold_no_thread_and_requests_are_served_four_at_once(limited):
    host, port, _ = limited
    before = threading.active_count()
    idle = [socket.create_connection((host, port)) for _ in range(20)]
    stuck = [socket.create_connection((host, port)) for _ in range(20)]
    try:
        for sock in stuck:
            sock.sendall(b"GET /api/status HTTP/1.1\r\n")  # a head that never ends: each holds a thread
        time.sleep(0.5)
        assert threading.active_count() - before <= 4
        time.sleep(1.5)  # past the head limit: every one of them closed
        assert threading.active_count() - before <= 0
        with socket.create_connection((host, port)) as sock:
            sock.sendall(request(host, port, "/api/status"))
            assert answer(sock)[0].startswith(b"HTTP/1.1 200")
        for sock in idle + stuck:
            assert closed_after(sock, within=0.5) < 0.5
    finally:
        for sock in idle + stuck:
            sock.close()


def test_a_head_that_trickles_in_is_cut_at_the_limit(limited):
    host, port, _ = limited
    with socket.create_connection((host, port)) as sock:
        start = time.monotonic()
        sock.settimeout(0.2)
        closed = False
        for byte in request(host, port, "/api/status"):
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(65536) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and 0.9 <= time.monotonic() - start < 2.5


def test_an_idle_keep_alive_connection_is_closed_after_the_limit(limited):
    host, port, _ = limited
    with socket.create_connection((host, port)) as sock:
        for _ in range(2):  # kept alive between requests
            sock.sendall(request(host, port, "/api/status"))
            head, _ = answer(sock)
            assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" not in head
        assert 0.9 <= closed_after(sock) < 2.5


def test_a_missing_or_wrong_token_is_answered_401_at_once_and_the_connection_closed(limited):
    host, port, _ = limited
    for token in (None, "wrong-token-0123456789"):
        with socket.create_connection((host, port)) as sock:
            start = time.monotonic()
            sock.sendall(request(host, port, "/api/estimates", token))
            head, _ = answer(sock)
            assert head.startswith(b"HTTP/1.1 401") and b"Connection: close" in head
            assert closed_after(sock) < 0.5 and time.monotonic() - start < 0.5


def test_health_and_readiness_need_no_token(served):
    url, _ = served
    status, _, body = get(url + "healthz", token=None)
    assert status == 200 and json.loads(body) == {"alive": True}
    status, _, body = get(url + "readyz", token=None)
    assert status == 200 and json.loads(body) == {"ready": True, "redis": "ok"}  # no Kafka: Redis only


def test_the_status_calls_a_decode_older_than_three_intervals_stale(registry, service, store):
    clock = Clock(NOW)
    view = LiveView(registry, store, None, status_every=0.0, decode_interval=5.0, clock=clock)
    assert view.status()["decode"] == {"interval": 5.0, "stale_after": 15.0, "seconds_ago": None, "stale": True}
    store.record_decode([], when=NOW)
    clock.now = NOW + 14.0
    assert view.status()["decode"]["stale"] is False
    clock.now = NOW + 145.0
    decode = view.status()["decode"]
    assert decode["stale"] is True and decode["seconds_ago"] == 145.0


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
