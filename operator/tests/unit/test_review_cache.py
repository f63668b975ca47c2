"""The cache of token and access reviews (kube/reviews.py): answers expire after their own
lifetime, and the cache never holds more than its size, expired entries dropped first."""

from __future__ import annotations

import pytest

from skyhook_operator.kube.reviews import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("ttl", "later", "found"),
    [
        pytest.param(60.0, 59.9, "allowed", id="within-its-lifetime"),
        pytest.param(60.0, 60.0, None, id="expired-at-its-lifetime"),
        pytest.param(30.0, 45.0, None, id="a-short-lifetime"),
    ],
)
def test_an_answer_expires_after_its_lifetime(ttl: float, later: float, found: str | None) -> None:
    clock = Clock()
    cache: TtlCache[str, str] = TtlCache(clock=clock)
    cache.put("token", "allowed", ttl)
    clock.now = later
    assert cache.get("token") == found


def test_a_full_cache_drops_expired_entries_then_the_oldest() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(size=3, clock=clock)
    cache.put("short", 1, 10)
    cache.put("a", 2, 60)
    cache.put("b", 3, 60)
    clock.now = 20  # "short" expired: it goes, the others stay
    cache.put("c", 4, 60)
    assert [cache.get(k) for k in ("short", "a", "b", "c")] == [None, 2, 3, 4]
    cache.put("d", 5, 60)  # none expired: the oldest ("a") goes
    assert [cache.get(k) for k in ("a", "b", "c", "d")] == [None, 3, 4, 5]
