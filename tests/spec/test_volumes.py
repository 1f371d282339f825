"""``volumes:`` in the spec: a name, a size, an absolute mount point off the node's system
directories, no two volumes with one name or one mount; and what the planner makes of it."""

from __future__ import annotations

import pytest

from corral.control import planner
from corral.providers.fake import FakeProvider
from corral.providers.local import LocalProvider

from .helpers import load, one

BASE = "name: j\nrun: echo\n"


def test_volumes_parse_with_their_size_in_gb_and_a_normal_mount():
    spec = load(
        BASE
        + "volumes:\n  - {name: data, size: 200GB, mount: /mnt/data/}\n  - {name: x, mount: /x}\n"
    )
    assert [(v.name, v.size, v.mount) for v in spec.volumes] == [
        ("data", 200.0, "/mnt/data"),
        ("x", 50.0, "/x"),
    ]
    req = planner.requirements_from_spec(spec)
    assert [(v.name, v.size_gb, v.mount) for v in req.volumes] == [
        ("data", 200, "/mnt/data"),
        ("x", 50, "/x"),
    ]
    assert load(BASE).volumes == [] and planner.requirements_from_spec(load(BASE)).volumes == []


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        ("{name: data, mount: data}", "mount", "must be an absolute path"),
        ("{name: data, mount: /etc/data}", "mount", "system directory"),
        ("{name: data, mount: /}", "mount", "system directory"),
        ("{name: data, mount: /a/../b}", "mount", "'..'"),
        ("{name: Data, mount: /d}", "name", "invalid name"),
        ("{name: d, mount: /d, size: 0GB}", "size", "must be positive"),
        ("{name: d, mount: /d, size: 20TB}", "size", "at most 16384GB"),
        ("{name: d, mount: /d, sise: 1GB}", "volumes[0]", "did you mean 'size'"),
        ("{name: d}", "volumes[0]", "missing required key 'mount'"),
    ],
)
def test_bad_volumes_name_the_field(item, field, words):
    err = one(BASE + f"volumes:\n  - {item}\n")
    assert err["field"].endswith(field) and words in err["message"], err


def test_two_volumes_may_not_share_a_name_or_a_mount():
    err = one(BASE + "volumes:\n  - {name: a, mount: /a}\n  - {name: a, mount: /b}\n")
    assert "two volumes have the name 'a'" in err["message"]
    err = one(BASE + "volumes:\n  - {name: a, mount: /a}\n  - {name: b, mount: /a/}\n")
    assert "two volumes have the mount '/a'" in err["message"]


def test_providers_without_persistent_volumes_are_rejected_with_their_reason(corral_home):
    spec = load(BASE + "volumes:\n  - {name: data, mount: /data}\n")
    providers = {"fake": FakeProvider(), "local": LocalProvider()}
    result = planner.plan(providers, planner.requirements_from_spec(spec))
    assert result.offers == []
    assert result.codes == {"fake": "unsupported", "local": "unsupported"}
    assert result.rejected["local"].startswith("has no persistent volumes for `volumes:` (")
    assert "checkpoints already stay on this machine" in result.rejected["local"]
    assert planner.plan(providers, planner.requirements_from_spec(load(BASE))).offers
