"""The load generator behind ``ldpstream produce``: simulates a population of clients for one metric, or for an
association of metrics reported together (:func:`simulate_association_and_publish`, values drawn from a joint
table: a given one, or :func:`association_joint`'s model of marginals and a dependence).

Values are drawn from a named distribution over the metric's value list (candidates, labels or symbols),
privatized in batches with a seeded generator (simulation only: real clients use secure randomness), encoded
and published. Returns the true value counts, so tests and the demo can compare estimates with the truth.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.device import privatize_population, value_table
from ldpstream.distributions import parse_distribution
from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery import encode_population, scheme_of
from ldpstream.estimators.joint.pairs import PairPatterns
from ldpstream.producers.publisher import ReportPublisher
from ldpstream.progress import Progress
from ldpstream.registry import AssociationConfig, MetricConfig, Registry, discovery_pair_name
from ldpstream.store.truth import TruthStore
from ldpstream.wire import encode_association_records, encode_records, payloads_from_reports


@dataclass(frozen=True)
class LoadResult:
    true_counts: np.ndarray
    records_acked: int
    messages: int
    seconds: float
    #: The run ended early on an interrupt (Ctrl-C, or SIGTERM where the command makes it one).
    interrupted: bool = False

    @property
    def rate(self) -> float:
        return self.records_acked / self.seconds if self.seconds else float("nan")


def simulate_and_publish(metric: MetricConfig, publisher: ReportPublisher, *, clients: int, distribution: str,
                         seed: int | None = None, per_message: int = 1, chunk: int = 50_000,
                         rate: float | None = None, event_time: int | None = None, progress: bool = False,
                         should_stop: Callable[[], bool] | None = None,
                         on_drawn: Callable[[np.ndarray], None] | None = None) -> LoadResult:
    """Publish one report from each of ``clients`` simulated clients; waits for every acknowledgement.

    ``rate`` caps reports per second (None: as fast as Kafka takes them); ``per_message`` packs that many
    records per Kafka message (a gateway); ``event_time`` is the clients' clock (default: now, per chunk);
    ``should_stop`` ends the run early (between chunks); ``on_drawn`` receives each chunk's true value counts
    once its reports are handed to the publisher (``produce`` and ``demo`` publish them as the truth).
    """
    rng = np.random.default_rng(seed)
    names = metric.value_names()
    p = parse_distribution(distribution, len(names), rng)
    table = value_table(metric)

    def send(values: np.ndarray, when: int) -> int:
        cohorts, reports = privatize_population(metric, values, rng, table)
        rows = encode_records(metric.id, metric.fingerprint, cohorts,
                              payloads_from_reports(metric.mechanism, reports), event_time=when)
        messages = publisher.publish(metric.topic, rows, per_message=per_message)
        if on_drawn is not None:
            on_drawn(np.bincount(values, minlength=len(names)))
        return messages

    return _publish_draws(publisher, rng, p, send, clients=clients, chunk=chunk, rate=rate, event_time=event_time,
                          progress=progress, should_stop=should_stop)


@dataclass(frozen=True)
class AssociationLoadResult:
    """What :func:`simulate_association_and_publish` sent: the true joint counts (one axis per member, over each
    member's :meth:`~ldpstream.registry.MetricConfig.value_names`), what Kafka acknowledged, and (when asked, for
    two members) the report pairs sent, as the consumers should store them."""

    true_counts: np.ndarray
    records_acked: int
    messages: int
    seconds: float
    sent: PairPatterns | None = None
    interrupted: bool = False

    @property
    def rate(self) -> float:
        return self.records_acked / self.seconds if self.seconds else float("nan")


def association_joint(association: AssociationConfig, distributions: str | Sequence[str], dependence: float,
                      rng: np.random.Generator | None = None) -> np.ndarray:
    """A joint distribution of the members' values (an array with one axis per member) with the given marginal of
    the first member and a ``dependence`` in [0, 1]: with probability ``dependence`` every other member holds the
    value of the same rank as the first's (rank modulo its number of values), otherwise an independent draw
    from its own distribution. 0 is independence; 1 makes the others functions of the first.

    ``distributions``: one name for every member, or one per member (``uniform``, ``geometric``, ``zipf:A``, …).
    """
    if not 0.0 <= dependence <= 1.0:
        raise ParameterError(f"dependence must be in [0, 1], got {dependence}")
    names = [distributions] * len(association.metrics) if isinstance(distributions, str) else list(distributions)
    if len(names) != len(association.metrics):
        raise ParameterError(f"association {association.name!r}: one distribution for each of its "
                             f"{len(association.metrics)} members, got {len(names)}")
    rng = np.random.default_rng(0) if rng is None else rng
    sizes = [len(m.value_names()) for m in association.metrics]
    marginals = [parse_distribution(name, size, rng) for name, size in zip(names, sizes, strict=True)]
    independent = marginals[0]
    for p in marginals[1:]:
        independent = np.multiply.outer(independent, p)
    coupled = np.zeros(sizes)
    first = np.arange(sizes[0])
    coupled[(first, *(first % size for size in sizes[1:]))] = marginals[0]
    joint: np.ndarray = (1.0 - dependence) * independent + dependence * coupled
    return np.asarray(joint / joint.sum(), dtype=np.float64)


def simulate_association_and_publish(association: AssociationConfig, publisher: ReportPublisher, *, clients: int,
                                     joint: np.ndarray | None = None, distribution: str | Sequence[str] = "geometric",
                                     dependence: float = 0.5, seed: int | None = None, per_message: int = 1,
                                     chunk: int = 50_000, rate: float | None = None, event_time: int | None = None,
                                     progress: bool = False, should_stop: Callable[[], bool] | None = None,
                                     keep_sent: bool = False,
                                     on_drawn: Callable[[np.ndarray], None] | None = None) -> AssociationLoadResult:
    """One associated record (version 2: a report of every member) from each of ``clients`` simulated clients,
    whose tuples of values are drawn from ``joint`` (an array with one axis per member over its value names), or
    by default from :func:`association_joint` of ``distribution`` and ``dependence``. Each member's value is
    privatized with the member's mechanism as :func:`simulate_and_publish` does (each member has its own cohort
    per client). ``keep_sent`` (two members): also return the report pairs sent; ``on_drawn`` receives each
    chunk's true joint counts (one axis per member) once they are handed to the publisher. Waits for every
    acknowledgement; the other arguments are :func:`simulate_and_publish`'s."""
    rng = np.random.default_rng(seed)
    members = association.metrics
    sizes = tuple(len(m.value_names()) for m in members)
    if joint is None:
        joint = association_joint(association, distribution, dependence, rng)
    joint = np.asarray(joint, dtype=np.float64)
    if joint.shape != sizes or np.any(joint < 0) or not np.isclose(joint.sum(), 1.0):
        raise ParameterError(f"association {association.name!r}: the joint distribution must be a probability "
                             f"table of shape {sizes} (one axis per member's values), got shape {joint.shape}")
    if keep_sent and len(members) != 2:
        raise ParameterError("keep_sent returns report pairs: it needs an association of two members")
    flat = joint.reshape(-1) / joint.sum()
    tables = [value_table(m) for m in members]
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def send(drawn: np.ndarray, when: int) -> int:
        n = drawn.shape[0]
        cohorts, payloads, reports = [], [], []
        for member, member_values, table in zip(members, np.unravel_index(drawn, sizes), tables, strict=True):
            member_cohorts, member_reports = privatize_population(member, member_values, rng, table)
            cohorts.append(np.broadcast_to(np.asarray(member_cohorts), (n,)))
            reports.append(member_reports)
            payloads.append(payloads_from_reports(member.mechanism, member_reports))
        rows = encode_association_records(association.id, association.fingerprint, np.column_stack(cohorts),
                                          payloads, event_time=when)
        messages = publisher.publish(association.topic, rows, per_message=per_message)
        if on_drawn is not None:
            on_drawn(np.bincount(drawn, minlength=joint.size).reshape(sizes))
        if keep_sent:
            kept.append((cohorts[0], reports[0], cohorts[1], reports[1]))
        return messages

    loaded = _publish_draws(publisher, rng, flat, send, clients=clients, chunk=chunk, rate=rate,
                            event_time=event_time, progress=progress, should_stop=should_stop)
    patterns = None
    if keep_sent and kept:
        patterns = PairPatterns.from_pairs(*(np.concatenate([k[i] for k in kept]) for i in range(4)))
    return AssociationLoadResult(loaded.true_counts.reshape(sizes), loaded.records_acked, loaded.messages,
                                 loaded.seconds, patterns, loaded.interrupted)


def simulate_discovery_and_publish(registry: Registry, metric: MetricConfig, publisher: ReportPublisher, *,
                                   clients: int, strings: Sequence[str], distribution: str = "zipf:1",
                                   seed: int | None = None, per_message: int = 1, chunk: int = 50_000,
                                   rate: float | None = None, event_time: int | None = None, progress: bool = False,
                                   should_stop: Callable[[], bool] | None = None) -> LoadResult:
    """One discovery record from each of ``clients`` simulated clients of discovery metric ``metric``, whose
    strings are drawn from ``strings`` (in rank order) with ``distribution``: each client's two slots, its n-gram
    reports and its full-string report come from the offline simulation's vectorized encoder
    (:func:`~ldpstream.estimators.discovery.encode_population`, a seeded generator: simulation only), and travel
    as one version-2 record of the association of its slots (its n-grams paired, the full string riding), as
    :meth:`~ldpstream.producers.client.LdpClient.report` sends them. ``true_counts`` are over ``strings``; the
    other arguments are :func:`simulate_and_publish`'s."""
    if not strings:
        raise ParameterError("need at least one string to draw from")
    config = metric.discovery
    if config is not None and config.method == "prefix":
        return _publish_prefix_reports(metric, publisher, clients, strings, distribution, seed, per_message, chunk,
                                       rate, event_time, progress, should_stop)
    scheme = scheme_of(registry, metric)
    rng = np.random.default_rng(seed)
    p = parse_distribution(distribution, len(strings), rng)
    assert config is not None  # scheme_of checked it
    pairs = {(a, b): registry.association(discovery_pair_name(metric.name, a, b)) for a, b in config.slot_pairs}

    def send(values: np.ndarray, when: int) -> int:
        messages = 0
        reports = encode_population(scheme, strings, values, rng)
        low, high = reports.slots.min(axis=1), reports.slots.max(axis=1)
        first = (reports.slots[:, 0] > reports.slots[:, 1]).astype(np.int64)  # column of the lower slot
        for (a, b), association in pairs.items():
            chosen = np.flatnonzero((low == a) & (high == b))
            if not chosen.size:
                continue
            lo_col, hi_col = first[chosen], 1 - first[chosen]
            cohorts = np.column_stack([reports.ngram_cohorts[chosen, lo_col], reports.ngram_cohorts[chosen, hi_col],
                                       reports.full_cohorts[chosen]])
            payloads = [payloads_from_reports(scheme.ngram, reports.ngram_bits[chosen, lo_col]),
                        payloads_from_reports(scheme.ngram, reports.ngram_bits[chosen, hi_col]),
                        payloads_from_reports(scheme.full, reports.full_bits[chosen])]
            rows = encode_association_records(association.id, association.fingerprint, cohorts, payloads,
                                              event_time=when)
            messages += publisher.publish(association.topic, rows, per_message=per_message)
        return messages

    return _publish_draws(publisher, rng, p, send, clients=clients, chunk=chunk, rate=rate, event_time=event_time,
                          progress=progress, should_stop=should_stop)


def _publish_prefix_reports(metric: MetricConfig, publisher: ReportPublisher, clients: int, strings: Sequence[str],
                            distribution: str, seed: int | None, per_message: int, chunk: int, rate: float | None,
                            event_time: int | None, progress: bool, should_stop: Callable[[], bool] | None
                            ) -> LoadResult:
    """A prefix discovery metric's clients: each one report of its string's prefix at its cohort's group
    (:class:`~ldpstream.mechanisms.prefix_olh.PrefixOLH`, a seeded generator: simulation only)."""
    rng = np.random.default_rng(seed)
    p = parse_distribution(distribution, len(strings), rng)
    mechanism = metric.mechanism
    table = mechanism.value_table(list(strings))

    def send(values: np.ndarray, when: int) -> int:
        cohorts, reports = mechanism.encode_clients(values, rng, table=table)
        rows = encode_records(metric.id, metric.fingerprint, cohorts, payloads_from_reports(mechanism, reports),
                              event_time=when)
        return publisher.publish(metric.topic, rows, per_message=per_message)

    return _publish_draws(publisher, rng, p, send, clients=clients, chunk=chunk, rate=rate,
                          event_time=event_time, progress=progress, should_stop=should_stop)


def _publish_draws(publisher: ReportPublisher, rng: np.random.Generator, p: np.ndarray,
                   send: Callable[[np.ndarray, int], int], *, clients: int, chunk: int, rate: float | None,
                   event_time: int | None, progress: bool, should_stop: Callable[[], bool] | None) -> LoadResult:
    """The loop of the simulators: chunks of ``chunk`` clients (until ``clients``, or ``should_stop()``, or an
    interrupt: Ctrl-C, or SIGTERM where the command makes it one), each drawing its clients' values (indices into
    ``p``, their probabilities) then ``send(values, event time)``, which privatizes and publishes them and returns
    the Kafka messages it produced; paced to ``rate``, with a progress bar on a terminal (``progress``), then
    flushed. ``true_counts`` of the result are the values drawn, over ``p``'s indices; ``interrupted`` says the
    run ended early on an interrupt (what was sent is flushed and counted all the same)."""
    true_counts = np.zeros(len(p), dtype=np.int64)
    acked_before = publisher.stats.records_acked
    started = time.monotonic()
    bar = Progress("produce", clients) if progress else None
    messages = 0
    sent = 0
    interrupted = False
    try:
        while sent < clients and not (should_stop and should_stop()):
            n = min(chunk, clients - sent)
            values = rng.choice(len(p), size=n, p=p)
            messages += send(values, int(time.time()) if event_time is None else event_time)
            true_counts += np.bincount(values, minlength=len(p))
            sent += n
            _pace(publisher, sent, clients, rate=rate, bar=bar, started=started, acked_before=acked_before)
    except KeyboardInterrupt:
        interrupted = True
    acked, seconds = _finish(publisher, sent, clients, bar=bar, started=started, acked_before=acked_before)
    return LoadResult(true_counts, acked, messages, seconds, interrupted)


def _pace(publisher: ReportPublisher, sent: int, clients: int, *, rate: float | None, bar: Progress | None,
          started: float, acked_before: int) -> None:
    """Hold the send rate at ``rate`` records/s (serving delivery callbacks meanwhile) and show progress."""
    if rate:
        while (ahead := sent / rate - (time.monotonic() - started)) > 0:
            publisher.poll(min(ahead, 0.1))
            if bar is not None:
                _progress(bar, sent, clients, publisher.stats.records_acked - acked_before, time.monotonic() - started)
    if bar is not None:
        _progress(bar, sent, clients, publisher.stats.records_acked - acked_before, time.monotonic() - started)


def _finish(publisher: ReportPublisher, sent: int, clients: int, *, bar: Progress | None, started: float,
            acked_before: int) -> tuple[int, float]:
    """Flush, and return the records acknowledged since ``acked_before`` and the seconds since ``started``."""
    acked = publisher.flush().records_acked - acked_before
    seconds = time.monotonic() - started
    if bar is not None:
        _progress(bar, sent, clients, acked, seconds, force=True)
        bar.close(keep=True)
    return acked, seconds


def _progress(bar: Progress, sent: int, total: int, acked: int, seconds: float, force: bool = False) -> None:
    width = 30
    filled = int(width * sent / total) if total else width
    rate = sent / seconds if seconds else 0.0
    bar.show(f"[{'#' * filled}{'.' * (width - filled)}] {sent:>10,}/{total:,} sent  {acked:>10,} acked  "
             f"{rate:>10,.0f}/s", force=force)


def truth_recorder(store: TruthStore, name: str, members: Sequence[str] = ()) -> Callable[[np.ndarray], None]:
    """An ``on_drawn`` callback that adds each chunk's true counts to the truth the store keeps beside the
    estimates (:meth:`~ldpstream.store.truth.TruthStore.add_truth`): under ``name`` (a metric, or an
    association with its joint table) and, for an association, each member's marginal under the member's name
    (``members``, in the table's axis order). Simulations only: real clients' values are never known."""

    def record(counts: np.ndarray) -> None:
        store.add_truth(name, counts)
        for axis, member in enumerate(members):
            others = tuple(a for a in range(counts.ndim) if a != axis)
            store.add_truth(member, counts.sum(axis=others))

    return record
