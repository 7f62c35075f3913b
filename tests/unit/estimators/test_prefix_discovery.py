"""Prefix-extension discovery (docs/math/dictionary.md#prefix-extension): the schedule and its candidates, the
compiled support count against the hash table, Benjamini–Hochberg against its definition, the deflation on an
exact sketch, and ``discover --method prefix`` end to end on a small population."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldpstream.cli import main
from ldpstream.errors import ParameterError
from ldpstream.estimators.discovery.prefixes import PrefixScheme, benjamini_hochberg, prefix_estimates
from ldpstream.estimators.numerics.support import support_counts
from ldpstream.mechanisms import PrefixOLH
from ldpstream.mechanisms.hashing import olh_keys, olh_seeds, olh_table


def test_schedule_and_candidates():
    scheme = PrefixScheme(epsilon=4.39, length=8, step=2, first=2, alphabet="ab")
    assert scheme.lengths == (2, 4, 6, 8) and scheme.groups == 4 and scheme.mechanism.k == 82
    assert scheme.extensions(2) == ["aa", "ab", "a$", "ba", "bb", "b$", "$$"]  # no pad before a character
    assert "$a" not in scheme.first_candidates() and "$$" not in scheme.first_candidates()
    assert scheme.extend(["ab", "a$"]) == ["abaa", "abab", "aba$", "abba", "abbb", "abb$", "ab$$", "a$$$"]
    with pytest.raises(ParameterError, match="must end at 8"):
        PrefixScheme(epsilon=1.0, length=8, step=4, first=2)


def test_support_counts_are_the_sketch_at_each_hashed_cell():
    rng = np.random.default_rng(0)
    cohorts, k = 97, 13
    sketch = rng.integers(0, 9, (cohorts, k)).astype(np.float64)
    values = [f"v{i}" for i in range(40)]
    table = olh_table(values, cohorts, k)
    expected = sketch[np.arange(cohorts)[:, None], table].sum(axis=0)
    assert np.array_equal(support_counts(sketch, olh_keys(values), olh_seeds(cohorts)), expected)


def test_benjamini_hochberg_is_the_step_up_rule():
    p = np.array([0.001, 0.04, 0.02, 0.9, 0.03, 0.5])
    # sorted 0.001, 0.02, 0.03, 0.04, 0.5, 0.9 against 0.1·i/6: the largest i with p_(i) ≤ 0.1·i/6 is 4
    assert sorted(benjamini_hochberg(p, 0.1).tolist()) == [0, 1, 2, 4]
    assert benjamini_hochberg(p, 0.001).tolist() == []


def test_deflation_removes_the_heavy_values_collisions():
    """An exact (expected) sketch of three heavy values: after deflation every absent candidate's estimate is 0 to
    the sketch's rounding, where the plain support estimate is off by the collisions of eq. OLH1."""
    mech = PrefixOLH(k=8, epsilon=2.0, cohorts=512, length=2, step=1, first=2, characters="abcdefghijklmnop")
    present, f = ["aa", "ab", "ba"], np.array([0.5, 0.3, 0.2])
    absent = [a + b for a in "cdefghijklmnop" for b in "abcdefghijklmnop"][:200]
    e = math.exp(2.0)
    p, q = e / (e + 7), 1 / (e + 7)
    shares = np.zeros((mech.cohorts, mech.k))
    table = mech.symbol_table(present)
    np.add.at(shares, (np.repeat(np.arange(mech.cohorts), 3), table.ravel()), np.tile(f, mech.cohorts))
    sketch = 10**6 * (q + (p - q) * shares)
    plain, _, _ = prefix_estimates(sketch, mech, 0, present + absent, deflate=0)
    deflated, null_se, se = prefix_estimates(sketch, mech, 0, present + absent)
    assert np.max(np.abs(plain[3:])) > 0.01
    assert np.max(np.abs(deflated[3:])) < 1e-9
    np.testing.assert_allclose(deflated[:3], f, atol=1e-9)
    assert np.all(null_se > 0) and np.all(se > 0)


def test_discover_prefix_method_end_to_end(tmp_path, capsys):
    strings = ["google.com", "yahoo.com", "bing.com", "duck.go", "ask.com", "aol.com"]
    path = tmp_path / "strings.txt"
    path.write_text("\n".join(strings) + "\n")
    assert main(["discover", "--simulate", "--strings", str(path), "--dist", "zipf:1", "--n", "200000",
                 "--epsilon", "4.39", "--length", "10", "--seed", "3", "--cohorts", "1024", "--alpha", "0.01",
                 "--json", "--compare"]) == 0
    out = json.loads(capsys.readouterr().out)
    found = [d["string"] for d in out["discovered"]]
    assert out["method"] == "prefix" and out["false_positives"] == 0
    assert set(found) == set(strings[:out["true_positives"]]) and out["true_positives"] >= 4
    assert {"simulate", "decode", "step_2", "step_10"} <= set(out["seconds"]) <= set(out["cpu_seconds"])
    assert out["perfect_dictionary"]["true_positives"] == len(strings)
    assert [s["length"] for s in out["steps"]] == [2, 4, 6, 8, 10]
    assert main(["discover", "--simulate", "--strings", str(path), "--mechanism", "rappor"]) != 0
    assert "--mechanism applies to --method ngram" in capsys.readouterr().err


def test_a_prefix_discovery_metric_in_the_registry():
    """One metric of prefix OLH reports, 1024 hash functions a group by default (8 × 1024 × 82 cells at length 16
    and ε = 4.39); 4096 would pass the sketch's cell limit and is refused with the count."""
    from ldpstream.errors import ConfigError
    from ldpstream.registry import Registry

    def registry(**extra: object) -> Registry:
        spec = {"method": "prefix", "epsilon": 4.39, "length": 16, **extra}
        return Registry.from_dict({"defaults": {"topic": "t"}, "metrics": {"site": {"id": 40, "discovery": spec}}})

    metric = registry()["site"]
    assert isinstance(metric.mechanism, PrefixOLH) and metric.discovers and metric.discovery is not None
    assert (metric.mechanism.groups, metric.mechanism.hashes, metric.mechanism.k) == (8, 1024, 82)
    held = registry()
    assert metric.discovery.method == "prefix" and list(held.metrics) == ["site"] and not held.associations
    with pytest.raises(ConfigError, match="2,686,976 cells"):
        registry(cohorts=4096)
    with pytest.raises(ConfigError, match="unknown setting"):
        registry(ngram=2)
    with pytest.raises(ConfigError, match="method must be"):
        registry(method="Prefix")
    with pytest.raises(ConfigError, match="candidates per prefix"):
        registry(first=4)
    with pytest.raises(ConfigError, match="discovery metric"):
        Registry.from_dict({"defaults": {"topic": "t"}, "metrics": {
            "site": {"id": 40, "retention": "2d", "discovery": {"method": "prefix", "epsilon": 4.39}},
            "os": {"id": 41, "mechanism": "krr", "k": 4, "epsilon": 1.0, "retention": "2d"}},
            "associations": {"both": {"id": 1, "metrics": ["site", "os"]}}})


def test_a_bad_value_is_refused_without_naming_it():
    mech = PrefixOLH(k=4, epsilon=1.0, cohorts=8, length=4, step=2, first=2, characters="ab")
    for bad in ("Secret@x", "a$b", b"\xff\xfe"):
        with pytest.raises(ParameterError) as caught:
            mech.padded(bad)
        assert "Secret" not in str(caught.value) and "@" not in str(caught.value)
    assert mech.padded("ab") == "ab$$" and mech.padded(b"ba") == "ba$$"
