"""What the benchmark scripts share: the repository's paths, the "before" tree of another revision and the
worker programs run in it, the header lines of a run, wall and CPU timing, and ours printed beside a baseline.

A script that compares two trees exports the baseline revision with :func:`before_tree` (``git archive`` into a
temporary directory) and runs the same worker program, a module of bench/ run by path, in each tree with
:func:`run_worker`: the worker imports that tree's ldpstream, so the two decoders differ and the benchmark code
does not. The scripts run from the repository root as modules (``python -m bench.perf.decoder_refresh``), so
``ldpstream`` is the working tree's without ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The repository's root (the working tree the benchmarks measure as "ours").
ROOT = Path(__file__).resolve().parent.parent
#: Inputs the scripts read (bench/data/urls100.txt).
DATA = ROOT / "bench" / "data"
#: Saved outputs of the scripts, the figures bench/README.md quotes.
RESULTS = ROOT / "bench" / "results"


def git_short(ref: str = "HEAD") -> str:
    """The abbreviated commit id of ``ref`` in the repository."""
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """The command that ran this script: ``python -m MODULE ARGS`` (``argv`` or the process's arguments)."""
    return " ".join(["python", "-m", module, *(argv if argv is not None else sys.argv[1:])])


def stamp() -> str:
    """The local time and the one-minute load average, for a header line (the machine may be shared)."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S')}; load {os.getloadavg()[0]:.2f}"


def before_after(before: str) -> str:
    """The header's description of the two trees: ``before = REF (ID), after = working tree (HEAD ID)``."""
    return f"before = {before} ({git_short(before)}), after = working tree (HEAD {git_short()})"


@contextmanager
def before_tree(ref: str) -> Iterator[Path]:
    """The tree of revision ``ref``, exported with ``git archive`` into a temporary directory removed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "before.tar"
        with archive.open("wb") as fh:
            subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, stdout=fh)
        tree = Path(tmp) / "before"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree


def single_threaded(tree: Path) -> dict[str, str]:
    """The environment of a worker: ``tree`` first on the import path, one BLAS and OpenMP thread."""
    return dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run_worker(tree: Path, worker: Path, cfg: Mapping[str, object]) -> dict[str, Any]:
    """Run the worker program ``worker`` (a file of bench/) against ``tree``'s ldpstream with the JSON ``cfg``
    as its argument, single-threaded, and return the JSON object of its last line of output.

    ``python -P`` keeps the worker's own folder off the import path, so that ``tree`` (the working directory and
    ``PYTHONPATH``) alone provides ldpstream. Exits with the end of the worker's error output when it fails.
    """
    res = subprocess.run([sys.executable, "-P", str(worker), json.dumps(cfg)], env=single_threaded(tree), cwd=tree,
                         check=False, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"worker {worker.name} failed in {tree}:\n{res.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


@dataclass
class Clock:
    """Wall seconds (``perf_counter``) and CPU seconds of the process (``process_time``, every thread) of a
    block timed by :func:`timed`; on a loaded machine CPU is the figure to compare."""

    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def timed() -> Iterator[Clock]:
    """Time the ``with`` block: the :class:`Clock` yielded holds its wall and CPU seconds once the block ends."""
    clock = Clock()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield clock
    finally:
        clock.wall, clock.cpu = time.perf_counter() - wall, time.process_time() - cpu


def print_beside(before: Mapping[str, float], after: Mapping[str, float], *, label: str = "case",
                 width: int = 24, unit: str = "s") -> None:
    """Print each case of ``before`` with the baseline's figure, ours and ours / baseline, one line a case."""
    print(f"{label:<{width}} {'before ' + unit:>9} {'after ' + unit:>9} {'ratio':>6}")
    for key, b in before.items():
        a = after[key]
        print(f"{key:<{width}} {b:>9.3f} {a:>9.3f} {a / b:>6.2f}")
