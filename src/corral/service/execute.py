"""``corral exec RUN -- CMD``: a command run on the run's machine through its agent
(``POST /exec``), its output passed on as it comes, its exit code returned; audited in the
run's events (``exec.started``, ``exec.finished``: who, the command, the exit code), with
every secret value of the run masked in the command, the events and the output."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from corral.errors import AgentError, BadInput
from corral.service._store import using
from corral.service.node import audit, command_text, default_actor, live_agent, run_redactor
from corral.service.views import View
from corral.store import Store

#: seconds between two reads of a command's output when the last one brought nothing
POLL_S = 0.2
#: seconds the CLI gives a command unless told (the agent's cap is 6 h)
DEFAULT_TIMEOUT_S = 600.0


class ExecResult(View):
    """How a command run on a run's machine ended (``exit_code``: 124 when it ran past its
    timeout, 130 when the caller interrupted it)."""

    run_id: str
    attempt: int
    command: str
    exit_code: int
    timed_out: bool
    interrupted: bool


def exec_command(
    ref: str,
    argv: Sequence[str],
    *,
    on_output: Callable[[str], None] = lambda _text: None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    actor: str | None = None,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    store: Store | None = None,
    node: int | None = None,
) -> ExecResult:
    """Run ``argv`` on the machine of run ``ref`` and wait for it, handing its merged output
    to ``on_output`` piece by piece (whole lines). Conflict when the run has no live machine;
    BadInput for an empty command; AgentError when the agent refuses it (its words). A
    KeyboardInterrupt kills the command and ends the call with exit code 130. ``node``: on
    that node of a multi-node run (default: the head)."""
    argv = [str(a) for a in argv]
    if not argv or not argv[0]:
        raise BadInput("give the command to run after `--`, e.g. corral exec RUN -- nvidia-smi")
    if timeout_s is not None and not timeout_s > 0:
        raise BadInput(f"--timeout must be above 0 seconds, not {timeout_s:g}")
    who = actor or default_actor()
    with using(store) as st:
        run = st.get_run(ref)
        redactor = run_redactor(run)
        agent = live_agent(st, run, node=node)
        shown = redactor.redact(command_text(argv))
        attempt = run.attempt
        try:
            command_id = agent.exec_start(argv, timeout_s)
        except AgentError as exc:
            audit(
                st,
                run,
                "exec.refused",
                f"{who} could not run: {shown} ({exc.message})",
                {"actor": who, "command": shown},
                redactor,
            )
            raise
        audit(
            st,
            run,
            "exec.started",
            f"{who} ran: {shown}",
            {"actor": who, "command": shown, "command_id": command_id}
            | ({"node": node} if node else {}),
            redactor,
        )
        offset, interrupted = 0, False
        answer: dict = {}
        try:
            while True:
                answer = agent.exec_read(command_id, offset)
                data = str(answer.get("data") or "")
                if data:
                    on_output(redactor.redact(data))
                offset = int(answer.get("next_offset") or offset)
                if answer.get("done"):
                    break
                if not data:
                    sleep(poll_s)
        except KeyboardInterrupt:
            interrupted = True
            try:
                agent.exec_kill(command_id)
            except AgentError:
                pass
        finally:
            agent.close()
        code = 130 if interrupted else int(answer.get("exit_code") or 0)
        timed_out = bool(answer.get("timed_out")) and not interrupted
        how = "interrupted" if interrupted else ("timed out" if timed_out else f"exit code {code}")
        audit(
            st,
            run,
            "exec.finished",
            f"{shown}: {how}",
            {
                "actor": who,
                "command": shown,
                "command_id": command_id,
                "exit_code": code,
                "timed_out": timed_out,
                "interrupted": interrupted,
            },
            redactor,
            attempt=attempt,
        )
    return ExecResult(
        run_id=run.id,
        attempt=attempt,
        command=shown,
        exit_code=code,
        timed_out=timed_out,
        interrupted=interrupted,
    )
