"""A test of your own pipeline against real Kafka and Redis, with the ldpstream pytest plugin's ``ldp_pipeline``
fixture (installed with ldpstream: nothing to import or register)::

    LDPSTREAM_KAFKA=127.0.0.1:39092 LDPSTREAM_REDIS=redis://127.0.0.1:36379/0 python -m pytest test_my_pipeline.py

Without those variables the plugin uses a local stack that answers (``ldpstream stack up``), or starts one with
``LDPSTREAM_SERVICES=local``. ``ldp_pipeline`` puts your metrics on a Kafka topic and a Redis key prefix of the
test's own (both deleted afterwards); ``run()`` counts every acknowledged report and decodes once.
"""

from __future__ import annotations

from collections.abc import Callable

from ldpstream.testing import Pipeline

PLANS = ["free", "pro", "team", "enterprise"]
TRUE_COUNTS = {"free": 600, "pro": 250, "team": 100, "enterprise": 50}


def test_reports_from_the_sdk_are_counted_and_decoded(ldp_pipeline: Callable[..., Pipeline]) -> None:
    # ε = 8: little noise, so that a small test can check the counts closely. A registry file works too:
    # ldp_pipeline("metrics.toml").
    pipeline = ldp_pipeline({"plan": {"mechanism": "krr", "k": 4, "epsilon": 8.0, "labels": PLANS}})
    for plan, count in TRUE_COUNTS.items():
        for _ in range(count):  # each user is a device with its own secret
            pipeline.client().report("plan", plan)

    estimate = pipeline.run()["plan"]

    total = sum(TRUE_COUNTS.values())
    assert estimate["n_reports"] == total
    counts = {v["value"]: v["frequency"] * total for v in estimate["values"]}
    for plan, count in TRUE_COUNTS.items():
        assert abs(counts[plan] - count) < 40, (plan, counts[plan], count)
