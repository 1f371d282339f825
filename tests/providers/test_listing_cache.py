"""The shared listing of an account's objects: cached for its time, refreshed after, and a key
the provider changed read alone until a newer listing exists."""

from __future__ import annotations

from corral.providers.common.listing_cache import ListingCache


class _Cloud:
    """Objects by key, counting the listings and the single reads."""

    def __init__(self) -> None:
        self.objects: dict[str, str] = {"a": "a1", "b": "b1"}
        self.lists = 0
        self.reads: list[str] = []

    def list_all(self) -> dict[str, str]:
        self.lists += 1
        return dict(self.objects)

    def get_one(self, key: str) -> str | None:
        self.reads.append(key)
        return self.objects.get(key)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cache(keep_direct: bool = False) -> tuple[ListingCache[str, str], _Cloud, _Clock]:
    cloud, clock = _Cloud(), _Clock()
    cache = ListingCache(cloud.list_all, cloud.get_one, 10.0, clock, keep_direct=keep_direct)
    return cache, cloud, clock


def test_one_listing_serves_every_key_within_the_ttl() -> None:
    cache, cloud, clock = _cache()
    assert cache.get("a") == "a1"
    cloud.objects["a"] = "a2"
    clock.now += 9.9
    assert (cache.get("a"), cache.get("b")) == ("a1", "b1")
    assert cloud.lists == 1 and cloud.reads == []
    assert cache.listing() == (100.0, {"a": "a1", "b": "b1"})


def test_the_listing_is_taken_again_after_the_ttl_or_when_asked_fresh() -> None:
    cache, cloud, clock = _cache()
    cache.get("a")
    cloud.objects["a"] = "a2"
    clock.now += 10.0
    assert cache.get("a") == "a2"
    assert cloud.lists == 2
    cloud.objects["a"] = "a3"
    assert cache.listing(fresh=True) == (110.0, {"a": "a3", "b": "b1"})
    assert cache.get("a") == "a3"
    assert cloud.lists == 3 and cloud.reads == []


def test_a_touched_key_is_read_alone_until_a_newer_listing() -> None:
    cache, cloud, clock = _cache()
    cache.get("a")
    clock.now += 1.0
    cloud.objects["a"] = "a2"
    cache.touch("a")
    assert cache.get("a") == "a2"
    assert cache.get("a") == "a2"  # still read alone: the listing predates the change
    assert cache.get("b") == "b1"  # untouched keys still come from the listing
    assert cloud.reads == ["a", "a"] and cloud.lists == 1
    clock.now += 10.0  # a listing newer than the change answers for it again
    assert cache.get("a") == "a2"
    assert cloud.reads == ["a", "a"] and cloud.lists == 2


def test_a_touch_at_the_listing_time_still_counts_and_marks_go_once_a_newer_listing_exists() -> (
    None
):
    cache, cloud, clock = _cache()
    cache.touch("a")
    cache.listing()  # taken at the very time of the touch: it may predate the change
    assert cache._touched == {"a": 100.0}
    cache.get("a")
    assert cloud.reads == ["a"]
    clock.now += 0.5
    cache.listing(fresh=True)
    assert cache._touched == {}
    cache.get("a")
    assert cloud.reads == ["a"]


def test_a_key_missing_from_the_listing_is_read_alone_and_kept_only_when_asked() -> None:
    cache, cloud, _ = _cache()
    cache.listing()
    cloud.objects["c"] = "c1"
    assert cache.get("c") == "c1" and cache.get("c") == "c1"
    assert cache.get("gone") is None
    assert cloud.reads == ["c", "c", "gone"]

    kept, cloud, _ = _cache(keep_direct=True)
    kept.listing()
    cloud.objects["c"] = "c1"
    assert kept.get("c") == "c1" and kept.get("c") == "c1"
    assert cloud.reads == ["c"]  # the answer joined the listing
    del cloud.objects["b"]
    kept.touch("b")
    assert kept.get("b") is None
    assert "b" not in kept.listing()[1]  # gone: out of the listing too
