"""The workdir walk: git's ignore rules, .corralignore on top, .git never shipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.bundle.ignore import parse_rule, walk


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _shipped(root: Path) -> list[str]:
    return [e.rel for e in walk(str(root))]


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "ignored"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/er/a.log", False, True),
        ("*.log", "a.log.txt", False, False),
        ("/build", "build", True, True),
        ("/build", "src/build", True, False),
        ("out/", "out", True, True),
        ("out/", "out", False, False),  # a file named out is not a directory
        ("doc/*.md", "doc/a.md", False, True),
        ("doc/*.md", "doc/sub/a.md", False, False),
        ("**/cache", "a/b/cache", True, True),
        ("data/**", "data/x/y.bin", False, True),
        ("a/**/z", "a/z", False, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("file?.txt", "file1.txt", False, True),
        ("file?.txt", "file10.txt", False, False),
        ("[abc].py", "b.py", False, True),
        ("[!abc].py", "b.py", False, False),
        ("\\#notes", "#notes", False, True),
    ],
)
def test_gitignore_patterns_match_as_git_does(pattern, path, is_dir, ignored) -> None:
    rule = parse_rule(pattern)
    assert rule is not None
    matched = bool(rule.regex.match(path)) and (is_dir or not rule.dir_only)
    assert matched == ignored


def test_comments_and_blank_lines_are_not_rules() -> None:
    assert parse_rule("# a comment") is None
    assert parse_rule("   ") is None
    assert parse_rule("!keep.log").negate


def test_walk_applies_nested_gitignores_corralignore_and_skips_git(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            ".gitignore": "*.log\ndata/\n!keep.log\n",
            "train.py": "x",
            "run.log": "x",
            "keep.log": "x",
            "data/big.bin": "x",
            "src/.gitignore": "generated.py\n",
            "src/model.py": "x",
            "src/generated.py": "x",
            "src/sub/generated.py": "x",
            ".corralignore": "notes/\n!run.log\n",
            "notes/todo.md": "x",
            ".git/HEAD": "ref: x",
        },
    )
    assert _shipped(tmp_path) == [
        ".corralignore",
        ".gitignore",
        "keep.log",
        "run.log",  # .corralignore ships what git ignores
        "src/.gitignore",
        "src/model.py",
        "train.py",
    ]


def test_a_file_under_an_ignored_directory_cannot_be_reincluded(tmp_path: Path) -> None:
    _tree(tmp_path, {".gitignore": "out/\n!out/keep.txt\n", "out/keep.txt": "x", "a.py": "x"})
    assert _shipped(tmp_path) == [".gitignore", "a.py"]


def test_symlinks_are_listed_not_followed(tmp_path: Path) -> None:
    _tree(tmp_path, {"real/a.txt": "x"})
    (tmp_path / "link").symlink_to("real")
    entries = {e.rel: e.is_link for e in walk(str(tmp_path))}
    assert entries == {"link": True, "real/a.txt": False}
