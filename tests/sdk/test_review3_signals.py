"""Installing the preemption handlers when the script (or a library) has handlers of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from corral.sdk import install_signal_handlers
from corral.sdk import signals as sig
from corral.wire.env import EXIT_PREEMPTED


def test_replacing_the_scripts_own_handler_is_named_in_a_warning():
    def scripts_own_handler(signum, frame):  # pragma: no cover - never called
        pass

    before = signal.signal(signal.SIGUSR1, scripts_own_handler)
    try:
        with pytest.warns(UserWarning, match=r"SIGUSR1 handler .*scripts_own_handler"):
            install_signal_handlers()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            install_signal_handlers()  # already ours: nothing to say
        sig.uninstall_signal_handlers()
        assert signal.getsignal(signal.SIGUSR1) is scripts_own_handler  # put back
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_default_handler_is_replaced_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert install_signal_handlers() is True


RESET_BY_A_LIBRARY = textwrap.dedent(
    """
    import os, signal, sys
    from corral.sdk import exit_if_preempted, install_signal_handlers

    install_signal_handlers()
    # A library puts back what it found when it set up its own handler (e.g. the HF Trainer's
    # JIT-checkpoint callback at train end): the default, which kills the process.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    install_signal_handlers()  # e.g. the next trainer.train()'s CorralCallback
    os.kill(os.getpid(), signal.SIGTERM)
    exit_if_preempted()
    print("not preempted", flush=True)
    """
)


def test_installing_again_after_a_library_reset_the_handler_puts_it_back(tmp_path):
    script = tmp_path / "reset.py"
    script.write_text(RESET_BY_A_LIBRARY)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=20)
    assert proc.returncode == EXIT_PREEMPTED, (proc.returncode, proc.stderr)
