"""Packing (content-addressed, cached by fingerprint, size-limited) and receiving (verified,
resumable, safely unpacked) a code bundle."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from corral.bundle import pack as packing
from corral.bundle.unpack import Mismatch, Receiver, extract
from corral.errors import BadInput


def _work(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text("print('model')\n")
    (root / "train.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "train.sh", 0o755)
    (root / ".gitignore").write_text("*.ckpt\n")
    (root / "old.ckpt").write_bytes(b"x" * 1000)
    return root


def test_the_same_content_packs_to_the_same_sha_and_an_unchanged_workdir_is_not_repacked(
    tmp_path: Path,
) -> None:
    work = _work(tmp_path / "w")
    cache = tmp_path / "cache"
    first = packing.pack(cache, packing.collect(str(work)))
    assert first.path.name == f"{first.sha256}.tar.gz" and not first.cached
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == first.sha256
    again = packing.pack(cache, packing.collect(str(work)))
    assert again.cached and again.sha256 == first.sha256
    # touched, same content: packed again (the fingerprint moved), to the same sha256
    os.utime(work / "src" / "model.py", (1, 1))
    touched = packing.pack(cache, packing.collect(str(work)))
    assert not touched.cached and touched.sha256 == first.sha256
    # another copy of the same tree elsewhere: the same archive
    other = _work(tmp_path / "copy")
    assert packing.pack(tmp_path / "c2", packing.collect(str(other))).sha256 == first.sha256
    (work / "src" / "model.py").write_text("print('changed')\n")
    assert packing.pack(cache, packing.collect(str(work))).sha256 != first.sha256


def test_a_workdir_over_the_limit_is_refused_with_its_largest_paths(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "data").mkdir(parents=True)
    (work / "data" / "a.bin").write_bytes(b"0" * 3000)
    (work / "data" / "b.bin").write_bytes(b"0" * 2000)
    (work / "model.pt").write_bytes(b"0" * 1500)
    (work / "train.py").write_text("x")
    items = packing.collect(str(work))
    packing.check_size(items, 10_000)
    with pytest.raises(BadInput) as exc:
        packing.check_size(items, 4000)
    msg = exc.value.message
    assert "6.5 KB, over code.max_size (4.0 KB)" in msg
    assert "largest: data/ (5.0 KB), model.pt (1.5 KB), train.py (1 B)" in msg
    assert ".corralignore" in msg


def test_receiving_resumes_verifies_and_unpacks(tmp_path: Path) -> None:
    work = _work(tmp_path / "w")
    secret = tmp_path / "netrc"
    secret.write_text("machine x\n")
    bundle = packing.pack(
        tmp_path / "cache",
        packing.collect(str(work), [("0", str(secret))], {"git.diff": b"diff --git\n"}),
    )
    data = bundle.path.read_bytes()
    node = tmp_path / "node"
    rx = Receiver(node / "code", bundle.sha256, bundle.size)

    def feed(chunk: bytes):
        parts = [chunk, b""]
        return lambda: parts.pop(0)

    half = len(data) // 2
    assert rx.write(0, feed(data[:half])) == half
    # a new agent on the same node resumes where the bytes end
    rx = Receiver(node / "code", bundle.sha256, bundle.size)
    assert rx.received == half and not rx.complete
    with pytest.raises(BadInput, match="the bundle has"):
        rx.write(0, feed(data[:10]))
    assert rx.write(half, feed(data[half:])) == len(data) and rx.complete
    out = extract(rx.final, node / "work", node / "files")
    assert (node / "work" / "src" / "model.py").read_text() == "print('model')\n"
    assert os.stat(node / "work" / "train.sh").st_mode & 0o111
    assert not (node / "work" / "old.ckpt").exists()
    assert out.diff == b"diff --git\n" and out.files["0"].read_text() == "machine x\n"


def test_wrong_bytes_are_refused_and_forgotten(tmp_path: Path) -> None:
    rx = Receiver(tmp_path, "0" * 64, 4)
    parts = [b"abcd", b""]
    with pytest.raises(Mismatch, match="sha256"):
        rx.write(0, lambda: parts.pop(0))
    assert rx.received == 0 and not rx.complete and not rx.part.exists()
    parts = [b"abcdef", b""]
    with pytest.raises(Mismatch, match="longer"):
        rx.write(0, lambda: parts.pop(0))


def test_an_archive_escaping_its_directory_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tf:
        info = tarfile.TarInfo("work/../../escape.txt")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(BadInput, match="cannot unpack"):
        extract(bad, tmp_path / "work", tmp_path / "files")
    assert not (tmp_path / "escape.txt").exists()


def test_links_travel_inside_the_workdir_and_a_link_out_of_it_is_refused_at_pack_time(
    tmp_path: Path,
) -> None:
    work = _work(tmp_path / "w")
    (work / "data").mkdir()
    (work / "data" / "train.txt").write_text("rows\n")
    (work / "rel").symlink_to("data/train.txt")
    (work / "src" / "abs").symlink_to(work / "data" / "train.txt")  # absolute, into the workdir
    bundle = packing.pack(tmp_path / "cache", packing.collect(str(work)))
    node = tmp_path / "node"
    extract(bundle.path, node / "work", node / "files")
    assert (node / "work" / "rel").read_text() == "rows\n"
    assert os.readlink(node / "work" / "src" / "abs") == "../data/train.txt"
    assert (node / "work" / "src" / "abs").read_text() == "rows\n"

    outside = tmp_path / "dataset.txt"
    outside.write_text("elsewhere\n")
    (work / "data" / "big").symlink_to(outside)
    with pytest.raises(BadInput) as exc:
        packing.collect(str(work))
    msg = exc.value.message
    assert msg.startswith(f"workdir: the link data/big points to {outside}, outside the workdir")
    assert ".corralignore" in msg and "\n" not in msg
    (work / ".corralignore").write_text("data/big\n")
    packing.collect(str(work))  # ignored: packs
