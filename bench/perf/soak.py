"""Soak: a sustained load for ``--duration`` seconds through the real processes, with the exact count checked at
the end.

Started as separate processes, as an operator runs them, on the configured Kafka and Redis (``LDPSTREAM_KAFKA``,
``LDPSTREAM_REDIS``, or ``LDPSTREAM_CONFIG``; a ``redis+cluster://`` URL works too):

- one producer: ``ldpstream produce`` at ``--rate`` reports per second for ``--duration`` seconds, gateway
  batches of ``--per-message`` reports (``--metrics`` metrics, their reports interleaved by time);
- ``--consumers`` members of one consumer group: ``ldpstream consume``;
- one decoder: ``ldpstream decode --interval`` (estimates to Redis; each pass decodes every metric);

on a fresh topic of ``--partitions`` partitions and a fresh key prefix. Every ``--sample`` seconds the script
records the lag (end offsets minus the offsets stored in Redis, in messages), the reports applied, the decoder's
last pass, and the resident memory of every process (``/proc/PID/status`` VmRSS). When the producer is done
it waits for the lag to reach 0, stops the consumers and the decoder (SIGTERM), and checks that the reports
counted in Redis equal the reports Kafka acknowledged to the producer, metric by metric, exactly.

Printed: the samples, the achieved rates, lag and memory at start and end, the exact-count check. ``--plot
FILE.png`` draws lag and memory over time (matplotlib, when installed).

    python -m bench.perf.soak --duration 600 --rate 20000 --plot bench/results/soak.png | tee bench/results/soak.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.harness import ROOT
from ldpstream.config import ServiceConfig
from ldpstream.kafka import ensure_topics
from ldpstream.registry import Registry

METRIC_TABLES = [
    ("app_language", 'mechanism = "krr"\nk = 16\nepsilon = 2.0'),
    ("font_choice", 'mechanism = "orr"\nk = 32\nepsilon = 2.0\ncohorts = 16\nsupport = 256'),
    ("screen_size", 'mechanism = "krappor"\nk = 32\nepsilon = 1.0'),
]


@dataclass
class Sample:
    t: float
    lag: int
    applied: int
    rss_mib: dict[str, float]
    decode_age: float | None


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def write_registry(path: Path, topic: str, metrics: int) -> Path:
    lines = ["[defaults]", f'topic = "{topic}"', 'windows = ["all", "1h"]', ""]
    for i, (name, table) in enumerate(METRIC_TABLES[:metrics], start=1):
        lines += [f"[metrics.{name}]", f"id = {i}", table, ""]
    path.write_text("\n".join(lines))
    return path


def produce_child(argv: list[str]) -> int:
    """``soak.py --produce NAME CLIENTS RATE PER_MESSAGE``: one metric's steady load (chunks of a fifth of a
    second's reports, so the rate holds at every sample), then its result as JSON."""
    from ldpstream.producers.loadgen import simulate_and_publish
    from ldpstream.producers.publisher import ReportPublisher

    name, clients, rate, per_message = argv[0], int(argv[1]), float(argv[2]), int(argv[3])
    config = ServiceConfig.load()
    metric = Registry.load(config.registry)[name]
    result = simulate_and_publish(metric, ReportPublisher(config.kafka), clients=clients, distribution="geometric",
                                  seed=1, per_message=per_message, rate=rate,
                                  chunk=max(per_message, int(rate / 5) // per_message * per_message))
    print(json.dumps({"metric": name, "reports_acked": result.records_acked, "seconds": result.seconds}))
    return 0


#: Every process this run started, ended on the way out whatever happens (SIGTERM, then SIGKILL).
_CHILDREN: list[subprocess.Popen[str]] = []


def end_children() -> None:
    for proc in _CHILDREN:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in _CHILDREN:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    if sys.argv[1:2] == ["--produce"]:
        return produce_child(sys.argv[2:])
    try:
        return soak()
    finally:
        end_children()


def soak() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of production")
    parser.add_argument("--rate", type=float, default=20_000.0, help="reports per second (all metrics)")
    parser.add_argument("--per-message", type=int, default=20)
    parser.add_argument("--metrics", type=int, default=2, choices=[1, 2, 3])
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--decode-interval", type=float, default=10.0)
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--drain-timeout", type=float, default=300.0, help="seconds to wait for lag 0 at the end")
    parser.add_argument("--plot", metavar="FILE.png", default=None)
    args = parser.parse_args()

    config = ServiceConfig.load()
    run_id = uuid.uuid4().hex[:8]
    topic, prefix, group = f"soak-{run_id}", f"soak:{run_id}", f"soak-{run_id}"
    folder = Path(tempfile.mkdtemp(prefix="ldpstream-soak-"))
    registry_path = write_registry(folder / "metrics.toml", topic, args.metrics)
    registry = Registry.load(registry_path)
    ensure_topics(config.kafka, [topic, f"{topic}-dlq"], partitions=args.partitions)
    store = dataclasses.replace(config.redis, prefix=prefix).store()

    env = {**os.environ, "LDPSTREAM_REGISTRY": str(registry_path), "LDPSTREAM_PREFIX": prefix,
           "LDPSTREAM_KAFKA": config.kafka.bootstrap, "LDPSTREAM_REDIS": config.redis.url,
           "OPENBLAS_NUM_THREADS": "1"}
    ldp = [sys.executable, "-m", "ldpstream"]
    logs = {name: open(folder / f"{name}.log", "w") for name in  # noqa: SIM115 (closed at the end)
            ["producer", "decoder", *(f"consumer-{i}" for i in range(args.consumers))]}
    procs: dict[str, subprocess.Popen[str]] = {}
    for i in range(args.consumers):
        procs[f"consumer-{i}"] = subprocess.Popen(
            [*ldp, "consume", "--group", group, "--dead-letter-topic", f"{topic}-dlq", "--metrics-port", "0"],
            env=env, stdout=logs[f"consumer-{i}"], stderr=subprocess.STDOUT, text=True)
        _CHILDREN.append(procs[f"consumer-{i}"])
    procs["decoder"] = subprocess.Popen(
        [*ldp, "decode", "--interval", str(args.decode_interval), "--no-kafka", "--metrics-port", "0"],
        env=env, stdout=logs["decoder"], stderr=subprocess.STDOUT, text=True)
    _CHILDREN.append(procs["decoder"])
    time.sleep(5)  # the group forms before the load starts
    # One producer process per metric, each at its share of the rate (the reports interleave on the topic).
    per_metric = args.rate / args.metrics
    clients = int(per_metric * args.duration)
    producers = {}
    for name in list(registry.metrics):
        producers[name] = subprocess.Popen(
            [sys.executable, "-m", "bench.perf.soak", "--produce", name, str(clients), str(per_metric),
             str(args.per_message)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=logs["producer"], text=True)
        _CHILDREN.append(producers[name])
    started = time.monotonic()
    probe = Consumer(config.kafka.probe(f"soak-probe-{run_id}"))
    partitions = list(range(args.partitions))

    def lag() -> int:
        stored = store.next_offsets(topic, partitions)
        ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions]
        return sum(max(end - (stored[p] or 0), 0) for p, end in zip(partitions, ends, strict=True))

    def sample() -> Sample:
        last = store.last_decode()
        pids = {name: proc.pid for name, proc in procs.items()}
        pids.update({f"producer-{n}": p.pid for n, p in producers.items() if p.poll() is None})
        return Sample(time.monotonic() - started, lag(), store.stats(topic, partitions).get("reports_applied", 0),
                      {name: rss_mib(pid) for name, pid in pids.items()},
                      None if last is None else time.time() - float(last["time"]))

    run = Run()
    print(f"# python -m bench.perf.soak --duration {args.duration:g} --rate {args.rate:g} --per-message "
          f"{args.per_message} --metrics {args.metrics} --consumers {args.consumers} --partitions "
          f"{args.partitions} --decode-interval {args.decode_interval:g}")
    print(f"# Kafka {config.kafka.bootstrap}, Redis {config.redis.safe_url}, topic {topic}, logs in {folder}")
    names = [*procs, *(f"producer-{n}" for n in producers)]
    print(f"{'t s':>6} {'lag msgs':>9} {'applied':>11} {'decode age s':>12} " +
          " ".join(f"{n + ' MiB':>18}" for n in names), flush=True)
    results: dict[str, dict[str, Any]] = {}
    drained_at = None
    while True:
        s = sample()
        run.samples.append(s)
        age = "-" if s.decode_age is None else f"{s.decode_age:.0f}"
        print(f"{s.t:6.0f} {s.lag:9,} {s.applied:11,} {age:>12} " +
              " ".join(f"{s.rss_mib.get(n, float('nan')):18.0f}" for n in names), flush=True)
        if all(p.poll() is not None for p in producers.values()):
            if not results:
                for name, p in producers.items():
                    out = p.stdout.read() if p.stdout else ""
                    if p.returncode != 0:
                        print(f"producer of {name} failed ({p.returncode}); see {folder}/producer.log")
                        return 1
                    results[name] = json.loads(out.strip().splitlines()[-1])
                produced_at = time.monotonic() - started
                drain_deadline = time.monotonic() + args.drain_timeout
            if s.lag == 0 and s.applied >= sum(r["reports_acked"] for r in results.values()):
                drained_at = time.monotonic() - started
                break
            if time.monotonic() > drain_deadline:
                print(f"lag did not reach 0 within {args.drain_timeout:g} s after the producers finished")
                break
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"{name} exited with {proc.returncode}; see {folder}/{name}.log")
                return 1
        time.sleep(args.sample)
    time.sleep(args.decode_interval + 1)  # one more decoder pass over the final counts
    end = sample()
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        proc.wait(timeout=90)
    probe.close()

    acked = {name: int(r["reports_acked"]) for name, r in results.items()}
    counted = {}
    for name in acked:
        metric = registry[name]
        mechanism = metric.mechanism
        snapshot = store.snapshot(name, metric.fingerprint, (mechanism.cohorts, mechanism.sketch_width))
        counted[name] = int(mechanism.reports_per_cohort(
            snapshot.all_time((mechanism.cohorts, mechanism.sketch_width))).sum())
    estimates = {name: store.latest_estimate(name) for name in acked}
    # Memory at the start: the first sample after the first reports were applied (imports and connections done).
    first = next((s for s in run.samples if s.applied > 0), run.samples[0])
    last = end
    total = sum(acked.values())
    print()
    seconds = max(float(r["seconds"]) for r in results.values())
    print(f"produced      {total:,} reports acknowledged in {seconds:.0f} s: {total / seconds:,.0f} reports/s "
          f"(asked {args.rate:,.0f}/s for {args.duration:g} s)")
    if drained_at is not None:
        print(f"consumed      all applied {drained_at:.0f} s after the start: {total / drained_at:,.0f} reports/s "
              f"on average; drained {drained_at - produced_at:.0f} s after the producers finished")
    lags = [s.lag for s in run.samples]
    print(f"lag           max {max(lags):,} messages, mean {sum(lags) / len(lags):,.0f}, final {last.lag:,}")
    print(f"decoder       last pass {last.decode_age:.0f} s before the end; estimates of "
          f"{sum(e is not None for e in estimates.values())} of {len(estimates)} metrics published"
          if last.decode_age is not None else "decoder       no pass recorded")
    for name in procs:
        print(f"memory        {name:<12} start (t={first.t:.0f} s) "
              f"{first.rss_mib.get(name, float('nan')):7.0f} MiB  end "
              f"{last.rss_mib.get(name, float('nan')):7.0f} MiB  max "
              f"{max(s.rss_mib.get(name, 0.0) for s in run.samples):7.0f} MiB")
    exact = all(counted[n] == acked[n] for n in acked)
    for name in acked:
        print(f"exact count   {name:<14} acknowledged {acked[name]:,}  counted {counted[name]:,}  "
              f"{'OK' if counted[name] == acked[name] else 'MISMATCH'}")
    print(f"exact-count check: {'PASS' if exact else 'FAIL'}")
    if args.plot:
        plot(run, names, Path(args.plot))
    # The run's keys and topics are left out of the shared services.
    pipe = store.client.pipeline(transaction=False)
    for key in store.client.scan_iter(f"{prefix}:*", count=1000):
        pipe.delete(key)
    pipe.execute()
    from confluent_kafka.admin import AdminClient

    AdminClient(config.kafka.admin()).delete_topics([topic, f"{topic}-dlq"])
    for log in logs.values():
        log.close()
    return 0 if exact else 1


def plot(run: Run, names: list[str], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)")
        return
    t = [s.t for s in run.samples]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 8.5), sharex=True)
    rates = [0.0] + [(b.applied - a.applied) / (b.t - a.t) for a, b in zip(run.samples, run.samples[1:], strict=False)]
    top.plot(t, rates, color="tab:blue")
    top.set_ylabel("applied (reports/s)")
    top.set_title("soak: rate applied, consumer lag and resident memory")
    top.grid(alpha=0.3)
    middle.plot(t, [s.lag for s in run.samples], color="tab:red")
    middle.set_ylabel("lag (messages)")
    middle.grid(alpha=0.3)
    for name in names:
        bottom.plot(t, [s.rss_mib.get(name, float("nan")) for s in run.samples], label=name)
    bottom.set_ylabel("RSS (MiB)")
    bottom.set_xlabel("seconds since the load started")
    bottom.legend(fontsize="small")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
