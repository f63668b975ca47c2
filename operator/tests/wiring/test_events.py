"""Event aggregation: a node gets one Event per reason, a Skyhook's similar messages combine,
every Event object is written at most once per interval, and nothing is lost, only delayed and
merged."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.kube.events import (
    COMBINED_PREFIX,
    Correlator,
    Event,
    Recorder,
    Subject,
    Write,
    body,
)

NODE = Subject("Node", "n1")
SCR = Subject("Skyhook", "s1")
START = {"action": "StartStage"}
DONE = {"action": "JobComplete"}


def applying(node: str, stage: str = "apply") -> Event:
    return Event(SCR, "Apply", f"Applying package [p:1.0] to node [{node}] stage [{stage}]")


def sent(correlator: Correlator, *events: Event, now: float = 0.0) -> list[Write]:
    for event in events:
        correlator.add(event, now)
    writes, _ = correlator.take(now)
    return writes


def run(
    correlator: Correlator, occurrences: list[tuple[float, Event]]
) -> list[tuple[float | None, Write]]:
    """What the Recorder does: take after every occurrence and whenever the timer says, then
    close (force) after the last one; the writes of the close have time None."""
    writes: list[tuple[float | None, Write]] = []
    now, wait = 0.0, None
    for at, event in occurrences:
        while wait is not None and now + wait <= at:
            now += wait
            taken, wait = correlator.take(now)
            writes += [(now, w) for w in taken]
        now = at
        correlator.add(event, now)
        taken, wait = correlator.take(now)
        writes += [(now, w) for w in taken]
    taken, _ = correlator.take(now, force=True)
    return writes + [(None, w) for w in taken]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param(Event(NODE, "Apply", "m"), Event(NODE, "Apply", "m"), True, id="node-same"),
        pytest.param(
            Event(NODE, "Apply", "m"), Event(NODE, "Apply", "other"), True, id="node-message"
        ),
        pytest.param(Event(NODE, "Apply", "m"), Event(NODE, "State", "m"), False, id="reason"),
        pytest.param(
            Event(NODE, "Apply", "m"), Event(Subject("Node", "n2"), "Apply", "m"), False, id="node"
        ),
        pytest.param(
            Event(NODE, "Apply", "m"), Event(NODE, "Apply", "m", "Warning"), False, id="type"
        ),
        pytest.param(Event(SCR, "Apply", "m"), Event(SCR, "Apply", "m"), True, id="skyhook-same"),
        pytest.param(
            Event(SCR, "Apply", "m"), Event(SCR, "Apply", "other"), False, id="skyhook-message"
        ),
    ],
)
def test_which_occurrences_count_towards_one_event(first: Event, second: Event, same: bool) -> None:
    """A node has one Event per type and reason showing the latest message; a Skyhook one per
    message (below the similar limit)."""
    correlator = Correlator(first_delay=0.0, min_interval=10.0)
    writes = run(correlator, [(0.0, first), (1.0, second)])
    if same:
        one, two = (w for _, w in writes)
        assert (one.create, one.count, two.create, two.count) == (True, 1, False, 2)
        assert one.name == two.name
        assert two.event.message == second.message
        assert (two.first_seen, two.last_seen) == (0.0, 1.0)
    else:
        assert [(w.create, w.count) for _, w in writes] == [(True, 1), (True, 1)]
        assert writes[0][1].name != writes[1][1].name


def test_repeats_within_the_interval_are_one_patch_when_it_ends() -> None:
    correlator = Correlator(first_delay=0.0, min_interval=10.0, gather=1.0)
    first = sent(correlator, Event(NODE, "Apply", "a"), now=0.0)
    assert [(w.create, w.count) for w in first] == [(True, 1)]
    for at, message in ((2.0, "b"), (3.0, "c"), (4.0, "d")):
        assert sent(correlator, Event(NODE, "Apply", message), now=at) == []
    assert correlator.take(9.9) == ([], pytest.approx(0.1))
    (patch,) = correlator.take(10.0)[0]
    assert (patch.create, patch.count, patch.event.message, patch.last_seen) == (
        False,
        4,
        "d",
        4.0,
    )
    assert patch.name == first[0].name
    assert correlator.take(100.0) == ([], None)


def test_an_occurrence_after_the_interval_waits_only_to_gather_its_pass() -> None:
    correlator = Correlator(first_delay=0.0, min_interval=10.0, gather=1.0)
    sent(correlator, Event(NODE, "Apply", "start apply"), now=0.0)
    # One pass, 60 s later: the apply stage completes and the config stage starts.
    done = sent(
        correlator,
        Event(NODE, "Apply", "apply complete"),
        Event(NODE, "Apply", "start config"),
        now=60.0,
    )
    assert done == []
    writes, wait = correlator.take(61.0)
    assert [(w.count, w.event.message) for w in writes] == [(3, "start config")]
    assert wait is None


def test_a_typical_node_rollout_costs_two_requests() -> None:
    """Apply starts; at 2 s it completes and config starts; at 4 s config completes and the
    node is complete: the first write waits 5 s, so each reason is one POST of its full count,
    with the latest occurrence's message and action."""
    correlator = Correlator()
    for at, event in TYPICAL_NODE:
        correlator.add(event, at)
        assert correlator.take(at)[0] == []
    apply, wait = correlator.take(5.0)
    assert [(w.create, w.event.reason, w.count) for w in apply] == [(True, "Apply", 2)]
    assert body(apply[0])["action"] == "StartStage"
    assert body(apply[0])["message"] == "Applying package [p:1] from [skyhook:s] stage [config]"
    assert wait == pytest.approx(2.0)
    state, wait = correlator.take(7.0)
    assert [(w.create, w.event.reason, w.count) for w in state] == [(True, "State", 3)]
    assert (body(state[0])["message"], body(state[0])["action"]) == (
        "Skyhook [s] complete.",
        "MarkComplete",
    )
    assert wait is None


TYPICAL_NODE = (
    (0.0, Event(NODE, "Apply", "Applying package [p:1] from [skyhook:s] stage [apply]", **START)),
    (2.0, Event(NODE, "State", "Package [p:1] state complete on [skyhook:s]", **DONE)),
    (2.0, Event(NODE, "Apply", "Applying package [p:1] from [skyhook:s] stage [config]", **START)),
    (4.0, Event(NODE, "State", "Package [p:1] state complete on [skyhook:s]", **DONE)),
    (4.0, Event(NODE, "State", "Skyhook [s] complete.", action="MarkComplete")),
)


def test_without_a_first_delay_the_same_rollout_costs_four() -> None:
    writes = run(Correlator(first_delay=0.0), list(TYPICAL_NODE))
    assert [(w.create, w.event.reason, w.count) for _, w in writes] == [
        (True, "Apply", 1),
        (True, "State", 1),
        (False, "Apply", 2),
        (False, "State", 3),
    ]


def test_an_event_idle_for_the_window_is_forgotten_and_a_repeat_starts_a_new_one() -> None:
    correlator = Correlator(first_delay=0.0, window=600)
    first = sent(correlator, Event(NODE, "Apply", "m"), now=0.0)
    assert len(correlator) == 1
    later = sent(correlator, Event(NODE, "Apply", "m"), now=601.0)
    assert later[0].create and later[0].name != first[0].name and later[0].count == 1
    assert len(correlator) == 1


def test_similar_skyhook_messages_beyond_the_limit_bump_one_combined_event() -> None:
    correlator = Correlator(first_delay=0.0, similar_limit=10, min_interval=10.0)
    writes = sent(correlator, *(applying(f"n{i}") for i in range(15)))
    distinct = [w for w in writes if not w.event.message.startswith(COMBINED_PREFIX)]
    combined = [w for w in writes if w.event.message.startswith(COMBINED_PREFIX)]
    assert len(distinct) == 10
    # Added before the first take, the five beyond the limit are one POST with the full count.
    assert [(w.create, w.count) for w in combined] == [(True, 5)]
    assert sent(correlator, applying("n99"), now=1.0) == []
    (more,) = correlator.take(10.0)[0]
    assert (more.create, more.count, more.name) == (False, 6, combined[0].name)
    assert more.event.message == COMBINED_PREFIX + applying("n99").message


def test_messages_older_than_the_window_no_longer_count_towards_the_limit() -> None:
    """A rollout a window apart: the second one's messages read on their own again, while one
    still within the window keeps the count that combines."""
    correlator = Correlator(first_delay=0.0, similar_limit=3, window=600.0)
    for i in range(3):
        sent(correlator, applying(f"early{i}"), now=float(i))
    (combined,) = sent(correlator, applying("late"), now=300.0)
    assert combined.event.message.startswith(COMBINED_PREFIX)
    # At 650 s the three early messages are past the window; "late" (300 s) is not.
    (alone,) = sent(correlator, applying("again"), now=650.0)
    assert alone.event.message == applying("again").message
    assert (
        sent(correlator, applying("more"), now=651.0)[0].event.message == applying("more").message
    )
    assert sent(correlator, applying("over"), now=652.0) == []  # gathered for a second
    (over,) = correlator.take(653.0)[0]
    assert (over.name, over.count) == (combined.name, 2)
    assert over.event.message == COMBINED_PREFIX + applying("over").message


def test_a_repeated_message_counts_from_its_latest_occurrence() -> None:
    correlator = Correlator(first_delay=0.0, similar_limit=3, window=600.0)
    for at, node in ((0.0, "a"), (1.0, "b"), (2.0, "c"), (500.0, "a")):
        sent(correlator, applying(node), now=at)
    # b and c have left the window, a (500 s) has not: two distinct messages, not combined.
    writes = sent(correlator, applying("d"), now=650.0)
    assert applying("d").message in [w.event.message for w in writes]
    assert not [w for w in writes if w.event.message.startswith(COMBINED_PREFIX)]


def test_node_events_are_never_combined() -> None:
    correlator = Correlator(first_delay=0.0, similar_limit=2)
    messages = [f"Applying package [p:{i}] from [skyhook:s] stage [apply]" for i in range(5)]
    writes = run(correlator, [(float(i), Event(NODE, "Apply", m)) for i, m in enumerate(messages)])
    assert [(w.count, w.event.message) for _, w in writes] == [(1, messages[0]), (5, messages[4])]


def test_force_sends_everything_that_waits() -> None:
    correlator = Correlator(first_delay=0.0, min_interval=300.0)
    for at, message in enumerate(("a", "b", "c")):
        correlator.add(Event(NODE, "State", message), at)
        correlator.add(Event(SCR, "State", message), at)
        correlator.take(at)
    writes, wait = correlator.take(2.0)
    assert writes == [] and wait == pytest.approx(298.0)
    writes, wait = correlator.take(0.0, force=True)
    assert [(w.event.subject, w.count) for w in writes] == [(NODE, 3)] and wait is None


def test_a_failed_create_is_created_again_by_the_next_occurrence() -> None:
    correlator = Correlator(first_delay=0.0)
    first = sent(correlator, Event(NODE, "Apply", "m"))
    correlator.failed(first[0])
    again = sent(correlator, Event(NODE, "Apply", "m"), now=1.0)
    assert [(w.create, w.count, w.name) for w in again] == [(True, 2, first[0].name)]


def test_memory_is_bounded_and_a_pending_event_pushed_out_is_sent_at_once() -> None:
    correlator = Correlator(first_delay=0.0, max_records=3, min_interval=10.0)
    sent(correlator, Event(NODE, "Apply", "a"))
    correlator.add(Event(NODE, "Apply", "b"), 1.0)  # pending until 10 s
    others = sent(
        correlator, *(Event(Subject("Node", f"m{i}"), "Apply", "x") for i in range(3)), now=2.0
    )
    assert len(correlator) == 3
    assert [(w.event.subject, w.count, w.create) for w in others] == [
        (NODE, 2, False),
        *((Subject("Node", f"m{i}"), 1, True) for i in range(3)),
    ]


class Requests:
    """The requests a Recorder sends, in place of the apiserver."""

    namespaced_path = staticmethod(AsyncKube.namespaced_path)

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(
        self, method: str, path: str, body: dict[str, Any], *_: Any
    ) -> dict[str, Any]:
        self.sent.append((method, body))
        return body


def test_the_recorder_timer_sends_a_merged_patch_and_close_sends_the_rest() -> None:
    asyncio.run(_recorder_timer())


async def _recorder_timer() -> None:
    requests = Requests()
    recorder = Recorder(
        cast(AsyncKube, requests), Correlator(first_delay=0.0, min_interval=2.0, gather=0.05)
    )
    recorder.record(Event(NODE, "Apply", "start"))
    await asyncio.sleep(0.01)  # the recorder sends in the background
    recorder.record(Event(NODE, "Apply", "done", action="JobComplete"))
    recorder.record(Event(NODE, "State", "complete"))
    await asyncio.sleep(0.01)
    assert [(m, b["reason"]) for m, b in requests.sent] == [("POST", "Apply"), ("POST", "State")]
    stop = time.monotonic() + 10
    while not (patched := [b for m, b in requests.sent if m == "PATCH"]):
        assert time.monotonic() < stop, "the timer's PATCH"
        await asyncio.sleep(0.05)
    assert patched == [
        {
            "count": 2,
            "lastTimestamp": patched[0]["lastTimestamp"],
            "message": "done",
            "action": "JobComplete",
        }
    ]
    recorder.record(Event(NODE, "State", "complete"))  # within the interval: waits
    await recorder.close()
    assert [b["count"] for _, b in requests.sent] == [1, 1, 2, 2]


class Refusing(Requests):
    """Answers every request as an apiserver that does not grant Events would."""

    async def request(
        self, method: str, path: str, body: dict[str, Any], *_: Any
    ) -> dict[str, Any]:
        self.sent.append((method, body))
        raise ApiError(403, 'events is forbidden: User "x" cannot create resource "events"')


def test_a_refused_event_is_a_warning_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    async def refused() -> None:
        recorder = Recorder(cast(AsyncKube, Refusing()), Correlator(first_delay=0.0))
        for node in ("n1", "n2", "n3"):
            recorder.record(Event(Subject("Node", node), "Apply", "start"))
            await asyncio.sleep(0.02)
        await recorder.close()

    with caplog.at_level(logging.DEBUG, logger="skyhook_operator.kube.events"):
        asyncio.run(refused())
    lines = [r for r in caplog.records if "not posted" in r.getMessage()]
    assert len(lines) == 3, [r.getMessage() for r in lines]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "forbidden" in lines[0].getMessage()


SUBJECTS = [Subject("Node", "n1"), Subject("Node", "n2"), Subject("Skyhook", "s1")]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(SUBJECTS),
            st.sampled_from(["Apply", "State"]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0.0, 0.5, 1.0, 3.0, 12.0, 700.0]),
        ),
        max_size=60,
    ),
    st.sampled_from([1.0, 5.0, 10.0]),
    st.integers(min_value=2, max_value=50),
)
def test_every_occurrence_is_counted_once_and_writes_keep_their_interval(
    occurrences: list[tuple[Subject, str, str, float]], min_interval: float, max_records: int
) -> None:
    """After close the last count written for each Event object adds up to every occurrence;
    no Event object is written twice within the interval except by the final flush or when
    pushed out of a full memory; the memory never holds more than max_records."""
    correlator = Correlator(
        min_interval=min_interval, gather=0.5, similar_limit=2, max_records=max_records
    )
    at, timeline = 0.0, []
    for subject, reason, message, step in occurrences:
        at += step
        timeline.append((at, Event(subject, reason, message)))
    writes = run(correlator, timeline)
    assert len(correlator) <= max_records
    last_count = {w.name: w.count for _, w in writes}
    assert sum(last_count.values()) == len(occurrences)
    if len(occurrences) <= max_records:  # nothing was pushed out early
        written: dict[str, float] = {}
        for when, write in writes:
            if when is None:
                continue
            if write.name in written:
                assert when - written[write.name] >= min_interval
            written[write.name] = when
