"""The decoder's worker processes (ldpstream/decoder/workers.py) when one of them hangs: it is killed when the
pass's timeout runs out, its metrics fail that pass (named in their outcome), the other worker's metrics are
published, and a new worker decodes them from the next pass. The workers decode with a stand-in decoder (the
real one is tested on Redis in tests/integration/test_decoder_workers.py): a hang needs a decode that never
ends, which no real input gives on demand."""

from __future__ import annotations

import time

from ldpstream.decoder.workers import DecoderWorkers, MetricOutcome
from ldpstream.registry import MetricConfig, Registry
from ldpstream.store.contract import StatusStore
from ldpstream.store.memory_store import InMemorySketchStore

HANG_AT = 2.0  # the pass ("now") at which metric "b" never finishes


class _HangingDecoder:
    """Decodes every metric to an empty outcome, except ``b`` at the pass ``HANG_AT``, which never ends."""

    reuse = True

    def decode_outcome(self, metric: MetricConfig, now: float | None) -> MetricOutcome:
        if metric.name == "b" and now == HANG_AT:
            time.sleep(3600)
        return MetricOutcome(metric.name)


def _make_decoder(registry: Registry, store: StatusStore, reuse: bool) -> _HangingDecoder:
    return _HangingDecoder()


def test_a_worker_that_hangs_is_killed_at_the_timeout_and_replaced() -> None:
    registry = Registry.from_dict({"metrics": {
        "a": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0},
        "b": {"id": 2, "mechanism": "krr", "k": 4, "epsilon": 1.0},
    }})
    pool = DecoderWorkers(registry, InMemorySketchStore, 2, make_decoder=_make_decoder)
    try:
        assert pool.assignment == [["a"], ["b"]]
        first = pool.decode(1.0, True)  # the workers' start (imports) falls in this pass: the default timeout
        assert {name: o.error for name, o in first.items()} == {"a": None, "b": None}
        hung = pool.pids[1]
        pool.timeout = 2.0
        started = time.monotonic()
        second = pool.decode(HANG_AT, True)
        assert time.monotonic() - started >= 2.0
        assert second["a"].error is None
        error = second["b"].error
        assert error is not None and "did not answer within 2 s and was killed" in error
        assert pool.restarts == 1 and pool.pids[1] != hung
        pool.timeout = 600.0  # the new worker starts (imports) in the next pass
        third = pool.decode(3.0, True)
        assert {name: o.error for name, o in third.items()} == {"a": None, "b": None}
    finally:
        pool.close()
