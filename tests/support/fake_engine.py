"""A stand-in for ``docker``/``podman`` where no real engine can run (an EC2 stand-in, whose
"machine" is a process on this one): it records each call (its argv, and for ``login`` whether
the password came on stdin) as a JSON line, and for ``run`` runs the command the way the
engine would, but on this host: in ``--workdir``, with only the ``--env`` variables (a name
takes the engine's own value, ``NAME=value`` is literal) and ``PATH``.

:func:`install` writes it as an executable named ``name`` in ``directory`` (put that on PATH)
whose log is ``directory/calls.jsonl``; :func:`calls` reads the log back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: options of `run` that take a value (the others are flags)
_VALUED = {
    "--network",
    "--name",
    "--volume",
    "-v",
    "--workdir",
    "-w",
    "--env",
    "-e",
    "--gpus",
    "--device",
}


def install(directory: Path, name: str = "docker") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import fake_engine\nfake_engine.main()\n"
    )
    exe.chmod(0o755)
    return exe


def calls(directory: Path) -> list[dict]:
    log = directory / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _record(entry: dict) -> None:
    log = Path(sys.argv[0]).parent / "calls.jsonl"
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def main() -> None:
    args = sys.argv[1:]
    entry: dict = {"argv": args}
    if args[:1] == ["login"]:
        entry["stdin"] = sys.stdin.read()  # the test checks it, then forgets it
    _record(entry)
    if args[:2] == ["image", "inspect"]:
        sys.exit(1)  # never there: the agent pulls
    if args[:1] != ["run"]:
        sys.exit(0)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    workdir = None
    i = 1
    while i < len(args) and args[i].startswith("-"):
        option = args[i]
        value = args[i + 1] if option in _VALUED else None
        if option in ("--env", "-e") and value is not None:
            name, sep, literal = value.partition("=")
            if sep:
                env[name] = literal
            elif name in os.environ:
                env[name] = os.environ[name]
        if option in ("--workdir", "-w"):
            workdir = value
        i += 2 if option in _VALUED else 1
    command = args[i + 1 :]  # after the image
    if workdir:
        os.chdir(workdir)
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
