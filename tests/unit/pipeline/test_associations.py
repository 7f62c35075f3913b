"""Associations (metrics reported together): the registry's validation, the version-2 records on the wire, and
how the consumers' fold turns them into member sketches and a pair statistic, or dead letters with a reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpstream.consumers.fold import fold_messages
from ldpstream.errors import ConfigError, ParameterError, ReportFormatError
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.producers.client import LdpClient
from ldpstream.producers.loadgen import association_joint
from ldpstream.producers.publisher import DeliveryStats, ReportPublisher
from ldpstream.registry import Registry
from ldpstream.store import InMemorySketchStore, PartitionBatch
from ldpstream.store.pair_layout import layout_of
from ldpstream.wire import (
    ASSOCIATION_VERSION,
    decode_messages,
    encode_association_records,
    encode_records,
    payloads_from_reports,
    reports_from_payloads,
    symbol_payloads,
)

METRICS = {
    "lang": {"id": 1, "mechanism": "krr", "k": 6, "epsilon": 1.0},
    "font": {"id": 2, "mechanism": "orr", "k": 8, "cohorts": 4, "support": 40, "epsilon": 2.0},
    "page": {"id": 3, "mechanism": "rappor", "k": 20, "hashes": 2, "cohorts": 4, "p": 0.25, "q": 0.75, "f": 0.5},
}


def registry(associations, metrics=None, defaults=None) -> Registry:
    return Registry.from_dict({"defaults": {"retention": "30d"} if defaults is None else defaults,
                               "metrics": metrics or METRICS, "associations": associations})


REGISTRY = registry({"lang_font": {"id": 1, "metrics": ["lang", "font"], "windows": ["all", "1d"]},
                     "lang_page": {"id": 2, "metrics": ["lang", "page"], "candidates": 3}})
NOW = 1_700_000_000


# ------------------------------------------------------------------------------------------------ registry


def test_an_association_names_its_members_and_sums_their_privacy_cost():
    association = REGISTRY.association("lang_font")
    assert association.members == ("lang", "font")
    assert association.epsilon == pytest.approx(3.0)
    font = REGISTRY["font"].mechanism
    assert association.epsilon_inf == pytest.approx(REGISTRY["lang"].mechanism.epsilon_inf + font.epsilon_inf)
    assert association.candidates == 5 and REGISTRY.association("lang_page").candidates == 3
    assert association.retention_seconds == association.longest_window_seconds == 30 * 86400
    assert [w.name for w in association.windows] == ["all", "1d"]
    assert REGISTRY.associations_by_id[2].name == "lang_page"
    assert association.topic == "ldp-reports" and association.bucket_seconds == 3600


def test_the_fingerprint_covers_the_members_parameters_and_order():
    base = REGISTRY.association("lang_font").fingerprint
    changed = dict(METRICS, font={**METRICS["font"], "epsilon": 1.5})
    assert registry({"a": {"id": 1, "metrics": ["lang", "font"]}}, changed).association("a").fingerprint != base
    assert registry({"a": {"id": 1, "metrics": ["font", "lang"]}}).association("a").fingerprint != base
    assert registry({"b": {"id": 1, "metrics": ["lang", "font"], "candidates": 9}}).association("b").fingerprint \
        == base  # the decoder's settings do not change what the records mean


@pytest.mark.parametrize(("table", "message"), [
    ({"id": 1, "metrics": ["lang"]}, "2 to 8 member metrics"),
    ({"id": 1, "metrics": ["lang", "lang"]}, "may appear once"),
    ({"id": 1, "metrics": ["lang", "nope"]}, "no metric named 'nope'"),
    ({"id": 1, "metrics": "lang"}, "metrics must be a list"),
    ({"metrics": ["lang", "font"]}, "has no id"),
    ({"id": 70000, "metrics": ["lang", "font"]}, "id must be in 0..65535"),
    ({"id": 1, "metrics": ["lang", "font"], "windows": ["all", "60d"]}, "longer than the association's retention"),
    ({"id": 1, "metrics": ["lang", "font"], "retention": "60d"}, "longer than member 'lang'"),
    ({"id": 1, "metrics": ["lang", "font"], "candidates": 0}, "candidates must be a positive integer"),
    ({"id": 1, "metrics": ["lang", "font"], "colour": "red"}, "unknown setting(s) colour"),
])
def test_bad_associations_are_refused_with_a_clear_error(table, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        registry({"a": table})


def test_members_must_share_topic_and_bucket_seconds():
    other_topic = dict(METRICS, font={**METRICS["font"], "topic": "elsewhere"})
    with pytest.raises(ConfigError, match="must share one topic"):
        registry({"a": {"id": 1, "metrics": ["lang", "font"]}}, other_topic)
    other_bucket = dict(METRICS, font={**METRICS["font"], "bucket_seconds": 60})
    with pytest.raises(ConfigError, match="must share bucket_seconds"):
        registry({"a": {"id": 1, "metrics": ["lang", "font"]}}, other_bucket)


def test_associations_share_no_id_but_may_reuse_a_metric_id():
    with pytest.raises(ConfigError, match="share id 1"):
        registry({"a": {"id": 1, "metrics": ["lang", "font"]}, "b": {"id": 1, "metrics": ["lang", "page"]}})
    assert registry({"a": {"id": 3, "metrics": ["lang", "font"]}}).association("a").id == 3  # metric 3 is page


def test_members_that_keep_buckets_forever_need_the_association_to_state_a_retention():
    with pytest.raises(ConfigError, match="must expire"):
        registry({"a": {"id": 1, "metrics": ["lang", "font"]}}, defaults={})
    kept = registry({"a": {"id": 1, "metrics": ["lang", "font"], "retention": "7d"}}, defaults={})
    assert kept.association("a").retention_seconds == 7 * 86400


def test_the_shortest_member_retention_is_the_default():
    shorter = dict(METRICS, font={**METRICS["font"], "retention": "2d", "windows": ["all", "1d"]})
    assert registry({"a": {"id": 1, "metrics": ["lang", "font"]}}, shorter).association("a").retention_seconds \
        == 2 * 86400


def test_the_deployed_registry_declares_an_association():
    deployed = Registry.load("deploy/metrics.toml")
    association = deployed.association("language_by_font")
    assert association.members == ("app_language", "font_choice")
    assert association.epsilon == pytest.approx(4.0)
    with pytest.raises(ConfigError, match=r"no association named 'x'.*language_by_font"):
        deployed.association("x")


# ------------------------------------------------------------------------------------------------- wire


def _records(association_name: str, n: int, seed: int = 0, event_time: int = NOW, reg: Registry = REGISTRY):
    association = reg.association(association_name)
    rng = np.random.default_rng(seed)
    cohorts = np.column_stack([rng.integers(0, m.mechanism.cohorts, n) for m in association.metrics])
    reports = [rng.integers(0, m.mechanism.k, n) if m.mechanism.report_kind == "symbol"
               else rng.integers(0, 2, (n, m.mechanism.k)).astype(np.uint8) for m in association.metrics]
    payloads = [payloads_from_reports(m.mechanism, r) for m, r in zip(association.metrics, reports, strict=True)]
    rows = encode_association_records(association.id, association.fingerprint, cohorts, payloads, event_time)
    return association, cohorts, reports, rows


def test_a_version_2_record_round_trips_and_sits_beside_version_1_records():
    association, cohorts, reports, rows = _records("lang_page", 30)
    assert rows.shape == (30, 16 + (4 + 4) + (4 + 3))
    v1 = encode_records(1, REGISTRY["lang"].fingerprint, [0, 0], symbol_payloads([2, 5]), event_time=NOW)
    messages = [rows[:10].tobytes(), rows[10].tobytes(), v1.tobytes(), rows[11:].tobytes() + v1[0].tobytes()]
    decoded = decode_messages(messages)
    assert decoded.malformed == [] and decoded.record_count == 30 + 3
    assert sum(len(b) for b in decoded.batches) == 3
    got = sorted(decoded.association_batches, key=lambda b: b.message_index[0])
    index = np.concatenate([b.message_index for b in got])
    np.testing.assert_array_equal(index, [0] * 10 + [1] + [3] * 19)
    np.testing.assert_array_equal(np.vstack([b.cohorts for b in got]), cohorts)
    for j, member in enumerate(association.metrics):
        back = np.concatenate([reports_from_payloads(member.mechanism, b.payloads[j]) for b in got])
        np.testing.assert_array_equal(back, reports[j])
    assert all((b.association_id == 2).all() and (b.event_time == NOW).all() for b in got)


def test_the_documented_worked_example_bytes():
    deployed = Registry.load("deploy/metrics.toml")
    association = deployed.association("language_by_font")
    rows = encode_association_records(association.id, association.fingerprint, [[0, 41]],
                                      [symbol_payloads([3]), symbol_payloads([17])], event_time=NOW)
    assert rows[0, 0] == ASSOCIATION_VERSION
    # docs/report-format.md, "A version-2 record: an association of two k-RR/O-RR metrics"
    assert rows.tobytes().hex(" ") == ("02 00 00 01 48 b4 4d 26 02 00 00 10 65 53 f1 00 "
                                       "00 00 00 04 00 00 00 03 00 29 00 04 00 00 00 11")
    assert "02 00 00 01 48 b4 4d 26 02 00 00 10 65 53 f1 00 00 00 00 04 00 00 00 03 00 29 00 04 00 00 00 11" in \
        Path("docs/report-format.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda b: b.__setitem__(8, 0), "carries 0 payloads"),
    (lambda b: b.__setitem__(8, 9), "carries 9 payloads"),
    (lambda b: b.__setitem__(8, 3), "payload 2 starts beyond the record's end"),
    (lambda b: b.__setitem__(8, 1), "its 1 payloads end at byte"),
    (lambda b: b.__setitem__(9, 1), "reserved byte 9 set"),
    (lambda b: b.__setitem__(19, 200), "payload 0 declares 200 bytes beyond the record's end"),
    (lambda b: b.__setitem__(1, 4), "reserved flags set"),
])
def test_a_malformed_version_2_record_refuses_its_whole_message_with_a_reason(mutate, reason):
    _, _, _, rows = _records("lang_page", 3)
    broken = bytearray(rows[1].tobytes())
    mutate(broken)
    message = rows[0].tobytes() + bytes(broken) + rows[2].tobytes()
    decoded = decode_messages([message, rows[0].tobytes()])
    (bad,) = decoded.malformed
    assert bad.message_index == 0 and reason in bad.reason
    assert decoded.record_count == 1  # only the good message's record


def test_encoding_refuses_what_the_format_cannot_carry():
    with pytest.raises(ReportFormatError, match=r"1\.\.8 payloads"):
        encode_association_records(1, 0, np.zeros((1, 0)), [])
    with pytest.raises(ReportFormatError, match=r"cohorts must be \(n, N\)"):
        encode_association_records(1, 0, np.zeros((2, 1)), [np.zeros((2, 4)), np.zeros((2, 4))])
    with pytest.raises(ReportFormatError, match="cohort must be in"):
        encode_association_records(1, 0, [[0, 70000]], [np.zeros((1, 4)), np.zeros((1, 4))])


# --------------------------------------------------------------------------------------------------- fold


def _fold(messages, reg=REGISTRY):
    return fold_messages(messages, np.full(len(messages), NOW), reg, now=NOW + 60)


@pytest.mark.parametrize("name", ["lang_font", "lang_page"])
def test_a_record_updates_both_marginals_and_the_pair_statistic_in_one_batch(name):
    association, cohorts, reports, rows = _records(name, 400, seed=1)
    folded = _fold([rows[i:i + 7].tobytes() for i in range(0, 400, 7)])
    assert folded.rejections == []
    assert folded.applied == {m: 400 for m in association.members}
    assert folded.stats()[f"associated:{name}"] == 400
    assert folded.stats()["reports_applied"] == 800  # a report of each member
    (key,) = folded.pairs
    assert key.bucket == NOW // 3600 and folded.pairs[key].kind == layout_of(association).kind
    assert folded.pairs[key].expire_at == (NOW // 3600 + 1) * 3600 + 30 * 86400
    for j, member in enumerate(association.metrics):  # the marginal sketch is the member's own sketch
        sketch = folded.increments[next(k for k in folded.increments if k.metric == member.name and k.bucket >= 0)]
        np.testing.assert_array_equal(sketch, member.mechanism.sketch(cohorts[:, j], reports[j]))
    store = InMemorySketchStore(clock=lambda: NOW)
    assert store.apply(PartitionBatch("t", 0, None, 1, folded.increments, folded.stats(), folded.expire_at,
                                      folded.pairs)).applied
    got = store.pair_patterns(association, store.pair_buckets(association))
    want = PairPatterns.from_pairs(cohorts[:, 0], reports[0], cohorts[:, 1], reports[1])
    got = PairPatterns.from_pairs(got.cohort_x, got.reports_x, got.cohort_y, got.reports_y, got.counts)
    for column in ("cohort_x", "reports_x", "cohort_y", "reports_y", "counts"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


def test_pairs_fall_in_the_bucket_of_their_event_time():
    _, _, _, early = _records("lang_font", 5, seed=2, event_time=NOW - 3600)
    _, _, _, late = _records("lang_font", 3, seed=3, event_time=NOW)
    folded = _fold([early.tobytes(), late.tobytes()])
    assert {k.bucket: len(v.cells) and int(v.counts.sum()) for k, v in folded.pairs.items()} == {
        NOW // 3600 - 1: 5, NOW // 3600: 3}


def test_tuples_past_the_association_retention_update_the_marginals_only():
    reg = registry({"lang_font": {"id": 1, "metrics": ["lang", "font"], "windows": ["1d"], "retention": "1d"}})
    _, _, _, old = _records("lang_font", 4, seed=4, event_time=NOW - 5 * 86400, reg=reg)
    _, _, _, fresh = _records("lang_font", 2, seed=5, event_time=NOW, reg=reg)
    folded = _fold([old.tobytes(), fresh.tobytes()], reg)
    assert folded.rejections == [] and folded.applied == {"lang": 6, "font": 6}  # members keep 30 days
    assert {k.bucket: int(v.counts.sum()) for k, v in folded.pairs.items()} == {NOW // 3600: 2}


def _refusal(messages, reg=REGISTRY):
    folded = _fold(messages, reg)
    assert folded.pairs == {} and folded.applied == {}
    return [(r.message_index, r.reason) for r in folded.rejections], folded


@pytest.mark.parametrize(("edit", "reason"), [
    ("unknown", "unknown_association"),
    ("fingerprint", "fingerprint_mismatch"),
    ("cohort", "out_of_range"),
    ("symbol", "out_of_range"),
    ("padding", "out_of_range"),
])
def test_a_bad_associated_record_dead_letters_its_whole_message(edit, reason):
    _, _, _, rows = _records("lang_page", 4, seed=4)
    rows = rows.copy()
    record = rows[2]
    if edit == "unknown":
        record[2:4] = [0, 99]
    elif edit == "fingerprint":
        record[4] ^= 0xFF
    elif edit == "cohort":
        record[16 + 8:16 + 10] = [0, 4]  # page has 4 cohorts
    elif edit == "symbol":
        record[16 + 4:16 + 8] = [0, 0, 0, 6]  # lang has k = 6
    else:
        record[-1] |= 0x80  # bit 23 of a 20-bit report
    v1 = encode_records(1, REGISTRY["lang"].fingerprint, [0], symbol_payloads([1]), event_time=NOW)
    refused, _ = _refusal([rows.tobytes() + v1.tobytes()])
    assert refused == [(0, reason)]


def test_a_record_with_another_number_of_payloads_than_members_is_refused():
    association = REGISTRY.association("lang_font")
    rows = encode_association_records(association.id, association.fingerprint, [[0, 0, 0]],
                                      [symbol_payloads([1])] * 3, event_time=NOW)
    refused, _ = _refusal([rows.tobytes()])
    assert refused == [(0, "payload_size")]


def test_a_too_old_associated_record_is_refused():
    _, _, _, rows = _records("lang_font", 2, event_time=NOW - 40 * 86400)
    refused, _ = _refusal([rows.tobytes()])
    assert refused == [(0, "event_time_out_of_range")]


def test_the_stored_form_is_a_hash_of_cells_for_small_symbol_tables_and_rows_otherwise():
    assert layout_of(REGISTRY.association("lang_font")).kind == "cells"  # 6 × (4 · 8) = 192 cells
    assert layout_of(REGISTRY.association("lang_page")).kind == "rows"  # bits
    assert layout_of(REGISTRY.association("lang_page")).row_size == (2 + 4) + (2 + 3)
    wide_font = {**METRICS["font"], "cohorts": 64, "k": 32, "support": 256}
    wide = dict(METRICS, font=wide_font, font2={**wide_font, "id": 4})
    metrics_pair = registry({"a": {"id": 1, "metrics": ["lang", "font"]},  # 6 · 64 · 32 = 12,288 cells
                             "b": {"id": 2, "metrics": ["font", "font2"]}}, wide)  # (64 · 32)² = 4,194,304 cells
    assert layout_of(metrics_pair.association("a")).kind == "cells"
    assert layout_of(metrics_pair.association("b")).kind == "rows"
    assert layout_of(metrics_pair.association("b")).row_size == 2 * (2 + 4)


# ------------------------------------------------------------------------------------------------ loadgen


def test_the_association_model_keeps_the_first_marginal_and_reaches_independence_at_zero():
    association = REGISTRY.association("lang_font")
    for dependence in (0.0, 0.4, 1.0):
        joint = association_joint(association, "geometric", dependence)
        assert joint.shape == (6, 40) and joint.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(joint.sum(axis=1), association_joint(association, "geometric", 0.0).sum(axis=1))
    independent = association_joint(association, "geometric", 0.0)
    np.testing.assert_allclose(independent, np.outer(independent.sum(axis=1), independent.sum(axis=0)))
    with pytest.raises(ParameterError, match="dependence"):
        association_joint(association, "geometric", 1.5)


def test_gateway_batches_of_associated_records_fold_exactly():
    _, cohorts, reports, rows = _records("lang_font", 20_000, seed=5)
    folded = _fold([rows.tobytes()[i:i + 100 * rows.shape[1]] for i in range(0, rows.size, 100 * rows.shape[1])])
    (increment,) = folded.pairs.values()
    assert int(increment.counts.sum()) == 20_000
    layout = layout_of(REGISTRY.association("lang_font"))
    cells = np.ravel_multi_index((cohorts[:, 0], reports[0], cohorts[:, 1], reports[1]), layout.dims)
    distinct, counts = np.unique(cells, return_counts=True)
    np.testing.assert_array_equal(increment.cells, distinct)
    np.testing.assert_array_equal(increment.counts, counts)


# ------------------------------------------------------------------------------------------------- client


class _Captured(ReportPublisher):
    """A publisher that keeps what it is given (the client's encoding is under test, not Kafka)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, np.ndarray]] = []
        self.stats = DeliveryStats()

    def publish(self, topic, rows, per_message=1, key=None):
        self.sent.append((topic, np.array(rows)))
        return 1


def test_report_together_privatizes_each_member_as_its_own_report_would():
    secret = bytes(range(32))
    together = LdpClient(REGISTRY, _Captured(), secret=secret)
    assert together.report_together("lang_font", {"font": 5, "lang": 2}, event_time=NOW)
    ((topic, rows),) = together.publisher.sent
    assert topic == "ldp-reports"
    (batch,) = decode_messages([rows.tobytes()]).association_batches
    association = REGISTRY.association("lang_font")
    assert batch.association_id.tolist() == [association.id] and batch.fingerprint.tolist() == [association.fingerprint]
    alone = LdpClient(REGISTRY, _Captured(), secret=secret)  # the same device reporting each metric alone
    for j, name in enumerate(association.members):
        alone.report(name, {"lang": 2, "font": 5}[name], event_time=NOW)
        (single,) = decode_messages([alone.publisher.sent[-1][1].tobytes()]).batches
        assert batch.cohorts[0, j] == single.cohort[0]  # the member's own cohort, derived from the secret


def test_report_together_is_once_per_bucket_for_the_association_and_its_members():
    client = LdpClient(REGISTRY, _Captured(), secret=bytes(32))
    assert client.report_together("lang_font", {"lang": 1, "font": 1}, event_time=NOW)
    assert not client.report_together("lang_font", {"lang": 1, "font": 1}, event_time=NOW)
    assert not client.report("lang", 1, event_time=NOW)  # lang was reported in this bucket, within the pair
    later = NOW + 3600
    assert client.report("font", 3, event_time=later)
    assert not client.report_together("lang_font", {"lang": 1, "font": 1}, event_time=later)
    assert len([r for _, r in client.publisher.sent if r[0, 0] == ASSOCIATION_VERSION]) == 1


def test_report_together_needs_one_value_per_member():
    client = LdpClient(REGISTRY, _Captured(), secret=bytes(32))
    with pytest.raises(ParameterError, match=r"one value for each of its members \['lang', 'font'\]"):
        client.report_together("lang_font", {"lang": 1})
    with pytest.raises(ConfigError, match="no association named"):
        client.report_together("nope", {})


def test_an_association_of_three_members_is_carried_folded_stored_and_read_pair_by_pair():
    reg = registry({"three": {"id": 5, "metrics": ["lang", "font", "page"]}})
    association = reg.association("three")
    assert association.epsilon == pytest.approx(sum(m.mechanism.epsilon for m in association.metrics))
    rng = np.random.default_rng(6)
    cohorts = np.column_stack([rng.integers(0, m.mechanism.cohorts, 50) for m in association.metrics])
    reports = [rng.integers(0, 6, 50), rng.integers(0, 8, 50), rng.integers(0, 2, (50, 20)).astype(np.uint8)]
    payloads = [payloads_from_reports(m.mechanism, r) for m, r in zip(association.metrics, reports, strict=True)]
    rows = encode_association_records(5, association.fingerprint, cohorts, payloads, NOW)
    folded = _fold([rows.tobytes()], reg)
    assert folded.rejections == [] and folded.applied == {"lang": 50, "font": 50, "page": 50}
    (increment,) = folded.pairs.values()
    assert increment.rows is not None and increment.rows.shape == (50, layout_of(association).row_size)
    store = InMemorySketchStore(clock=lambda: NOW)
    assert store.apply(PartitionBatch("t", 0, None, 1, folded.increments, folded.stats(), folded.expire_at,
                                      folded.pairs)).applied
    assert store.pair_buckets(association) == [NOW // 3600]
    with pytest.raises(ParameterError, match="has 3 members: name the two"):
        store.pair_patterns(association, [NOW // 3600])
    for i, j in [(0, 1), (0, 2), (1, 2)]:  # every member pair is read from the stored triples
        pairs = store.pair_patterns(association, [NOW // 3600], members=(i, j))
        want = PairPatterns.from_pairs(cohorts[:, i], reports[i], cohorts[:, j], reports[j])
        for column in ("cohort_x", "reports_x", "cohort_y", "reports_y", "counts"):
            np.testing.assert_array_equal(getattr(PairPatterns.from_pairs(
                pairs.cohort_x, pairs.reports_x, pairs.cohort_y, pairs.reports_y, pairs.counts), column),
                getattr(want, column))


def test_association_settings_name_the_association_in_errors():
    with pytest.raises(ConfigError, match="association 'a': id must be an integer"):
        registry({"a": {"id": "one", "metrics": ["lang", "font"]}})
    with pytest.raises(ConfigError, match="association 'a': retention must be a duration"):
        registry({"a": {"id": 1, "metrics": ["lang", "font"], "retention": "all"}})
