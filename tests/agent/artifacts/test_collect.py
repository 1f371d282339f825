"""Which files the artifact globs take from the workdir."""

from __future__ import annotations

import os
from pathlib import Path

from corral.agent.collect import collect


def _tree(root: Path, files: list[str]) -> None:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)


def test_double_star_matches_any_depth_and_a_directory_takes_everything_under_it(tmp_path):
    work = tmp_path / "work"
    _tree(work, ["outputs/model.pt", "outputs/a/b/c.txt", "logs/run.log", "top.pt", "x/y.pt"])
    assert sorted(collect(work, ["outputs/**"]).files) == ["outputs/a/b/c.txt", "outputs/model.pt"]
    assert sorted(collect(work, ["outputs"]).files) == ["outputs/a/b/c.txt", "outputs/model.pt"]
    assert sorted(collect(work, ["**/*.pt"]).files) == ["outputs/model.pt", "top.pt", "x/y.pt"]
    assert sorted(collect(work, ["*.pt"]).files) == ["top.pt"]
    assert sorted(collect(work, ["outputs/**/c.txt"]).files) == ["outputs/a/b/c.txt"]
    assert sorted(collect(work, ["[lx]*/*.???"]).files) == ["logs/run.log"]
    assert sorted(collect(work, ["[!lo]*/*"]).files) == ["x/y.pt"]


def test_files_map_to_their_real_paths_and_each_is_taken_once(tmp_path):
    work = tmp_path / "work"
    _tree(work, ["outputs/model.pt"])
    found = collect(work, ["outputs/*", "**/model.pt", "outputs"])
    assert found.files == {"outputs/model.pt": Path(os.path.realpath(work / "outputs/model.pt"))}
    assert found.warnings == []


def test_symlinks_are_not_followed_out_of_the_workdir(tmp_path):
    work = tmp_path / "work"
    outside = tmp_path / "secret"
    _tree(work, ["outputs/real.txt"])
    _tree(outside, ["key.pem", "dir/inner.txt"])
    (work / "outputs" / "leak.pem").symlink_to(outside / "key.pem")
    (work / "outputs" / "leakdir").symlink_to(outside / "dir")
    (work / "outputs" / "alias.txt").symlink_to(work / "outputs" / "real.txt")
    (work / "linked").symlink_to(outside / "dir")
    found = collect(work, ["outputs/**", "linked/**", "linked/inner.txt"])
    assert sorted(found.files) == ["outputs/alias.txt", "outputs/real.txt"]
    assert found.files["outputs/alias.txt"] == Path(os.path.realpath(work / "outputs/real.txt"))
    text = "\n".join(found.warnings)
    assert "outputs/leak.pem" in text and "outputs/leakdir" in text and "linked" in text


def test_patterns_outside_the_workdir_or_matching_nothing_are_warnings(tmp_path):
    work = tmp_path / "work"
    _tree(work, ["a.txt"])
    _tree(tmp_path, ["b.txt"])
    found = collect(work, ["../b.txt", "/etc/passwd", "a/../../b.txt", "missing/**"])
    assert found.files == {}
    assert len(found.warnings) == 4
    assert "'missing/**' matched no file" in found.warnings[-1]


def test_the_excluded_state_directory_is_never_collected(tmp_path):
    work = tmp_path / "work"
    _tree(work, ["model.pt", "state/events.jsonl", "state/results.tar.gz"])
    found = collect(work, ["**"], exclude=[work / "state"])
    assert sorted(found.files) == ["model.pt"]


def test_a_missing_workdir_collects_nothing_with_a_warning(tmp_path):
    found = collect(tmp_path / "nope", ["**"])
    assert found.files == {} and "does not exist" in found.warnings[0]
