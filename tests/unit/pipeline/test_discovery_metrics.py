"""Discovery metrics live (docs/math/dictionary.md, "Live"): the registry's expansion of a string metric without a
dictionary, the device's record (slots from its secret, one version-2 record), the consumers' fold (n-gram pair
in the pair statistic, the full string riding), and the decoder's dictionary with its retirement rule, on the
in-memory store."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ldpstream.consumers.fold import fold_messages
from ldpstream.decoder.discovery import PublishedDictionary, update_dictionary
from ldpstream.decoder.metrics import DecoderMetrics
from ldpstream.decoder.service import DecoderService
from ldpstream.decoder.watch import render
from ldpstream.errors import ConfigError, ParameterError
from ldpstream.estimators.discovery import draw_slots, scheme_of
from ldpstream.estimators.discovery.client import SLOT_DOMAIN
from ldpstream.mechanisms.randomness import KeyedRandomness
from ldpstream.operations.serve import LiveView, finite
from ldpstream.producers.client import LdpClient
from ldpstream.producers.loadgen import simulate_discovery_and_publish
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher
from ldpstream.registry import Registry, discovery_pair_name, discovery_slot_name
from ldpstream.store import InMemorySketchStore, PartitionBatch
from ldpstream.wire import decode_messages
from tests.published_schema import validate

NOW = 1_700_000_000
BUCKET = 3600
SECRET = bytes(range(32))


def discovery_table(**changes):
    spec = {"epsilon": 12.0, "length": 4, "ngram": 2, "alphabet": "ab", "full_bits": 32, "ngram_bits": 32,
            "cohorts": 8, "retire_after": 2}
    spec.update(changes)
    return {"id": 40, "retention": "2d", "windows": ["all", "1h"], "discovery": spec}


def make_registry(table=None, **extra) -> Registry:
    return Registry.from_dict({"defaults": {"bucket_seconds": BUCKET},
                               "metrics": {"word": table or discovery_table(), **extra}})


REGISTRY = make_registry()


class _Captured(ReportPublisher):
    """A publisher that keeps the messages it is given (the encoding is under test, not Kafka)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.stats = DeliveryStats()

    def publish(self, topic, rows, per_message=1, key=None):
        rows = np.asarray(rows)
        for i in range(0, len(rows), per_message):
            self.sent.append(rows[i:i + per_message].tobytes())
        self.stats.records_acked += len(rows)
        return -(-len(rows) // per_message)

    def flush(self, timeout=None):
        return self.stats

    def poll(self, timeout=0.0):
        return 0


# ------------------------------------------------------------------------------------------------ registry


def test_a_discovery_metric_expands_to_its_full_string_slot_and_slot_pair_entries():
    config = REGISTRY["word"].discovery
    assert config is not None and config.slots == 2 and config.alphabet == "ab$"
    assert sorted(REGISTRY.metrics) == ["word", "word.ngram0", "word.ngram1"]
    assert [REGISTRY[discovery_slot_name("word", j)].id for j in range(2)] == [41, 42]
    (pair,) = REGISTRY.associations.values()
    assert pair.name == discovery_pair_name("word", 0, 1) and pair.id == 40 and pair.part_of == "word"
    assert pair.members == ("word.ngram0", "word.ngram1") and [m.name for m in pair.riders] == ["word"]
    assert REGISTRY["word"].discovers and not REGISTRY["word.ngram0"].discovers
    # one record spends the metric's total ε: the full report's share plus two n-gram reports' halves of the rest
    assert pair.epsilon == pytest.approx(12.0)
    assert REGISTRY["word"].mechanism.epsilon == pytest.approx(4.0)
    assert REGISTRY["word.ngram0"].mechanism.epsilon == pytest.approx(4.0)
    scheme = scheme_of(REGISTRY, REGISTRY["word"])
    assert scheme.epsilon == pytest.approx(12.0) and scheme.shape.slots == 2


def test_an_orappor_discovery_metric_expands_to_orappor_reports_with_the_same_budget():
    from ldpstream.mechanisms.orappor import ORappor

    registry = make_registry(discovery_table(mechanism="orappor"))
    assert sorted(registry.metrics) == ["word", "word.ngram0", "word.ngram1"]
    (pair,) = registry.associations.values()
    assert pair.members == ("word.ngram0", "word.ngram1") and [m.name for m in pair.riders] == ["word"]
    for name, bits in (("word", 32), ("word.ngram0", 32), ("word.ngram1", 32)):
        mech = registry[name].mechanism
        assert isinstance(mech, ORappor) and mech.k == bits and mech.cohorts == 8 and mech.hashes == 2
        assert mech.epsilon == pytest.approx(4.0)  # ε/3 each (full_share 1/3, the rest split over two n-grams)
    # one record spends the total; O-RAPPOR memoizes its report, so repeated records of one string do too
    assert pair.epsilon == pytest.approx(12.0) and pair.epsilon_inf == pytest.approx(12.0)
    scheme = scheme_of(registry, registry["word"])
    assert isinstance(scheme.full, ORappor) and scheme.epsilon == pytest.approx(12.0)
    # a different mechanism is a different meaning of the reports: no fingerprint in common with RAPPOR's
    for name in ("word", "word.ngram0", "word.ngram1"):
        assert registry[name].fingerprint != REGISTRY[name].fingerprint
    assert pair.fingerprint != REGISTRY.associations[pair.name].fingerprint


def test_a_device_sends_orappor_discovery_records():
    registry = make_registry(discovery_table(length=8, alphabet="abc.", mechanism="orappor"))
    client = LdpClient(registry, _Captured(), secret=hashlib.sha256(b"orappor").digest())
    assert client.report("word", "ab.c", event_time=NOW)
    ((message),) = client.publisher.sent
    (batch,) = decode_messages([message]).association_batches
    assert batch.cohorts.shape == (1, 3)


def test_the_fingerprints_cover_the_string_shape_and_the_budget_not_the_decoder_settings():
    base = REGISTRY
    for change in ({"length": 6}, {"alphabet": "abc"}, {"full_share": 0.5}, {"pad": "_"}):
        other = make_registry(discovery_table(**change))
        assert other["word"].fingerprint != base["word"].fingerprint, change
        assert other["word.ngram0"].fingerprint != base["word.ngram0"].fingerprint, change
    same = make_registry(discovery_table(retire_after=5, alpha=0.05, pattern="a.*"))
    assert same["word"].fingerprint == base["word"].fingerprint
    assert same.associations["word.pair0-1"].fingerprint == base.associations["word.pair0-1"].fingerprint
    # the slots' metrics differ from each other (a report of slot 0 never counts at slot 1)
    assert base["word.ngram0"].fingerprint != base["word.ngram1"].fingerprint


@pytest.mark.parametrize(("table", "message"), [
    ({**discovery_table(), "retention": None}, "retention"),
    ({**discovery_table(), "mechanism": "rappor"}, "unknown setting"),
    (discovery_table(positions=3), "positions must be 2"),
    (discovery_table(mechanism="krr"), "rappor"),
    (discovery_table(mechanism="krappor"), "closed alphabet"),
    (discovery_table(mechanism="orr"), "sends symbols"),
    (discovery_table(mechanism="oue"), "cannot carry"),
    (discovery_table(mechanism="orappor", f=0.25), "f is not an option of orappor reports"),
    (discovery_table(length=5), "multiple of ngram"),
    (discovery_table(alphabet="aab"), "repeats"),
    (discovery_table(colour="red"), "unknown discovery setting"),
    (discovery_table(pattern="("), "regular expression"),
    (discovery_table(epsilon=40.0), "at most 10"),
    ({**discovery_table(), "id": 65535}, "past 65535"),
])
def test_bad_discovery_metrics_are_refused_with_a_clear_error(table, message):
    table = {k: v for k, v in table.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        make_registry(table)


def test_derived_names_and_ids_may_not_clash_with_declared_ones():
    with pytest.raises(ConfigError, match=r"word\.ngram0"):
        make_registry(**{"word.ngram0": {"id": 7, "mechanism": "krr", "k": 4, "epsilon": 1.0}})
    with pytest.raises(ConfigError, match="share id 41"):
        make_registry(other={"id": 41, "mechanism": "krr", "k": 4, "epsilon": 1.0})


# -------------------------------------------------------------------------------------------------- device


def _slots_of(secret: bytes, metric: str, slots: int) -> tuple[int, int]:
    """The rule the device states: HMAC(secret, "discovery-slots:<metric>") keys the stream of draw_slots."""
    key = hmac.new(secret, f"discovery-slots:{metric}".encode(), hashlib.sha256).digest()
    a, b = draw_slots(1, slots, KeyedRandomness(key, SLOT_DOMAIN))[0]
    return int(a), int(b)


def test_a_device_sends_one_record_of_the_slot_pair_its_secret_picks():
    registry = make_registry(discovery_table(length=8, alphabet="abc."))  # 4 slots, 6 slot pairs
    seen = set()
    for i in range(40):
        secret = hashlib.sha256(bytes([i])).digest()
        client = LdpClient(registry, _Captured(), secret=secret)
        assert client.report("word", "ab.c", event_time=NOW)
        assert not client.report("word", "ab.c", event_time=NOW + 1)  # once per bucket
        ((message),) = client.publisher.sent
        decoded = decode_messages([message])
        assert decoded.batches == [] and len(decoded.association_batches) == 1
        (batch,) = decoded.association_batches
        a, b = sorted(_slots_of(secret, "word", 4))
        association = registry.association(discovery_pair_name("word", a, b))
        assert batch.association_id.tolist() == [association.id]
        assert batch.fingerprint.tolist() == [association.fingerprint]
        assert batch.cohorts.shape == (1, 3)  # n-gram of slot a, n-gram of slot b, full string
        _, values = client.privatizer.discovery_record(registry, registry["word"], "ab.c")
        padded = "ab.c$$$$"
        assert values == {f"word.ngram{a}": padded[2 * a:2 * a + 2], f"word.ngram{b}": padded[2 * b:2 * b + 2],
                          "word": padded}
        seen.add((a, b))
    assert len(seen) >= 5  # 40 devices cover (nearly) every one of the 6 pairs: P(a pair missed) ≈ 6·(5/6)^40


def test_a_restarted_device_reports_the_same_slots(tmp_path):
    registry = make_registry(discovery_table(length=8, alphabet="abc."))
    pairs = set()
    for _ in range(3):
        client = LdpClient(registry, _Captured(), secret_file=tmp_path / "secret", once_per_bucket=False)
        association, _ = client.privatizer.discovery_record(registry, registry["word"], "abc")
        pairs.add(association.name)
    assert len(pairs) == 1


def test_the_device_refuses_what_it_cannot_send_without_quoting_the_value():
    client = LdpClient(REGISTRY, _Captured(), secret=SECRET)
    with pytest.raises(ParameterError, match="outside its alphabet") as caught:
        client.report("word", "secret-zzz")
    assert "secret-zzz" not in str(caught.value) and "z" not in str(caught.value).split("alphabet")[-1]
    with pytest.raises(ParameterError, match="takes a string"):
        client.report("word", 3)
    with pytest.raises(ParameterError, match="n-gram slot"):
        client.report("word.ngram0", "ab")
    with pytest.raises(ParameterError, match="slot pair"):
        client.report_together("word.pair0-1", {"word.ngram0": "ab", "word.ngram1": "ab"})
    with pytest.raises(ParameterError, match="persistent secret"):
        LdpClient(REGISTRY, _Captured()).report("word", "ab")


# ---------------------------------------------------------------------------------------------------- fold


def _fold_into(store: InMemorySketchStore, messages: list[bytes], registry: Registry, offset: int, when: int) -> int:
    folded = fold_messages(messages, np.full(len(messages), when), registry, now=when + 60)
    assert folded.rejections == []
    expected = None if offset == 0 else offset
    assert store.apply(PartitionBatch("t", 0, expected, offset + len(messages), folded.increments, folded.stats(),
                                      folded.expire_at, folded.pairs)).applied
    return offset + len(messages)


def test_a_record_counts_in_three_sketches_and_only_its_ngram_pair_in_the_pair_statistic():
    publisher = _Captured()
    metric = REGISTRY["word"]
    sent = simulate_discovery_and_publish(REGISTRY, metric, publisher, clients=500, strings=["ab", "ba"],
                                          seed=1, per_message=10, event_time=NOW)
    assert sent.records_acked == 500
    folded = fold_messages(publisher.sent, np.full(len(publisher.sent), NOW), REGISTRY, now=NOW + 60)
    assert folded.rejections == []
    assert folded.applied == {"word": 500, "word.ngram0": 500, "word.ngram1": 500}  # 2 slots: every client both
    assert folded.associated == {"word.pair0-1": 500}
    store = InMemorySketchStore(clock=lambda: NOW)
    _fold_into(store, publisher.sent, REGISTRY, 0, NOW)
    association = REGISTRY.association("word.pair0-1")
    patterns = store.pair_patterns(association, store.pair_buckets(association))
    ngram_bits = REGISTRY["word.ngram0"].mechanism.k
    assert patterns.total == 500 and patterns.reports_x.shape[1] == patterns.reports_y.shape[1] == ngram_bits


def test_a_record_without_its_rider_is_refused_whole():
    publisher = _Captured()
    simulate_discovery_and_publish(REGISTRY, REGISTRY["word"], publisher, clients=3, strings=["ab"], seed=2,
                                   event_time=NOW)
    (batch,) = decode_messages(publisher.sent[:1]).association_batches
    from ldpstream.wire import encode_association_records

    association = REGISTRY.association("word.pair0-1")
    two = encode_association_records(association.id, association.fingerprint, batch.cohorts[:, :2],
                                     list(batch.payloads[:2]), event_time=NOW)
    folded = fold_messages([two.tobytes()], np.full(1, NOW), REGISTRY, now=NOW + 60)
    assert [r.reason for r in folded.rejections] == ["payload_size"] and folded.applied == {}


# ------------------------------------------------------------------------------------------------- decoder


def test_the_retirement_rule():
    kept, retired = update_dictionary({"a": 0, "b": 0, "c": 1}, {"a", "d"}, retire_after=2)
    assert kept == {"a": 0, "d": 0, "b": 1} and retired == ["c"]
    kept, retired = update_dictionary(kept, {"b"}, retire_after=2)
    assert kept == {"b": 0, "a": 1, "d": 1} and retired == []
    kept, retired = update_dictionary(kept, {"b"}, retire_after=2)
    assert kept == {"b": 0} and retired == ["a", "d"]
    kept, retired = update_dictionary({"a": 0}, set(), retire_after=1)
    assert kept == {} and retired == ["a"]


def _service(store, registry=REGISTRY) -> DecoderService:
    return DecoderService(registry, store, metrics=DecoderMetrics(registry=CollectorRegistry()))


def test_the_failure_counters_are_declared_under_the_names_each_decode_counts_in():
    """Before any pass: the discovery metric's failures under the dictionary's counter at 0; no marginal
    counter for it nor for its n-gram metrics (decoded with it, never as marginals); a marginal's as before."""
    registry = make_registry(lang={"id": 1, "mechanism": "krr", "k": 3, "epsilon": 1.0})
    prometheus = CollectorRegistry()
    DecoderService(registry, InMemorySketchStore(clock=lambda: NOW), metrics=DecoderMetrics(registry=prometheus))
    value = prometheus.get_sample_value
    assert value("ldpstream_dictionary_decode_failures_total", {"metric": "word"}) == 0
    for other in ("word.ngram0", "word.ngram1", "lang"):
        assert value("ldpstream_dictionary_decode_failures_total", {"metric": other}) is None
    assert value("ldpstream_decode_failures_total", {"metric": "lang"}) == 0
    for name in ("word", "word.ngram0", "word.ngram1"):
        assert value("ldpstream_decode_failures_total", {"metric": name}) is None
    assert value("ldpstream_joint_decode_failures_total", {"association": "word.pair0-1"}) is None
    assert value("ldpstream_estimates_withheld", {"metric": "word"}) == 0


def test_a_string_that_fades_out_is_kept_while_it_lasts_then_retired_and_a_restart_keeps_the_dictionary():
    """Bucket 0: "ab", "ba", "bb" (geometric: .66, .25, .09); bucket 2: "ab" and "ba" only. At ε = 12 each present
    string stands tens of standard errors above zero and an absent one is called significant with probability
    about the test's level (BH at 0.10), so with the seeds below: all three are found in bucket 0; over the last
    hour "bb" misses, stays flagged for one decode with new reports, and is retired at the second
    (retire_after = 2). A decode without new reports counts for nothing."""
    store = InMemorySketchStore(clock=lambda: NOW + 3 * BUCKET)
    metric = REGISTRY["word"]
    t0, t2 = NOW - NOW % BUCKET, NOW - NOW % BUCKET + 2 * BUCKET
    publisher = _Captured()
    simulate_discovery_and_publish(REGISTRY, metric, publisher, clients=20_000, strings=["ab", "ba", "bb"],
                                   distribution="geometric", seed=3, event_time=t0 + 5,
                                   per_message=100)
    offset = _fold_into(store, publisher.sent, REGISTRY, 0, t0 + 5)
    service = _service(store)
    service.run_once(now=t0 + 60)
    first = store.latest_estimate("word", "1h")
    assert {v["value"] for v in first["values"]} == {"ab", "ba", "bb"}

    def more(clients: int, seed: int) -> None:
        nonlocal offset
        batch = _Captured()
        simulate_discovery_and_publish(REGISTRY, metric, batch, clients=clients, strings=["ab", "ba"], seed=seed,
                                       event_time=t2 + 5, per_message=100)
        offset = _fold_into(store, batch.sent, REGISTRY, offset, t2 + 5)

    more(20_000, 4)
    service.run_once(now=t2 + 60)
    fading = store.latest_estimate("word", "1h")
    entries = {e["value"]: e for e in fading["discovery"]["dictionary"]}
    assert entries["bb"] == {"value": "bb", "significant": False, "misses": 1}
    assert entries["ab"]["significant"] and entries["ba"]["significant"]
    service.run_once(now=t2 + 61)  # no new report: republished, the rule does not advance
    assert store.latest_estimate("word", "1h")["reused"] is True
    # a restarted decoder takes the dictionary up from the published estimate
    restarted = _service(store)
    more(5_000, 5)
    restarted.run_once(now=t2 + 120)
    gone = store.latest_estimate("word", "1h")
    assert gone["discovery"]["retired"] == ["bb"]
    assert {v["value"] for v in gone["values"]} == {"ab", "ba"}
    # the all window still holds bucket 0's reports: "bb" stays there
    assert "bb" in {v["value"] for v in store.latest_estimate("word", "all")["values"]}
    text = render(gone)
    assert "retired now: bb" in text


def test_the_decoder_publishes_a_dictionary_like_a_marginal():
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    sent = simulate_discovery_and_publish(REGISTRY, REGISTRY["word"], publisher, clients=30_000,
                                          strings=["ab", "ba", "abab", "bb"], seed=6, event_time=NOW, per_message=100)
    _fold_into(store, publisher.sent, REGISTRY, 0, NOW)
    service = _service(store)
    (published, *_) = [p for p in service.run_once(now=NOW + 60) if p.window == "all"]
    assert isinstance(published, PublishedDictionary)
    body = store.latest_estimate("word", "all")
    assert body["n_reports"] == 30_000 and body["method"] == "discovery/detect"
    truth = sent.true_counts / sent.true_counts.sum()
    values = {v["value"]: v for v in body["values"]}
    assert set(values) == {"ab", "ba", "abab", "bb"}
    for string, share in zip(["ab", "ba", "abab", "bb"], truth, strict=True):
        v = values[string]
        assert v["low_95"] <= v["frequency"] <= v["high_95"]
        assert abs(v["frequency"] - share) < 5 * v["std_error"]  # within its noise (Bonferroni-safe z for 4)
    assert [v["value"] for v in body["values"]] == sorted(values, key=lambda s: -values[s]["frequency"])
    assert store.latest_estimate("word.ngram0", "all") is None and service.last_failed == []
    for window in ("all", "1h"):  # the live dictionary follows its schema, as published and in the history
        for published in [store.latest_estimate("word", window), *store.estimate_history("word", window)]:
            validate(published, "dictionary/2")
            assert published["discovery"]["source"] == "live"


def test_serve_shows_the_live_dictionary_with_the_strings_drawn_and_not_its_internal_metrics():
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    sent = simulate_discovery_and_publish(REGISTRY, REGISTRY["word"], publisher, clients=20_000,
                                          strings=["ab", "ba", "abab"], seed=6, event_time=NOW, per_message=100)
    _fold_into(store, publisher.sent, REGISTRY, 0, NOW)
    store.add_string_truth("word", dict(zip(["ab", "ba", "abab"], sent.true_counts.tolist(), strict=True)))
    _service(store).run_once(now=NOW + 60)
    served = finite(LiveView(REGISTRY, store, clock=lambda: NOW + 61).estimates())
    assert set(served["metrics"]) == {"word"}  # not word.ngram0/1 nor word.pair0-1: they have no estimate
    assert set(served["metrics"]["word"]) == {"all", "1h"}
    for published in served["metrics"]["word"].values():
        validate(published, "dictionary/2")
    truth = served["truth"]["word"]
    assert truth["kind"] == "truth" and truth["n"] == 20_000
    assert {v["value"]: v["count"] for v in truth["values"]} == dict(zip(["ab", "ba", "abab"],
                                                                        sent.true_counts.tolist(), strict=True))


def test_a_permanent_response_bounds_repeated_records_and_the_strings_are_still_found():
    """``f`` in the discovery table: each report gets RAPPOR's memoized permanent response, so repeated records of
    one string spend at most the three reports' ε∞ = 2h·ln((1 − f/2)/(f/2)) each (RAPPOR, Erlingsson et al. 2014
    §3), and one record's ε stays within the total (the permanent layer only adds noise)."""
    registry = make_registry(discovery_table(f=0.25))
    pair = registry.association("word.pair0-1")
    per_report = 2 * 2 * np.log((1 - 0.125) / 0.125)  # h = 2
    assert pair.epsilon_inf == pytest.approx(3 * per_report)
    assert pair.epsilon < 12.0
    assert make_registry().association("word.pair0-1").epsilon_inf == float("inf")  # f = 0: no bound
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    simulate_discovery_and_publish(registry, registry["word"], publisher, clients=40_000, strings=["ab", "ba"],
                                   distribution="geometric", seed=8, event_time=NOW, per_message=100)
    _fold_into(store, publisher.sent, registry, 0, NOW)
    _service(store, registry).run_once(now=NOW + 60)
    assert {v["value"] for v in store.latest_estimate("word", "all")["values"]} == {"ab", "ba"}


def test_a_refresh_starts_each_slot_pair_from_its_last_table():
    # The warm start needs the refresh to find the same n-grams as the first pass, a chance event at 2,000 more
    # clients: seeds (1, 2) give that scenario (with the seeded byte stream of ldpstream.mechanisms.randomness.
    # uniform_bytes; (9, 10) did with the former Generator.bytes stream). Given it, the warm start is
    # deterministic.
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    simulate_discovery_and_publish(REGISTRY, REGISTRY["word"], publisher, clients=20_000, strings=["ab", "ba"],
                                   seed=1, event_time=NOW, per_message=100)
    offset = _fold_into(store, publisher.sent, REGISTRY, 0, NOW)
    service = _service(store)
    service.run_once(now=NOW + 60)
    assert store.latest_estimate("word", "all")["discovery"]["pair_em_warm_starts"] == 0
    more = _Captured()
    simulate_discovery_and_publish(REGISTRY, REGISTRY["word"], more, clients=2_000, strings=["ab", "ba"], seed=2,
                                   event_time=NOW, per_message=100)
    _fold_into(store, more.sent, REGISTRY, offset, NOW)
    service.run_once(now=NOW + 61)
    block = store.latest_estimate("word", "all")["discovery"]
    assert block["pair_em_warm_starts"] == 1  # the one slot pair, its n-grams unchanged


def test_a_slot_without_reports_yet_is_not_a_failed_pass():
    """Four slots, one client: it reports two of them, the other two hold no report yet (as a live window's first
    records may): the pass publishes a dictionary instead of failing (no n-gram kept there, so no clique)."""
    registry = make_registry(discovery_table(length=8))
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    simulate_discovery_and_publish(registry, registry["word"], publisher, clients=1, strings=["abab"], seed=1,
                                   event_time=NOW)
    _fold_into(store, publisher.sent, registry, 0, NOW)
    service = _service(store, registry)
    service.run_once(now=NOW + 60)
    body = store.latest_estimate("word", "all")
    assert service.last_failed == [] and body["n_reports"] == 1
    assert body["discovery"]["ngrams"].count(0) >= 2
    validate(body, "dictionary/2")


def test_a_window_where_nothing_is_found_publishes_an_empty_dictionary():
    """At ε = 0.3 and 30 clients no n-gram stands out: the dictionary is published empty, with its reports,
    rather than failing the pass."""
    registry = make_registry(discovery_table(epsilon=0.3))
    store = InMemorySketchStore(clock=lambda: NOW)
    publisher = _Captured()
    simulate_discovery_and_publish(registry, registry["word"], publisher, clients=30, strings=["ab", "ba"], seed=1,
                                   event_time=NOW)
    _fold_into(store, publisher.sent, registry, 0, NOW)
    service = _service(store, registry)
    service.run_once(now=NOW + 60)
    body = store.latest_estimate("word", "all")
    assert service.last_failed == [] and body["values"] == [] and body["n_reports"] == 30
    assert body["discovery"]["dictionary"] == [] and "0 strings" in render(body)
    validate(body, "dictionary/2")
