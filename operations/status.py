"""What ``ldpstream status`` gathers: counts per metric and bucket, associations (members, summed privacy cost,
longest joint window, report tuples), offsets and lag per partition, dead letters by reason, and the last
decode."""

from __future__ import annotations

import math
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from ldpstream.config import KafkaConfig
from ldpstream.kafka import partitions_of
from ldpstream.mechanisms import Mechanism
from ldpstream.registry import Registry
from ldpstream.store.contract import StatusStore


def collect_status(registry: Registry, kafka: KafkaConfig | str, store: StatusStore) -> dict[str, Any]:
    """Counts per metric and bucket, offsets and lag per partition, dead letters by reason, last decode."""
    kafka = KafkaConfig.of(kafka)
    out: dict[str, Any] = {"metrics": {}, "associations": {}, "partitions": [], "dead_letters": {},
                           "last_decode": None}
    for metric in registry.metrics.values():
        mechanism = metric.mechanism
        snapshot = store.snapshot(metric.name, metric.fingerprint, (mechanism.cohorts, mechanism.sketch_width))
        per_bucket = {str(b): int(mechanism.reports_per_cohort(s).sum()) for b, s in sorted(snapshot.buckets.items())}
        total = int(mechanism.reports_per_cohort(snapshot.all_time((mechanism.cohorts, mechanism.sketch_width))).sum())
        out["metrics"][metric.name] = {"reports": total, "per_bucket": per_bucket,
                                       "bucket_seconds": metric.bucket_seconds,
                                       "fingerprint": f"{metric.fingerprint:08x}",
                                       "privacy": privacy_of(mechanism),
                                       "rebuilding": {str(p): until for p, until in
                                                      store.rebuilding(metric.topic).items()}}
    associated: dict[str, int] = {}
    probe = Consumer(kafka.probe("_ldpstream_status"))
    try:
        for topic in registry.topics:
            partitions = partitions_of(kafka, topic)
            stored = store.next_offsets(topic, partitions)
            for p in partitions:
                low, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                applied = stored[p]
                # Nothing applied yet: the consumer will start from the earliest offset still retained,
                # so the lag is what the partition holds now (not its end offset since creation).
                start = low if applied is None else applied
                out["partitions"].append({"topic": topic, "partition": p, "stored_offset": applied,
                                          "end_offset": high, "lag": max(high - start, 0)})
            for name, value in store.stats(topic, partitions).items():
                if name.startswith("rejected:"):
                    reason = name.split(":", 1)[1]
                    out["dead_letters"][reason] = out["dead_letters"].get(reason, 0) + value
                elif name.startswith("associated:"):
                    associated[name.split(":", 1)[1]] = associated.get(name.split(":", 1)[1], 0) + value
    finally:
        probe.close()
    for association in registry.associations.values():
        epsilon_inf = association.epsilon_inf
        out["associations"][association.name] = {
            "members": list(association.members),
            "riders": [m.name for m in association.riders],
            "fingerprint": f"{association.fingerprint:08x}",
            "privacy": {"epsilon": association.epsilon,
                        "epsilon_inf": epsilon_inf if math.isfinite(epsilon_inf) else None},
            # Pair statistics live per bucket and expire with the retention: no joint window is longer.
            "longest_window_seconds": association.longest_window_seconds,
            "windows": [w.name for w in association.windows],
            "reports": associated.get(association.name, 0),
            "buckets": store.pair_buckets(association),
        }
    last = store.last_decode()
    if last is not None:
        when = last["time"]
        out["last_decode"] = {"time": when, "seconds_ago": round(time.time() - when, 1)}
    return out


def privacy_of(mechanism: Mechanism) -> dict[str, float | None]:
    """What one client spends on the metric: ``epsilon`` for one report, ``epsilon_inf`` for any number of
    reports of one value (None: unbounded, each report spends ``epsilon`` again)."""
    epsilon_inf = mechanism.epsilon_inf
    return {"epsilon": mechanism.epsilon, "epsilon_inf": epsilon_inf if math.isfinite(epsilon_inf) else None}


def format_status(report: dict[str, Any]) -> str:
    lines = ["metrics:"]
    for name, entry in report["metrics"].items():
        privacy = entry["privacy"]
        forever = "unbounded" if privacy["epsilon_inf"] is None else f"{privacy['epsilon_inf']:g}"
        lines.append(f"  {name:<20} {entry['reports']:>12,} reports in {len(entry['per_bucket'])} bucket(s) "
                     f"of {entry['bucket_seconds']} s (fingerprint {entry['fingerprint']}); "
                     f"ε {privacy['epsilon']:g} a report, ε∞ {forever} for repeated reports of one value")
        if entry["rebuilding"]:
            lines.append(f"  {'':<20} rebuilding from Kafka: partitions {sorted(entry['rebuilding'])}")
    if report.get("associations"):
        lines.append("associations (reported together; ε by composition: the members' summed):")
        for name, entry in report["associations"].items():
            privacy = entry["privacy"]
            forever = "unbounded" if privacy["epsilon_inf"] is None else f"{privacy['epsilon_inf']:g}"
            carried = " + ".join(entry["members"])
            if entry.get("riders"):
                carried += f" (with {' + '.join(entry['riders'])} riding)"
            lines.append(f"  {name:<20} {entry['reports']:>12,} report tuples of {carried}, "
                         f"{len(entry['buckets'])} bucket(s) held; ε {privacy['epsilon']:g}, ε∞ {forever}; longest "
                         f"joint window {_duration(entry['longest_window_seconds'])} (the retention; windows "
                         f"{', '.join(entry['windows'])})")
    lines.append("partitions (offset stored in Redis / end offset / lag):")
    for p in report["partitions"]:
        stored = "-" if p["stored_offset"] is None else f"{p['stored_offset']:,}"
        lines.append(f"  {p['topic']}[{p['partition']}]  {stored:>12} / {p['end_offset']:>12,}  lag {p['lag']:,}")
    dead = report["dead_letters"]
    lines.append("dead letters: " + (", ".join(f"{k} {v:,}" for k, v in sorted(dead.items())) or "none"))
    last = report["last_decode"]
    lines.append("last decode: " + (f"{last['seconds_ago']} s ago" if last else "never"))
    return "\n".join(lines)


def _duration(seconds: int) -> str:
    """``30d``, ``12h``, ``90m`` or ``45s``: the largest unit that divides ``seconds``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
