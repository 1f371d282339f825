"""Code from git: a ref resolved to a commit (branch, tag, commit), a checkout of that commit
into a directory that already has files, local changes as a patch; a token sent as HTTP auth
that never shows in a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.bundle import git as gitsrc
from corral.errors import BadInput
from support.gitserver import GitHttpServer, commit, git, make_repo


def test_refs_resolve_to_commits_and_a_checkout_gets_that_commit(tmp_path: Path) -> None:
    bare, checkout = make_repo(tmp_path, {"train.py": "v1\n"})
    first = git("rev-parse", "HEAD", cwd=checkout)
    git("tag", "v1", cwd=checkout)
    git("tag", "-a", "v1-annotated", "-m", "x", cwd=checkout)
    second = commit(checkout, {"train.py": "v2\n"}, "second")
    git("push", "-q", "--tags", "origin", "main", cwd=checkout)
    url = f"file://{bare}"
    assert gitsrc.resolve(url, "main") == second
    assert gitsrc.resolve(url, None) == second  # the remote's default branch
    assert gitsrc.resolve(url, "v1") == first
    assert gitsrc.resolve(url, "v1-annotated") == first  # the commit, not the tag object
    assert gitsrc.resolve(url, first) == first
    with pytest.raises(BadInput, match="not a branch or tag"):
        gitsrc.resolve(url, "nope")
    with pytest.raises(BadInput, match="full commit"):
        gitsrc.resolve(url, first[:10])
    work = tmp_path / "node" / "work"
    (work / "checkpoints").mkdir(parents=True)  # the node made it first
    gitsrc.checkout(url, first, str(work))
    assert (work / "train.py").read_text() == "v1\n"
    assert (work / "checkpoints").is_dir()


def test_local_changes_travel_as_a_patch(tmp_path: Path) -> None:
    bare, checkout = make_repo(tmp_path, {"train.py": "v1\n", "keep.txt": "k\n"})
    head = git("rev-parse", "HEAD", cwd=checkout)
    (checkout / "train.py").write_text("v1 with a local fix\n")
    (checkout / "new.txt").write_text("untracked\n")
    state = gitsrc.local_state(str(checkout))
    assert state is not None and state.commit == head and state.dirty and state.untracked == 1
    diff = gitsrc.local_diff(str(checkout), head)
    work = tmp_path / "node"
    gitsrc.checkout(f"file://{bare}", head, str(work))
    gitsrc.apply_diff(str(work), diff)
    assert (work / "train.py").read_text() == "v1 with a local fix\n"
    assert not (work / "new.txt").exists()  # untracked files are not in the patch
    with pytest.raises(BadInput, match="not in the local repository"):
        gitsrc.local_diff(str(checkout), "0" * 40)


def test_a_token_is_sent_as_http_auth_and_never_shown(tmp_path: Path) -> None:
    _bare, checkout = make_repo(tmp_path / "repos", {"train.py": "private\n"})
    token = "ghp_tok3n_n3ver_sh0wn_1234567890"
    server = GitHttpServer(tmp_path / "repos", token)
    try:
        url = f"{server.url}/repo.git"
        with pytest.raises(BadInput) as denied:
            gitsrc.resolve(url, "main")
        assert token not in denied.value.message
        head = gitsrc.resolve(url, "main", token=token)
        assert head == git("rev-parse", "HEAD", cwd=checkout)
        work = tmp_path / "node"
        gitsrc.checkout(url, head, str(work), token=token)
        assert (work / "train.py").read_text() == "private\n"
        assert server.seen_auth > 0
        config = (work / ".git" / "config").read_text()
        assert token not in config  # nothing of the token stays on the machine's disk
        with pytest.raises(BadInput) as wrong:
            gitsrc.checkout(url, head, str(tmp_path / "other"), token="wrong-" + token)
        assert token not in wrong.value.message
    finally:
        server.close()
