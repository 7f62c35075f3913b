"""Progress of a long command on one line of stderr, drawn only when stderr is a terminal.

>>> import io
>>> with Progress("tune", total=3, stream=io.StringIO()) as progress:  # not a terminal: nothing is drawn
...     progress.update(1, "orr")
>>> progress.enabled
False

On a terminal the line is redrawn in place (``\\r``) at most every ``interval`` seconds, and a background thread
keeps its clock moving while a single step takes long; :meth:`Progress.close` clears it (or leaves its last
text, ``keep=True``). Elsewhere (a pipe, a file, a test's capture) nothing at all is written, so logs and
captured output hold no ``\\r``.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """One redrawn line ``label: done/total [bar] note  elapsed`` (or a text given to :meth:`show`).

    ``enabled`` defaults to whether ``stream`` (default stderr) is a terminal; when it is not, every method does
    nothing. ``total`` None shows the count without a bar. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 enabled: bool | None = None, interval: float = 0.2, tick: float = 0.5) -> None:
        self.label = label
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self.interval = interval
        self.done = 0
        self.note = ""
        self._text: str | None = None
        self._started = time.monotonic()
        self._drawn_at = -float("inf")
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled and tick > 0:
            self._ticker = threading.Thread(target=self._tick, args=(tick,), name="progress", daemon=True)
            self._ticker.start()

    def update(self, done: int | None = None, note: str | None = None, *, force: bool = False) -> None:
        """Set the steps done (and the note on the current step) and redraw, at most every ``interval`` s."""
        if done is not None:
            self.done = done
        if note is not None:
            self.note = note
        self._draw(force)

    def advance(self, steps: int = 1, note: str | None = None) -> None:
        """:meth:`update` with ``steps`` more done."""
        self.update(self.done + steps, note)

    def show(self, text: str, *, force: bool = False) -> None:
        """Draw ``text`` instead of the standard line (a caller's own format)."""
        self._text = text
        self._draw(force)

    def line(self) -> str:
        """The text drawn now."""
        if self._text is not None:
            return self._text
        elapsed = time.monotonic() - self._started
        count = f"{self.done:,}" if self.total is None else f"{self.done:,}/{self.total:,}"
        bar = ""
        if self.total:
            filled = min(20, 20 * self.done // self.total)
            bar = " [" + "#" * filled + "." * (20 - filled) + "]"
        note = f" {self.note}" if self.note else ""
        return f"{self.label}: {count}{bar}{note}  {elapsed:.1f} s"

    def clear(self) -> None:
        """Erase the line (before other output goes to the stream); the next update draws it again."""
        if not self.enabled:
            return
        with self._lock:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            self._width = 0
            self._drawn_at = -float("inf")

    def close(self, *, keep: bool = False) -> None:
        """Stop redrawing; clear the line, or end it with a newline after its last text (``keep``)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if not self.enabled:
            return
        with self._lock:
            if keep:
                self._write(self.line())
                self.stream.write("\n")
            elif self._width:
                self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _draw(self, force: bool) -> None:
        if not self.enabled or self._stop.is_set():
            return
        now = time.monotonic()
        if not force and now - self._drawn_at < self.interval:
            return
        with self._lock:
            self._drawn_at = now
            self._write(self.line())
            self.stream.flush()

    def _write(self, text: str) -> None:
        pad = " " * max(self._width - len(text), 0)  # cover the end of a longer line drawn before
        self.stream.write("\r" + text + pad)
        self._width = len(text)

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            if self._text is None:  # a caller's own text has no clock of ours to move
                self._draw(force=True)
