"""Progress of the long commands (``tune``, ``simulate``, ``discover``, ``produce``'s bar): drawn on stderr when
it is a terminal (a pty here), and nothing of it (no ``\\r``) when it is not."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from ldpstream.progress import Progress

ROOT = Path(__file__).resolve().parents[3]

COMMANDS = {
    "tune": ["tune", "--epsilon", "2", "--support", "8", "--n", "20000", "--trials", "2", "--closed"],
    "simulate": ["simulate", "--mechanism", "krr", "--epsilon", "2", "--support", "8", "--n", "20000",
                 "--trials", "5"],
    "discover": ["discover", "--simulate", "--method", "ngram", "--strings", "STRINGS", "--n", "20000", "--length", "4",
                 "--ngram", "2",
                 "--alphabet", "abcd"],
}


def _run(argv: list[str], tmp_path: Path, terminal: bool) -> tuple[int, str, bytes]:
    """Run ``ldpstream argv`` with stderr on a pty (``terminal``) or a pipe: (exit code, stdout, stderr)."""
    strings = tmp_path / "strings.txt"
    strings.write_text("abab\ncdcd\naacc\n")
    argv = [str(strings) if a == "STRINGS" else a for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "ldpstream", *argv]
    if not terminal:
        done = subprocess.run(command, env=env, capture_output=True, timeout=300, check=False)
        return done.returncode, done.stdout.decode(), done.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=slave) as process:
        os.close(slave)
        err = b""
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the pty closed: the process is gone
                    break
                if not chunk:
                    break
                err += chunk
            elif process.poll() is not None:
                break
        out = process.stdout.read().decode() if process.stdout else ""
        process.wait(timeout=300)
    os.close(master)
    return process.returncode, out, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_progress_shows_on_a_terminal(command, tmp_path):
    code, out, err = _run(COMMANDS[command], tmp_path, terminal=True)
    assert code == 0, (out, err)
    assert b"\r" in err and f"{command}: ".encode() in err, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_progress_off_a_terminal(command, tmp_path):
    code, out, err = _run(COMMANDS[command], tmp_path, terminal=False)
    assert code == 0, (out, err)
    assert b"\r" not in err and b"\r" not in out.encode(), err


def test_the_helper_draws_nothing_off_a_terminal_and_redraws_in_place_on_one():
    quiet = io.StringIO()
    with Progress("x", total=2, stream=quiet) as progress:
        progress.update(1, "a", force=True)
        progress.show("text", force=True)
    assert quiet.getvalue() == ""
    drawn = io.StringIO()
    with Progress("x", total=2, stream=drawn, enabled=True, tick=0) as progress:
        progress.update(1, "first step", force=True)
        progress.update(2, "b", force=True)
    text = drawn.getvalue()
    assert text.startswith("\rx: 1/2 [##########..........] first step  ")
    assert "\rx: 2/2 [####################] b  " in text and text.endswith("\r")  # cleared at the end
