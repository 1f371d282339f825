"""Preemption: notice SIGTERM/SIGUSR1, save what fits in the grace period, exit "resume me".

The agent (or a cloud's preemption notice) sends SIGTERM and waits ``CORRAL_GRACE_SECONDS``
before SIGKILL. The handlers installed by :func:`install_signal_handlers` only record that a
signal arrived and when (no I/O, no locks, nothing else chained), so a signal can never corrupt
the state the training loop is in the middle of changing. The loop polls :func:`should_stop` or
calls :func:`exit_if_preempted` at a safe point (e.g. after the optimizer step)::

    install_signal_handlers()
    for step in range(start, total):
        train_step()
        exit_if_preempted(checkpointer, lambda: training_state(...), step=step)

:func:`exit_if_preempted` exits with :data:`corral.wire.env.EXIT_PREEMPTED` (75,
``EX_TEMPFAIL``): the controller reads it as "preempted, state saved as far as possible, start
me again", not as a crash.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from corral.errors import BadInput
from corral.sdk import distributed
from corral.wire.env import DEFAULT_GRACE_SECONDS, ENV_GRACE_SECONDS, EXIT_PREEMPTED

if TYPE_CHECKING:
    from corral.sdk.checkpoint import Checkpointer

#: Signals treated as "you are being preempted".
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

#: A new save is started only if its estimated duration times this factor, plus
#: :data:`SAFETY_SECONDS`, fits in the grace time left.
SAFETY_FACTOR = 1.5
SAFETY_SECONDS = 1.0

_signal_at: float | None = None  # time.monotonic() of the first preemption signal
_signal_num: int | None = None
_stop_reason: str | None = None
_installed: dict[int, Any] = {}  # signal number -> the handler it replaced


def _on_signal(signum: int, frame: Any) -> None:
    # Runs in the main thread between bytecodes: only record, never do I/O or take locks.
    global _signal_at, _signal_num
    if _signal_at is None:
        _signal_at = time.monotonic()
        _signal_num = signum


def install_signal_handlers() -> bool:
    """Install the SIGTERM/SIGUSR1 handlers (idempotent). Returns False, with a warning and
    nothing changed, when called outside the main thread (Python allows handlers only there).

    A handler of the script's own that is replaced (it is not chained: it will not be called)
    is named in a warning. If something replaced these handlers since, calling this again puts
    them back (:func:`uninstall_signal_handlers` still restores the ones from before the first
    call)."""
    if threading.current_thread() is not threading.main_thread():
        warnings.warn(
            "install_signal_handlers() must be called from the main thread; skipped", stacklevel=2
        )
        return False
    for sig in PREEMPTION_SIGNALS:
        if signal.getsignal(sig) is _on_signal:
            continue
        previous = signal.signal(sig, _on_signal)
        if callable(previous) and previous is not _on_signal:
            name = getattr(previous, "__qualname__", None) or repr(previous)
            warnings.warn(
                f"install_signal_handlers(): the {signal.Signals(sig).name} handler {name} is "
                "replaced and will not be called; watch corral.sdk.preempted() instead",
                stacklevel=2,
            )
        _installed.setdefault(sig, previous)
    return True


def uninstall_signal_handlers() -> None:
    """Put back the handlers that were there before :func:`install_signal_handlers`."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_installed.items()):
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        del _installed[sig]


def preempted() -> bool:
    """True once a preemption signal (SIGTERM or SIGUSR1) has arrived in this process.

    Per process: in a distributed job the ranks get the signal at slightly different moments,
    so do not end a rank's loop on it alone; :func:`exit_if_preempted` (or the HF callback)
    makes all ranks decide at the same step."""
    return _signal_at is not None


def request_stop(reason: str = "requested") -> None:
    """Ask the loop to stop at its next check (the cost meter and early stopping call this)."""
    global _stop_reason
    if _stop_reason is None:
        _stop_reason = reason


def clear_stop_request(reason: str | None = None) -> bool:
    """Withdraw a :func:`request_stop` (only when its reason is ``reason``, if given) so that a
    new training run in this process (a second ``trainer.train()``) is not stopped by the
    request of the last one. A preemption is never cleared. Returns True if one was cleared."""
    global _stop_reason
    if _stop_reason is None or (reason is not None and _stop_reason != reason):
        return False
    _stop_reason = None
    return True


def should_stop() -> bool:
    """True when this process should end its loop: preempted, or :func:`request_stop` was
    called. Per process, like :func:`preempted`: in a distributed job, stopping one rank alone
    leaves the others blocked in their next collective."""
    return _signal_at is not None or _stop_reason is not None


def should_stop_all() -> bool:
    """:func:`should_stop` agreed by every rank of a ``torch.distributed`` job: True on all
    ranks when any rank should stop (preempted, budget, early stopping), so they all leave the
    loop at the same step instead of one rank leaving the others blocked in a collective. One
    tiny all_reduce: every rank must call it at the same steps. In a single process it is
    :func:`should_stop`. A rank that was asked to stop by another reports
    ``stop_reason() == "stopped by another rank"`` unless it has a reason of its own."""
    if not distributed.is_distributed():
        return should_stop()
    global _stop_reason
    _, stop = distributed.agree_left_and_stop(None, should_stop())
    if stop and not should_stop():
        _stop_reason = "stopped by another rank"
    return stop


def stop_reason() -> str | None:
    """Why the loop should stop ("preempted", or the reason given to :func:`request_stop`)."""
    if _signal_at is not None:
        return "preempted"
    return _stop_reason


def grace_seconds(checkpointer: Checkpointer | None = None) -> float:
    """The grace period: the checkpointer's ``grace_seconds``, else ``CORRAL_GRACE_SECONDS``,
    else 30 s."""
    if checkpointer is not None and checkpointer.grace_seconds is not None:
        return float(checkpointer.grace_seconds)
    raw = os.environ.get(ENV_GRACE_SECONDS)
    if raw is None or raw.strip() == "":
        return DEFAULT_GRACE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{ENV_GRACE_SECONDS} must be a number of seconds, got {raw!r}")
    if not value >= 0:
        raise BadInput(f"{ENV_GRACE_SECONDS} must be >= 0, got {raw!r}")
    return value


def seconds_left(
    checkpointer: Checkpointer | None = None, *, clock: Callable[[], float] = time.monotonic
) -> float | None:
    """Grace time left since the preemption signal, or None when not preempted. A malformed
    ``CORRAL_GRACE_SECONDS`` is reported on stderr and the default grace period used: once
    preempted, raising would turn "resume me" (exit 75) into a crash."""
    if _signal_at is None:
        return None
    try:
        grace = grace_seconds(checkpointer)
    except BadInput as exc:
        grace = DEFAULT_GRACE_SECONDS
        print(f"corral: {exc}; using {grace:g}s", file=sys.stderr)
    return grace - (clock() - _signal_at)


def save_fits(remaining: float, estimate: float | None) -> bool:
    """Whether a save estimated at ``estimate`` seconds (None: unknown, so try) fits."""
    if remaining <= 0:
        return False
    if estimate is None:
        return True
    return estimate * SAFETY_FACTOR + SAFETY_SECONDS <= remaining


def exit_if_preempted(
    checkpointer: Checkpointer | None = None,
    state_fn: Callable[[], Any] | None = None,
    step: int | None = None,
    *,
    saving_rank: int | None = 0,
    check_every: int = 1,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return at once unless preempted. When preempted: make the save in flight durable,
    then, if the grace period left (measured from the signal) fits another save (estimated
    from the last save's duration; tried when unknown), save ``state_fn()`` as ``step`` and
    wait for it; finally exit with ``EXIT_PREEMPTED`` (:func:`exit_preempted`: also from a
    thread other than the main one). With too little time no new save is
    started; the atomic layout means a save cut short by SIGKILL leaves no torn checkpoint.
    A failing save is reported on stderr; the exit code is still 75 (the previous checkpoint
    is there to resume from).

    In a ``torch.distributed`` job of more than one rank, the ranks decide together (see
    :mod:`corral.sdk.distributed`): every call with ``step % check_every == 0`` (every call
    when ``step`` is None) is one tiny all_reduce, so all ranks stop at the same step when any
    of them was signalled, using the smallest grace time left. Only ``saving_rank`` saves
    (None: every rank, for per-rank checkpointers in different directories); all ranks wait
    at a barrier until that save is durable, then all exit 75. Every rank must call it at the
    same steps with the same ``check_every``. If the collective itself fails, a rank that was
    signalled reports it on stderr and exits 75 on its own; a rank that was not re-raises the
    error (a peer died or the network broke: a crash, not a preemption). ``saving_rank`` and ``check_every`` are ignored in a
    single process, which checks its own flag at every call."""
    if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
        raise BadInput(f"check_every must be an integer >= 1, got {check_every!r}")
    if saving_rank is not None and (
        isinstance(saving_rank, bool) or not isinstance(saving_rank, int) or saving_rank < 0
    ):
        raise BadInput(f"saving_rank must be a rank (an integer >= 0) or None, got {saving_rank!r}")
    world = distributed.world_size()
    if world > 1:
        if saving_rank is not None and saving_rank >= world:
            raise BadInput(f"saving_rank {saving_rank} is not a rank of this {world}-rank job")
        if step is None or step % check_every == 0:
            _exit_if_any_rank_preempted(checkpointer, state_fn, step, saving_rank, clock)
        return
    if _signal_at is None:
        return
    if checkpointer is not None:
        _flush(checkpointer)
        wanted = state_fn is not None and step is not None
        if wanted and checkpointer.last_saved_step != step:
            left = seconds_left(checkpointer, clock=clock)
            if left is not None and save_fits(left, checkpointer.estimated_save_seconds):
                _save_now(checkpointer, state_fn, step)  # type: ignore[arg-type]
            else:
                _say_no_time(left)
    exit_preempted()


def exit_preempted() -> NoReturn:
    """End the process with :data:`~corral.wire.env.EXIT_PREEMPTED` (75).

    In the main thread this is ``sys.exit(75)``. In any other thread ``SystemExit`` would end
    only that thread and the process would go on (and could exit 0, "done", with the training
    unfinished), so there the exit handlers are run (pending checkpoint saves, trackers, the
    process group) and the process ends with 75 at once."""
    if threading.current_thread() is threading.main_thread():
        sys.exit(EXIT_PREEMPTED)
    print(
        "corral: preempted in a thread other than the main one: ending the process (exit 75)",
        file=sys.stderr,
    )
    try:
        atexit._run_exitfuncs()  # what a normal exit runs: flush saves, finish trackers
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # exiting anyway
                pass
        os._exit(EXIT_PREEMPTED)


def _flush(checkpointer: Checkpointer) -> None:
    try:
        checkpointer.wait()
    except Exception as exc:
        print(f"corral: a checkpoint save failed during preemption: {exc}", file=sys.stderr)


def _save_now(checkpointer: Checkpointer, state_fn: Callable[[], Any], step: int) -> None:
    try:
        checkpointer.save(state_fn(), step)
        checkpointer.wait()
    except Exception as exc:
        print(f"corral: the preemption checkpoint failed: {exc}", file=sys.stderr)


def _say_no_time(left: float | None) -> None:
    print(
        f"corral: preempted with {max(left or 0.0, 0.0):.1f}s of grace left: "
        "not enough for a checkpoint, exiting without one",
        file=sys.stderr,
    )


def _say_no_agreement(exc: BaseException) -> None:
    print(
        f"corral: the ranks could not agree on preemption ({type(exc).__name__}: {exc}); "
        "exiting with the preemption code on this rank",
        file=sys.stderr,
    )


def exit_after_training(stopped_for_preemption: bool, before_exit: Callable[[], None]) -> None:
    """A trainer integration's end of training (``exit_if_preempted`` of the HF and Lightning
    callbacks), on every rank: exits with ``EXIT_PREEMPTED`` (75) after ``before_exit`` when
    training stopped because of a preemption signal (``stopped_for_preemption``) or a signal
    came since, else returns. In a distributed job the ranks decide together (one small
    all_reduce): a rank signalled after the last step the ranks agreed on makes every rank
    exit 75, not that rank alone while the others exit 0. If that collective fails, a
    signalled rank exits 75 and the others raise the error."""
    local = preempted() or stopped_for_preemption
    stop = local
    if distributed.is_distributed():
        try:
            stop = distributed.agree_seconds_left(0.0 if local else None) is not None
        except RuntimeError as exc:
            if not local:
                raise
            _say_no_agreement(exc)
    if stop:
        before_exit()
        # A live process group can abort the exit (SIGABRT, not 75): destroyed at exit, after
        # the script's own clean-up (which may destroy it itself).
        distributed.leave_at_exit()
        exit_preempted()


def _collective_failed(exc: BaseException, checkpointer: Checkpointer | None) -> NoReturn:
    _say_no_agreement(exc)
    if checkpointer is not None:
        _flush(checkpointer)
    exit_preempted()


def _exit_if_any_rank_preempted(
    checkpointer: Checkpointer | None,
    state_fn: Callable[[], Any] | None,
    step: int | None,
    saving_rank: int | None,
    clock: Callable[[], float],
) -> None:
    # Every rank runs the same collectives in the same order whatever its arguments (a rank
    # passing no checkpointer must not skip one): agree, then agree on the save, then barrier.
    try:
        left = distributed.agree_seconds_left(seconds_left(checkpointer, clock=clock))
    except RuntimeError as exc:
        if _signal_at is None:  # not preempted here: a peer died or the network broke, a crash
            if checkpointer is not None:
                _flush(checkpointer)
            raise
        _collective_failed(exc, checkpointer)
    if left is None:
        return
    agreed_at = clock()
    saver = saving_rank is None or saving_rank == distributed.rank()
    if checkpointer is not None:
        _flush(checkpointer)  # each rank its own save in flight
    state: Any = None
    if checkpointer is not None and state_fn is not None and step is not None:
        # Every rank with a checkpointer builds its state at this same point (building it may
        # be a collective, e.g. an FSDP state dict): a sharded state (DTensors) is saved by
        # every rank, each its own part of one checkpoint.
        try:
            state = state_fn()
        except Exception as exc:
            if saver:
                print(f"corral: the preemption checkpoint failed: {exc}", file=sys.stderr)
            checkpointer, state = None, None
        if state is not None and (checkpointer.sharded or _has_dtensors(state)):  # type: ignore[union-attr]
            saver = True
    wanted = saver and checkpointer is not None and state is not None
    estimate = checkpointer.estimated_save_seconds if wanted else None  # type: ignore[union-attr]
    try:
        # The time left after the flushes (the slowest rank's) and the savers' estimate, the
        # same numbers on every rank, so the decision is the same everywhere.
        left, estimate = distributed.agree_left_and_estimate(
            left - (clock() - agreed_at), estimate, contributes=wanted
        )
    except RuntimeError as exc:
        _collective_failed(exc, checkpointer)
    fits = left is not None and save_fits(left, estimate)
    if wanted and checkpointer.last_saved_step != step:  # type: ignore[union-attr]
        if fits:
            _save_now(checkpointer, lambda: state, step)  # type: ignore[arg-type]
        else:
            _say_no_time(left)
    try:
        distributed.barrier()  # no rank exits (tearing the group down) before the save is durable
    except RuntimeError as exc:
        print(f"corral: the ranks could not meet after the preemption save: {exc}", file=sys.stderr)
    # Exit 75, never an abort from a live group at interpreter exit; destroyed at exit, not
    # now, so that the script's own `finally: dist.destroy_process_group()` still works.
    distributed.leave_at_exit()
    exit_preempted()


def _has_dtensors(state: Any) -> bool:
    from corral.sdk.sharded import has_dtensors

    return has_dtensors(state)


def _reset_for_tests() -> None:
    """Forget any signal and stop request (tests only)."""
    global _signal_at, _signal_num, _stop_reason
    _signal_at = _signal_num = _stop_reason = None
