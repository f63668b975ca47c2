"""Event aggregation: repeats bump one Event, similar messages combine, each object is rate
limited, and nothing is lost, only delayed and merged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_operator.kube.events import COMBINED_PREFIX, Correlator, Event, Subject, Write

NODE = Subject("Node", "n1")
SCR = Subject("Skyhook", "s1")


def applying(node: str, stage: str = "apply") -> Event:
    return Event(SCR, "Apply", f"Applying package [p:1.0] to node [{node}] stage [{stage}]")


def sent(correlator: Correlator, *events: Event, now: float = 0.0) -> list[Write]:
    for event in events:
        correlator.add(event, now)
    writes, _ = correlator.take(now)
    return writes


@pytest.mark.parametrize(
    ("first", "second", "creates", "counts"),
    [
        pytest.param(
            Event(NODE, "Apply", "m"), Event(NODE, "Apply", "m"), [True, False], [1, 2], id="same"
        ),
        pytest.param(
            Event(NODE, "Apply", "m"), Event(NODE, "Apply", "other"), [True, True], [1, 1], id="msg"
        ),
        pytest.param(
            Event(NODE, "Apply", "m"), Event(NODE, "State", "m"), [True, True], [1, 1], id="reason"
        ),
        pytest.param(
            Event(NODE, "Apply", "m"),
            Event(Subject("Node", "n2"), "Apply", "m"),
            [True, True],
            [1, 1],
            id="object",
        ),
        pytest.param(
            Event(NODE, "Apply", "m"),
            Event(NODE, "Apply", "m", "Warning"),
            [True, True],
            [1, 1],
            id="type",
        ),
    ],
)
def test_only_an_identical_event_bumps_the_count_of_the_first(
    first: Event, second: Event, creates: list[bool], counts: list[int]
) -> None:
    correlator = Correlator()
    one = sent(correlator, first, now=0.0)
    two = sent(correlator, second, now=1.0)
    assert [w.create for w in one + two] == creates
    assert [w.count for w in one + two] == counts
    if counts == [1, 2]:
        assert one[0].name == two[0].name
        assert (two[0].first_seen, two[0].last_seen) == (0.0, 1.0)


def test_a_repeat_after_the_window_starts_a_new_event() -> None:
    correlator = Correlator(window=600)
    first = sent(correlator, Event(NODE, "Apply", "m"), now=0.0)
    later = sent(correlator, Event(NODE, "Apply", "m"), now=601.0)
    assert later[0].create and later[0].name != first[0].name and later[0].count == 1


def test_similar_messages_beyond_the_limit_bump_one_combined_event() -> None:
    correlator = Correlator(similar_limit=10, burst=100)
    writes = sent(correlator, *(applying(f"n{i}") for i in range(15)))
    distinct = [w for w in writes if not w.event.message.startswith(COMBINED_PREFIX)]
    combined = [w for w in writes if w.event.message.startswith(COMBINED_PREFIX)]
    assert len(distinct) == 10
    # Added in one go, the five beyond the limit are one request with the full count.
    assert [(w.create, w.count) for w in combined] == [(True, 5)]
    assert combined[0].event.message == COMBINED_PREFIX + applying("n14").message
    more = sent(correlator, applying("n99"), now=1.0)
    assert [(w.create, w.count, w.name) for w in more] == [(False, 6, combined[0].name)]


def test_an_object_over_its_burst_waits_for_a_token_and_loses_nothing() -> None:
    correlator = Correlator(burst=3, refill=10.0, similar_limit=100)
    for i in range(5):
        correlator.add(Event(NODE, "Apply", f"m{i}"), 0.0)
    correlator.add(Event(NODE, "Apply", "m4"), 0.0)  # a repeat of a waiting event
    writes, wait = correlator.take(0.0)
    assert [w.event.message for w in writes] == ["m0", "m1", "m2"]
    assert wait == pytest.approx(10.0)
    assert correlator.take(5.0)[0] == []
    writes, wait = correlator.take(10.0)
    assert [(w.event.message, w.count) for w in writes] == [("m3", 1)]
    writes, wait = correlator.take(20.0)
    assert [(w.event.message, w.count) for w in writes] == [("m4", 2)]
    assert wait is None


def test_other_objects_are_not_held_back_by_a_busy_one() -> None:
    correlator = Correlator(burst=1, refill=10.0)
    correlator.add(Event(SCR, "Apply", "a"), 0.0)
    correlator.add(Event(SCR, "Apply", "b"), 0.0)
    correlator.add(Event(NODE, "Apply", "c"), 0.0)
    writes, _ = correlator.take(0.0)
    assert [w.event.message for w in writes] == ["a", "c"]


def test_force_sends_everything_that_waits() -> None:
    correlator = Correlator(burst=1, refill=300.0)
    for message in ("a", "b", "c"):
        correlator.add(Event(SCR, "State", message), 0.0)
    writes, wait = correlator.take(0.0, force=True)
    assert [w.event.message for w in writes] == ["a", "b", "c"] and wait is None


def test_a_failed_create_is_created_again_by_the_next_occurrence() -> None:
    correlator = Correlator()
    first = sent(correlator, Event(NODE, "Apply", "m"))
    correlator.failed(first[0])
    again = sent(correlator, Event(NODE, "Apply", "m"), now=1.0)
    assert [(w.create, w.count, w.name) for w in again] == [(True, 2, first[0].name)]


@given(
    st.lists(
        st.tuples(st.sampled_from(["n1", "n2", "s1"]), st.sampled_from(["a", "b", "c"])),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=5),
)
def test_every_occurrence_is_counted_once_in_what_is_sent(
    occurrences: list[tuple[str, str]], burst: int
) -> None:
    """However the rate limit splits them, the last count sent for each Event adds up to every
    occurrence, and no object gets more requests than its tokens allow."""
    correlator = Correlator(burst=burst, refill=1.0, similar_limit=2)
    last_count: dict[str, int] = {}
    requests: dict[str, int] = {}
    now = 0.0
    for name, message in occurrences:
        correlator.add(Event(Subject("Node", name), "Apply", message), now)
        for write in correlator.take(now)[0]:
            last_count[write.name] = write.count
            requests[write.event.subject.name] = requests.get(write.event.subject.name, 0) + 1
        now += 0.25
    wait: float | None = 0.0
    while wait is not None:  # what the recorder's timer does
        now += wait
        writes, wait = correlator.take(now)
        last_count.update((w.name, w.count) for w in writes)
    assert sum(last_count.values()) == len(occurrences)
    assert all(n <= burst + now for n in requests.values())
