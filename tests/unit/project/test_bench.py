"""The benchmarks' layout and shared pieces: every script sits in bench/perf, bench/accuracy or bench/studies and
bench/README.md gives its `python -m` command; the decoder worker's metric mixes are valid registries and the
worker runs through the harness in a subprocess, as the benchmarks run it in each tree."""

from __future__ import annotations

from pathlib import Path

from bench.harness import ROOT, run_worker
from bench.perf.decoder_worker import refresh_mix, scaling_mix
from ldpstream.registry import Registry

BENCH = ROOT / "bench"
FOLDERS = ("perf", "accuracy", "studies")


def _scripts() -> list[Path]:
    return sorted(p for p in BENCH.glob("*/*.py") if p.name != "__init__.py" and not p.stem.endswith("_worker"))


def test_every_script_is_in_a_folder_and_has_its_command_in_the_readme():
    assert sorted(p.name for p in BENCH.glob("*.py")) == ["__init__.py", "harness.py"]
    readme = (BENCH / "README.md").read_text()
    scripts = _scripts()
    assert len(scripts) >= 20
    for path in scripts:
        folder = path.parent.name
        assert folder in FOLDERS, path
        assert (path.parent / "__init__.py").exists()
        assert f"`{path.name}`" in readme, path
        assert f"python -m bench.{folder}.{path.stem}" in readme, path


def test_the_metric_mixes_are_valid_registries():
    mix = Registry.from_dict({"metrics": refresh_mix(["project", "nnls", "mle", "ls"])})
    assert len(mix.metrics) == 100
    families = [m.mechanism.name for m in mix.metrics.values()]
    assert len(set(families)) == 5
    scaling = Registry.from_dict({"metrics": scaling_mix(10)})
    assert len(scaling.metrics) == 10
    assert {len(m.candidates) for m in scaling.metrics.values() if m.candidates is not None} == {256}


def test_the_decoder_worker_runs_through_the_harness():
    cfg = {"mix": "scaling", "store": "memory", "seed": 0, "reports": 50, "fresh": 5, "warm": 1, "metrics": 2}
    out = run_worker(ROOT, BENCH / "perf" / "decoder_worker.py", cfg)
    assert out["cold"]["estimates"] == 6  # two metrics, three windows each
    assert len(out["warm"]) == 1
    assert out["unchanged"]["bytes"] == 0  # the memory store reads nothing from Redis
