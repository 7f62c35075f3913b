"""Ctrl-C (SIGINT) and SIGTERM as a request to stop, for the commands that must end cleanly (``demo``,
``produce``): the first signal sets :attr:`Interrupts.requested`, which the command's loop checks; a second one
raises KeyboardInterrupt (the user insists). :attr:`Interrupts.exit_code` is 128 + the first signal's number
(130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class Interrupts:
    """Within ``with Interrupts() as interrupts:`` SIGINT and SIGTERM set ``interrupts.requested``; the previous
    handlers come back on exit. Outside the main thread (where Python cannot take signals) it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """128 + the number of the first signal received; 0 when none was."""
        return 0 if self.signal is None else 128 + self.signal

    @property
    def name(self) -> str:
        return "" if self.signal is None else signal.Signals(self.signal).name

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.signal = number
        self.requested.set()

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()
