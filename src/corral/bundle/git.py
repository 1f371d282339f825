"""git for code that comes from a repository: resolve a ref (the controller), check a commit
out (the node), the state and the diff of a local checkout.

A token never appears on a command line or in a URL: it goes to git as an HTTP header through
``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` in git's environment, and
every message is cleaned of it. git never prompts (``GIT_TERMINAL_PROMPT=0``).
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from corral.errors import BadInput

TIMEOUT_S = 600.0
_FULL_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def auth_env(base: Mapping[str, str], token: str | None) -> dict[str, str]:
    """``base`` plus what makes git non-interactive and, with ``token``, sends it as HTTP
    basic auth (``x-access-token:<token>``, which GitHub, GitLab and Gitea accept)."""
    env = {k: v for k, v in base.items() if not k.startswith("GIT_CONFIG_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update(
            {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            }
        )
    return env


def _clean(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run(
    args: list[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    token: str | None = None,
    input: bytes | None = None,
    timeout: float = TIMEOUT_S,
) -> str:
    """``git ARGS``' output; :class:`BadInput` with git's last line of error otherwise."""
    secrets = [token] if token else []
    if token:
        secrets.append(base64.b64encode(f"x-access-token:{token}".encode()).decode())
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=dict(env),
            input=input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise BadInput("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise BadInput(f"git {args[0]} took more than {timeout:.0f}s") from None
    if done.returncode != 0:
        why = _clean(done.stderr.decode("utf-8", "replace"), secrets) or f"exit {done.returncode}"
        raise BadInput(f"git {args[0]} failed: {why}")
    return done.stdout.decode("utf-8", "replace")


def is_full_sha(ref: str) -> bool:
    return bool(_FULL_SHA.match(ref))


def resolve(url: str, ref: str | None, *, token: str | None = None) -> str:
    """The commit ``ref`` (a branch, a tag, a full refname or a full commit; None: the
    remote's default branch) names in ``url`` now."""
    if ref and is_full_sha(ref):
        return ref
    env = auth_env(os.environ, token)
    wanted = ref or "HEAD"
    patterns = [wanted] if wanted == "HEAD" else [wanted, wanted + "^{}"]  # + a peeled tag
    out = run(["ls-remote", "--", url, *patterns], env=env, token=token, timeout=120)
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if sha and name:
            refs[name.strip()] = sha.strip()
    for name in (
        f"refs/tags/{wanted}^{{}}",
        f"refs/tags/{wanted}",
        f"refs/heads/{wanted}",
        wanted,
    ):
        if name in refs:
            return refs[name]
    if re.fullmatch(r"[0-9a-f]{7,39}", wanted):
        raise BadInput(f"code.ref {wanted!r}: give the full commit (40 hex digits)")
    raise BadInput(f"code.ref {wanted!r} is not a branch or tag of {url}")


def checkout(url: str, commit: str, workdir: str, *, token: str | None = None) -> None:
    """``workdir`` (existing files kept) checked out at ``commit`` of ``url``: a shallow fetch
    of that commit, or a full fetch where the server does not serve single commits."""
    env = auth_env(os.environ, token)
    run(["init", "-q", workdir], env=env)
    try:
        run(["fetch", "-q", "--depth", "1", "--", url, commit], env=env, cwd=workdir, token=token)
    except BadInput:
        run(
            [
                "fetch",
                "-q",
                "--",
                url,
                "+refs/heads/*:refs/remotes/origin/*",
                "+refs/tags/*:refs/tags/*",
            ],
            env=env,
            cwd=workdir,
            token=token,
        )
    run(["checkout", "-q", "-f", commit], env=env, cwd=workdir)


def apply_diff(workdir: str, diff: bytes) -> None:
    """Apply a binary diff made by :func:`local_diff` in ``workdir``."""
    env = auth_env(os.environ, None)
    run(["apply", "--whitespace=nowarn", "--binary", "-"], env=env, cwd=workdir, input=diff)


@dataclass(frozen=True)
class LocalState:
    """A local checkout: its top directory, HEAD commit, whether tracked files changed, and
    how many untracked (not ignored) files it has."""

    toplevel: str
    commit: str
    dirty: bool
    untracked: int


def local_state(path: str) -> LocalState | None:
    """The checkout holding ``path``; None if it is not in one (or git is missing)."""
    env = auth_env(os.environ, None)
    try:
        top = run(["rev-parse", "--show-toplevel"], env=env, cwd=path, timeout=30).strip()
        head = run(["rev-parse", "--verify", "-q", "HEAD"], env=env, cwd=path, timeout=30).strip()
        changes = run(["status", "--porcelain", "-z"], env=env, cwd=path, timeout=60)
    except (BadInput, OSError):
        return None
    entries = [e for e in changes.split("\0") if e]
    untracked = sum(1 for e in entries if e.startswith("??"))
    return LocalState(top, head, dirty=len(entries) > untracked, untracked=untracked)


def local_diff(path: str, commit: str) -> bytes:
    """The changes of tracked files of the checkout holding ``path`` against ``commit`` (a
    binary patch, relative to the checkout's top), :class:`BadInput` if ``commit`` is not in
    the local repository."""
    env = auth_env(os.environ, None)
    try:
        run(["cat-file", "-e", f"{commit}^{{commit}}"], env=env, cwd=path, timeout=30)
    except BadInput:
        raise BadInput(
            f"code.local_changes 'diff': commit {commit[:12]} is not in the local repository "
            "(fetch it first)"
        ) from None
    try:
        done = subprocess.run(
            ["git", "diff", "--binary", "--no-color", "--no-ext-diff", commit, "--"],
            cwd=path,
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BadInput(f"git diff failed: {type(exc).__name__}") from None
    return done.stdout
