"""SIGINT (Ctrl-C) and SIGTERM in the `apportion` process: they end every command promptly, at any moment of its
start-up or run, with no traceback and no child process left running.

Imports nothing beyond the standard library (``os``, ``signal``, ``sys``, ``_thread``, ``time``): :func:`install`
runs before the command line's own imports (click, the store, a command's starlette or pyspark: up to seconds),
which a signal may interrupt.

The process's phases and what a signal does in each (``apportion.cli.run`` installs, ``apportion.cli._app`` runs the
command inside :func:`interruptible`)::

    STARTING  the CLI's imports, argument parsing      --signal--> exit at once with 128 + signal, nothing printed
              (nothing to clean up: no child, store or server exists yet)
    RUNNING   the command (inside interruptible())     --signal--> Interrupted (a KeyboardInterrupt) raised in the
              main thread: every ``with`` and ``finally`` on the way out runs (a JVM's process group is killed, a
              subprocess.run child killed, a store closed), then exit 128 + signal; a further signal during that
              clean-up is ignored (each clean-up is bounded: leaving a JVM behind is worse than a few seconds' wait)
    ENDING    flushing, the interpreter's teardown     --signal--> exit at once with 128 + signal

A command that runs until it is stopped (``worker``, ``pipeline run``, ``dashboard``, ``spark serve``, ``status
--watch``) installs its own handlers once it is up (a graceful stop) and exits 0 when a signal stops it then: being
stopped is its normal end, as a worker's graceful leave is (and systemd counts an exit of 143 as a failure). Before it
is up, or in a one-shot command, the exit code is 128 + signal (130 for SIGINT, 143 for SIGTERM), as a shell reports a
command killed by it, so that a script can tell an interrupted run from a finished one.

After an interrupted command has unwound, :func:`end_children` ends whatever child process is still running (SIGTERM,
SIGKILL after a grace): one that nothing on the way out knew about, such as the JVM that pyspark's
``launch_gateway`` was waiting for (interrupted then, pyspark neither kills it nor tells it where to report, and it
runs on for ever once its parent is gone). Linux only (it reads /proc); elsewhere it does nothing.

A signal handled where Python cannot raise (a weakref callback, a ``__del__``: importlib's module-lock clean-up
runs one during every import) would be swallowed and the command run on; :func:`install`'s unraisable hook sends it
again, to be raised at the main thread's next step. An ``except BaseException`` that swallows it in a library is
not covered.

Not covered: a signal during the interpreter's own start, before apportion's first line runs (tens of milliseconds:
Python's default handler raises KeyboardInterrupt in ``site`` or ``runpy``).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the command (a KeyboardInterrupt, so that what cleans up after Ctrl-C cleans up
    after SIGTERM too, and ``except Exception`` never swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal (130 for a KeyboardInterrupt that no signal of ours raised: Python's own SIGINT)."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


_installed = False
_raised = False  # an Interrupted was raised: the command is cleaning up
_raising = _thread.RLock()  # _raised and a signal sent again change under it (re-entrant: handlers may nest)
_previous_hook = sys.unraisablehook
_main_thread = _thread.get_ident()  # replaced by install()'s caller, the main thread
_RESEND_EVERY_S = 0.05
_RESEND_FOR_S = 10.0


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)


def _raise(signum: int, frame: FrameType | None) -> None:
    global _raised
    if _within(frame, _lost_interrupt):
        return  # raised here, it would be swallowed again: the hook's own delivery sends it on
    with _raising:
        if _raised:
            return  # a second signal while the first one's clean-up runs: let it finish
        _raised = True
    raise Interrupted(signum)


def _within(frame: FrameType | None, function: Callable[..., object]) -> bool:
    """Whether ``frame`` is ``function``'s or one of its callees'."""
    while frame is not None:
        if frame.f_code is function.__code__:
            return True
        frame = frame.f_back
    return False


def _deliver(signum: int) -> None:
    """Send ``signum`` to the main thread until :func:`_raise` has raised it (for ``_RESEND_FOR_S`` at most).

    From a thread of its own: a handler run by the sender itself (``raise_signal``, ``interrupt_main``, ``os.kill``
    of oneself all run it at once) would run it right here. To the main thread by name: a process-wide signal taken
    by another thread would leave the main thread asleep. Again and again: a signal that lands after the main
    thread's last check and before it blocks (a lock's wait, a sleep) interrupts nothing, and is seen only when the
    wait ends, for ever for a wait with no timeout; this thread takes the GIL exactly when the main thread lets it go
    to block, so the first send lands in that gap about 1 time in 30 (seen in CI beside a CPU hog)."""
    deadline = time.monotonic() + _RESEND_FOR_S
    while time.monotonic() < deadline:
        with _raising:
            if _raised:
                return
            signal.pthread_kill(_main_thread, signum)
        time.sleep(_RESEND_EVERY_S)


def _lost_interrupt(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook`` from :func:`install` on. An Interrupted raised where Python cannot raise it (a weakref
    callback, such as importlib's module-lock clean-up at the end of every import, a ``__del__``, a GC callback) is
    swallowed with an "Exception ignored in" traceback, and the command would run on, deaf to the signal (seen: a
    dashboard signalled during its imports served on). Such an Interrupted is delivered again instead
    (:func:`_deliver`), to be raised at one of the main thread's next steps; anything else goes to the hook that was
    there before. The signal delivered again may be handled at any step of this hook, its last one included (an
    exception leaving the hook is swallowed too): :func:`_raise` tells so from the interrupted frame and leaves it
    to the next delivery."""
    global _raised
    if not isinstance(unraisable.exc_value, Interrupted):
        _previous_hook(unraisable)
        return
    with _raising:
        _raised = False
    _thread.start_new_thread(_deliver, (unraisable.exc_value.signum,))


def _handle(handler: Callable[[int, FrameType | None], None]) -> None:
    for sig in SIGNALS:
        signal.signal(sig, handler)


def install() -> None:
    """The STARTING phase: a signal exits at once (call it first thing, from the main thread)."""
    global _installed, _previous_hook, _main_thread
    _main_thread = _thread.get_ident()
    _handle(_exit_now)
    _previous_hook, sys.unraisablehook = sys.unraisablehook, _lost_interrupt
    _installed = True


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """The RUNNING phase around a command: a signal raises :class:`Interrupted`; ENDING after it. Does nothing
    unless :func:`install` ran (in process, ``apportion.cli.main`` leaves the caller's handlers alone)."""
    if not _installed:
        yield
        return
    _handle(_raise)
    try:
        yield
    finally:
        _handle(_exit_now)


def _children() -> list[int]:
    """This process's running children (from /proc; none where there is no /proc)."""
    me, found = os.getpid(), []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/stat", "rb") as stat:
                        fields = stat.read().rsplit(b")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == me and fields[0] != b"Z":
                    found.append(int(entry.name))
    return found


def end_children(grace_s: float = 5.0) -> None:
    """SIGTERM to every child process still running (to its process group when it leads one: a server started in a
    session of its own), SIGKILL to what is left after ``grace_s``; each is reaped."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        children = _children()
        for pid in children:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while children and time.monotonic() < deadline:
            for pid in children:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            children = _children()
            time.sleep(0.05)  # a poll of the children's state, bounded by the deadline
        if not children:
            return


def interrupted() -> bool:
    """Whether a signal interrupted the command (:func:`interruptible`)."""
    return _raised


__all__ = ["SIGNALS", "Interrupted", "end_children", "exit_code", "install", "interruptible", "interrupted"]
