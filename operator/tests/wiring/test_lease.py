"""Leader election, the pure part: what one attempt does with what was last seen of the Lease,
and the records the leader writes."""

from __future__ import annotations

import pytest

from skyhook_operator.kube.lease import Record, Seen, Step, claimed, decide, released
from skyhook_operator.settings import SettingsError, load_settings

ME = "operator-a_1234"


def seen(holder: str, duration_s: int = 15, changed_at: float = 100.0) -> Seen:
    return Seen(Record(holder, duration_s, "t0", "t0", 3), "42", changed_at)


@pytest.mark.parametrize(
    ("last_seen", "now", "step"),
    [
        pytest.param(None, 0.0, Step.CREATE, id="no-lease-yet"),
        pytest.param(seen(ME), 500.0, Step.RENEW, id="ours-renewed-even-if-late"),
        pytest.param(seen(""), 100.0, Step.TAKE, id="released"),
        pytest.param(seen("operator-b_1"), 114.9, Step.WAIT, id="theirs-still-valid"),
        pytest.param(seen("operator-b_1"), 115.0, Step.TAKE, id="theirs-expired"),
        pytest.param(seen("operator-b_1", duration_s=60), 130.0, Step.WAIT, id="their-duration"),
    ],
)
def test_one_attempt_creates_renews_takes_or_waits(
    last_seen: Seen | None, now: float, step: Step
) -> None:
    assert decide(ME, last_seen, now) is step


def test_a_take_over_starts_a_new_term_and_a_renewal_keeps_it() -> None:
    theirs = Record("operator-b_1", 15, "t0", "t1", 3)
    taken = claimed(theirs, ME, 15, "t2")
    assert taken == Record(ME, 15, "t2", "t2", 4)
    assert claimed(taken, ME, 15, "t3") == Record(ME, 15, "t2", "t3", 4)


def test_a_released_lease_has_no_holder_and_is_taken_at_once() -> None:
    record = released(Record(ME, 15, "t0", "t1", 4), "t2")
    assert (record.holder, record.duration_s, record.transitions) == ("", 1, 4)
    assert decide("operator-b_1", Seen(record, "43", 200.0), 200.0) is Step.TAKE


def test_record_round_trips_through_the_api_shape() -> None:
    record = Record(ME, 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:02.000000Z", 2)
    assert Record.from_api({"spec": record.to_api()}) == record
    assert Record.from_api({}) == Record()


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param({"SKYHOOK_LEASE_RENEW_DEADLINE": "20"}, id="deadline-beyond-duration"),
        pytest.param({"SKYHOOK_LEASE_RETRY_PERIOD": "10s"}, id="retry-not-below-deadline"),
        pytest.param({"SKYHOOK_LEASE_RETRY_PERIOD": "0"}, id="retry-zero"),
    ],
)
def test_lease_timings_out_of_order_are_refused_naming_the_variables(
    environ: dict[str, str],
) -> None:
    with pytest.raises(SettingsError, match="SKYHOOK_LEASE_RENEW_DEADLINE"):
        load_settings(environ)


def test_upstream_leader_election_variable_turns_it_on() -> None:
    assert not load_settings({}).leader_election
    assert load_settings({"LEADER_ELECTION": "true"}).leader_election
    assert not load_settings(
        {"LEADER_ELECTION": "true", "SKYHOOK_LEADER_ELECTION": "false"}
    ).leader_election
