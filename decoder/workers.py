"""The decoder's worker processes (``ldpstream decode --workers N``): the metrics of a pass decoded in parallel.

A fixed share of the registry's metrics (round robin over the registry's order: metric ``i`` goes to worker
``i mod N``) is decoded by each of ``N`` persistent processes, so that each one's warm state (the previous
estimates that warm-start the iterative decoders and that unchanged windows republish, the design and factor
caches its decoder service owns, the discovery dictionaries) stays warm from one pass to the next. Each
worker opens its own store connection (``store_factory``, e.g. :meth:`ldpstream.config.RedisConfig.store`), reads
its metrics' snapshots and decodes them exactly as the single-process decoder does
(:meth:`~ldpstream.decoder.service.DecoderService.decode_outcome`), and sends the outcomes back: the published
estimates with their timings, or the failure. The parent publishes them (Redis, Kafka, Prometheus), decodes the
associations from the marginals of the same pass, and records the pass, as it does without workers.

The processes are started with the ``spawn`` method (a fresh interpreter: the parent's threads, Kafka producer and
Redis connections are not inherited), once, and reused until :meth:`DecoderWorkers.close`. A worker that dies
(killed, out of memory, a crash in native code) fails the pass for its metrics: each one is logged, counted as a
decode failure and named in the pass's record, and the worker is started again at once, so the next pass
decodes its metrics cold. A worker that does not answer within ``timeout`` seconds of the pass's start (a decode
that hangs: a store that stops answering, a solver that does not end) is killed and treated the same way, so that
one stuck metric delays the other workers' estimates by at most that long and the next pass goes on. The
in-memory store cannot be shared with other processes: workers need a store that each process can open (Redis).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Protocol

from ldpstream.registry import MetricConfig, Registry
from ldpstream.store.contract import StatusStore

if TYPE_CHECKING:
    from ldpstream.decoder.published import PublishedEstimate

log = logging.getLogger(__name__)

#: Seconds between checks that a worker still lives while its pass is awaited.
POLL_SECONDS = 0.5
#: Seconds a worker is given to exit after being asked to, before it is terminated.
CLOSE_SECONDS = 5.0
#: Default seconds a worker is given to answer a pass before it is killed (a cold pass of 1,000 metrics in one
#: process takes ≈ 85 s: bench/results/decoder_scaling.txt).
PASS_TIMEOUT_SECONDS = 600.0


@dataclass
class MetricOutcome:
    """What decoding one metric in a pass gave: its estimates and the windows without reports, whether its
    partitions are being rebuilt (``rebuilding``, as :meth:`~ldpstream.store.contract.StatusStore.rebuilding`),
    or the failure (``error``: the traceback or what happened to the worker)."""

    metric: str
    results: list[PublishedEstimate] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    rebuilding: dict[int, int] = field(default_factory=dict)
    error: str | None = None


def assign(registry: Registry, workers: int) -> list[list[str]]:
    """The metrics each worker decodes: those the decoder decodes on their own (not a discovery metric's n-gram
    slots), round robin over the registry's order."""
    names = [m.name for m in registry.metrics.values() if m.part_of is None]
    return [names[i::workers] for i in range(workers)]


class WorkerDecoder(Protocol):
    """What a worker decodes with: the decoder service's per-metric step (given by the decoder, so that this
    module does not import the service that imports it)."""

    reuse: bool

    def decode_outcome(self, metric: MetricConfig, now: float | None) -> MetricOutcome: ...


def _serve(conn: Connection, registry: Registry, store_factory: Callable[[], StatusStore], names: list[str],
           reuse: bool, make_decoder: Callable[[Registry, StatusStore, bool], WorkerDecoder]) -> None:
    """A worker's loop: for each pass (``(now, reuse)`` received), decode its metrics and send back their
    outcomes with the CPU and wall seconds the pass took; ``None`` (or the decoder process's end) ends it."""
    from ldpstream.decoder.published import PublishedEstimate

    # The decoder process decides when its workers stop (a Ctrl-C reaches the whole process group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    service = make_decoder(registry, store_factory(), reuse)
    metrics = [registry.metrics[name] for name in names]
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the decoder process is gone
            return
        if message is None:
            return
        now, service.reuse = message
        started, wall = time.process_time(), time.perf_counter()
        outcomes = [service.decode_outcome(metric, now) for metric in metrics]
        for outcome in outcomes:
            for result in outcome.results:
                if type(result) is PublishedEstimate:
                    # The JSON text of its values, the bulk of what the parent publishes, made here in parallel
                    # (it travels with the estimate: :meth:`PublishedEstimate.body`).
                    result.body()
        try:
            conn.send((outcomes, time.process_time() - started, time.perf_counter() - wall))
        except (pickle.PicklingError, TypeError, AttributeError):  # (raised before anything is sent)
            conn.send(([_sendable(o) for o in outcomes], time.process_time() - started, time.perf_counter() - wall))


def _sendable(outcome: MetricOutcome) -> MetricOutcome:
    """The outcome, or its failure when it cannot be pickled (an estimate holding something a pipe cannot carry):
    that metric fails the pass, not the worker."""
    try:
        pickle.dumps(outcome)
    except Exception:
        return MetricOutcome(outcome.metric, error="the decoder worker could not send the estimates back:\n"
                             + traceback.format_exc())
    return outcome


class DecoderWorkers:
    """``workers`` persistent processes, each decoding its fixed share of the registry's metrics (:func:`assign`)
    against its own store (``store_factory()``, called in the worker; it must be picklable). ``timeout``: seconds
    a worker is given to answer a pass before it is killed (module docstring)."""

    def __init__(self, registry: Registry, store_factory: Callable[[], StatusStore], workers: int,
                 reuse: bool = True,
                 make_decoder: Callable[[Registry, StatusStore, bool], WorkerDecoder] | None = None,
                 timeout: float = PASS_TIMEOUT_SECONDS) -> None:
        if workers < 2:
            raise ValueError(f"worker processes are for 2 or more workers, not {workers}")
        if not timeout > 0:
            raise ValueError(f"the workers' pass timeout must be positive, not {timeout}")
        self.timeout = float(timeout)
        self.registry = registry
        self.store_factory = store_factory
        self.reuse = reuse
        if make_decoder is None:
            raise ValueError("the workers need the decoder's make_decoder (a picklable module-level function)")
        self.make_decoder = make_decoder
        self.assignment = assign(registry, workers)
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[BaseProcess | None] = [None] * workers
        self._connections: list[Connection | None] = [None] * workers
        #: The CPU and the wall seconds each worker spent decoding in the last pass, and the wall seconds of the
        #: whole pass (:meth:`decode`: sending, decoding, receiving the outcomes).
        self.last_cpu: list[float] = [0.0] * workers
        self.last_wall: list[float] = [0.0] * workers
        self.last_pass_seconds = 0.0
        #: How many times a worker that died was started again.
        self.restarts = 0
        for i in range(workers):
            self._start(i)

    def _start(self, i: int) -> None:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(child, self.registry, self.store_factory, self.assignment[i], self.reuse,
                                 self.make_decoder),
            name=f"ldpstream-decoder-worker-{i}", daemon=True)
        process.start()
        child.close()
        self._processes[i], self._connections[i] = process, parent

    @property
    def pids(self) -> list[int | None]:
        return [None if p is None else p.pid for p in self._processes]

    def decode(self, now: float | None, reuse: bool,
               on_ready: Callable[[list[MetricOutcome]], None] | None = None) -> dict[str, MetricOutcome]:
        """One pass: every worker decodes its metrics at once; the outcomes by metric. A worker that died, or did
        not answer within ``timeout``, fails each of its metrics (``error`` says so) and is started again (cold).

        ``on_ready``: called with each worker's outcomes (its metrics in the registry's order) as soon as they
        arrive, the first worker to finish first, so that the caller publishes them while the others decode."""
        started = time.perf_counter()
        outcomes: dict[str, MetricOutcome] = {}

        def ready(batch: list[MetricOutcome]) -> None:
            outcomes.update((o.metric, o) for o in batch)
            if on_ready is not None:
                on_ready(batch)

        pending: dict[Connection, int] = {}
        for i, conn in enumerate(self._connections):
            assert conn is not None
            try:
                conn.send((now, reuse))
                pending[conn] = i
            except OSError:  # the worker died since the last pass
                ready(self._lost(i))
        self.last_cpu = [0.0] * len(self._processes)
        self.last_wall = [0.0] * len(self._processes)
        deadline = time.monotonic() + self.timeout
        while pending:
            answered = multiprocessing.connection.wait(
                list(pending), min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))
            for answer in answered:
                assert isinstance(answer, Connection)
                i = pending.pop(answer)
                try:
                    results, self.last_cpu[i], self.last_wall[i] = answer.recv()
                except (EOFError, OSError):  # it exited (its end of the pipe closed) before answering
                    ready(self._lost(i))
                    continue
                ready(results)
            if answered:
                continue
            for waiting, i in list(pending.items()):
                process = self._processes[i]
                if process is None or not process.is_alive():
                    if waiting.poll(0):  # it answered just before it exited: read at the next wait
                        continue
                    del pending[waiting]
                    ready(self._lost(i))
                elif time.monotonic() >= deadline:
                    process.kill()
                    del pending[waiting]
                    ready(self._lost(i, f"did not answer within {self.timeout:g} s and was killed"))
        self.last_pass_seconds = time.perf_counter() - started
        return outcomes

    @property
    def last_cpu_seconds(self) -> float:
        """The CPU seconds the workers spent on the last pass, summed over workers."""
        return sum(self.last_cpu)

    def _lost(self, i: int, what: str = "exited") -> list[MetricOutcome]:
        """Worker ``i`` died or hung (``what``): its metrics fail this pass (their outcomes, returned); a new worker
        takes them (cold) from the next."""
        process = self._processes[i]
        code = None
        if process is not None:
            process.join(1.0)
            code = process.exitcode
        happened = f"exited with code {code}" if what == "exited" else f"{what} (exit code {code})"
        error = (f"decoder worker {i} (pid {None if process is None else process.pid}) {happened} "
                 "during the pass; a new worker decodes its metrics from the next pass, cold")
        log.error("%s: metrics %s not decoded this pass", error, ", ".join(self.assignment[i]))
        failed = [MetricOutcome(name, error=error) for name in self.assignment[i]]
        conn = self._connections[i]
        if conn is not None:
            conn.close()
        self.restarts += 1
        self._start(i)
        return failed

    def close(self) -> None:
        """Ask every worker to exit, and terminate those that do not within :data:`CLOSE_SECONDS`."""
        for conn in self._connections:
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(None)
        deadline = time.monotonic() + CLOSE_SECONDS
        for process in self._processes:
            if process is not None:
                process.join(max(deadline - time.monotonic(), 0.0))
                if process.is_alive():
                    process.terminate()
                    process.join(1.0)
        for conn in self._connections:
            if conn is not None:
                conn.close()
        self._processes = [None] * len(self._processes)
        self._connections = [None] * len(self._connections)
