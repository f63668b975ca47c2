"""DeploymentPolicy maths: decoding with defaults, compartment assignment, batch sizes and the
evaluation of finished batches (upstream's documented examples, then properties)."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_planner.model.policy import (
    Compartment,
    Policy,
    PolicyError,
    Strategy,
    decode_policy,
)
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.spec import Budget
from skyhook_planner.model.vocabulary import LabelSelector
from skyhook_planner.rules.batches import assign, batch_size, evaluate, reset_enabled
from skyhook_planner.rules.ordering import node_order_key
from skyhook_schemas.status import BatchState

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _policy(default: dict[str, Any], *compartments: dict[str, Any], **extra: Any) -> Policy:
    return decode_policy("p", {"default": default, "compartments": list(compartments), **extra})


# --- decoding ---------------------------------------------------------------------------------


def test_defaults_are_applied_on_read() -> None:
    policy = _policy(
        {"budget": {"percent": 50}, "strategy": {"linear": {}}},
        {"name": "gpu", "selector": {"matchLabels": {"gpu": "yes"}}, "budget": {"count": 2}},
        {
            "name": "cpu",
            "selector": {},
            "budget": {"count": 1},
            "strategy": {"exponential": {"initialBatch": 3}},
        },
    )
    assert policy.default.strategy == Strategy(
        "linear", initial_batch=1, batch_threshold=100, failure_threshold=None, safety_limit=50
    )
    assert policy.default.strategy.delta == 1
    gpu, cpu = policy.compartments
    assert gpu.strategy is None  # no inheritance from the default strategy
    assert cpu.strategy == Strategy("exponential", initial_batch=3, growth_factor=2)
    assert policy.reset_batch_state is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({}, "spec.default: required", id="no-default"),
        pytest.param(
            {"default": {"budget": {}, "strategy": {"fixed": {}}}},
            "spec.default.budget: exactly one of percent or count must be set",
            id="budget-neither",
        ),
        pytest.param(
            {"default": {"budget": {"percent": 5, "count": 1}, "strategy": {"fixed": {}}}},
            "spec.default.budget: exactly one of percent or count must be set",
            id="budget-both",
        ),
        pytest.param(
            {"default": {"budget": {"percent": 0}, "strategy": {"fixed": {}}}},
            "spec.default.budget.percent: 0 is out of range (allowed 1..100)",
            id="percent-0",
        ),
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}, "linear": {}}}},
            "spec.default.strategy: exactly one of fixed, linear, or exponential must be set",
            id="two-strategies",
        ),
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"exponential": {"growthFactor": 1}}}},
            "spec.default.strategy.exponential.growthFactor: 1 is out of range (allowed >= 2)",
            id="growth-1",
        ),
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"delta": 2}}}},
            "spec.default.strategy.fixed.delta: unknown field for a fixed strategy",
            id="delta-on-fixed",
        ),
        pytest.param(
            {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "compartments": [{"name": "__default__", "selector": {}, "budget": {"count": 1}}],
            },
            'spec.compartments[0].name: "__default__" is reserved',
            id="reserved-name",
        ),
        pytest.param(
            {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "compartments": [
                    {"name": "a", "selector": {}, "budget": {"count": 1}},
                    {"name": "a", "selector": {}, "budget": {"count": 1}},
                ],
            },
            'spec.compartments[1].name: "a" is not unique',
            id="duplicate-name",
        ),
        pytest.param(
            {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "compartments": [
                    {
                        "name": "a",
                        "selector": {"matchExpressions": [{"key": "k", "operator": "In"}]},
                        "budget": {"count": 1},
                    }
                ],
            },
            "spec.compartments[0].selector.matchExpressions[0].values: must not be empty",
            id="bad-selector",
        ),
    ],
)
def test_errors_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        decode_policy("p", spec)
    assert any(m.startswith(message) for m in caught.value.messages), caught.value.messages


# --- assignment -------------------------------------------------------------------------------


def _node(name: str, age: int = 0, **labels: str) -> NodeView:
    return NodeView(name, labels=labels, created=T0 + timedelta(minutes=age))


def _compartment(name: str, kind: str | None, budget: Budget, **labels: str) -> Compartment:
    return Compartment(
        name, LabelSelector(labels), budget, Strategy(kind) if kind is not None else None
    )


DEFAULT = Compartment("__default__", LabelSelector(), Budget(percent=100), Strategy("fixed"))


@pytest.mark.parametrize(
    ("compartments", "labels", "expected"),
    [
        pytest.param(
            [
                _compartment("us-west", "exponential", Budget(count=2), region="us-west"),
                _compartment("production", "exponential", Budget(count=2), env="prod"),
                _compartment(
                    "prod-us-west", "fixed", Budget(count=1), region="us-west", env="prod"
                ),
            ],
            {"region": "us-west", "env": "prod"},
            "prod-us-west",
            id="safest-strategy-wins",
        ),
        pytest.param(
            [
                _compartment("wide", "fixed", Budget(percent=50), tier="a"),
                _compartment("narrow", "fixed", Budget(percent=80), tier="a", rack="1"),
            ],
            {"tier": "a", "rack": "1"},
            "narrow",  # 80 % of 2 nodes = 1 < 50 % of 10 nodes = 5
            id="smaller-capacity-wins",
        ),
        pytest.param(
            [
                _compartment("b", "linear", Budget(count=1), x="1"),
                _compartment("a", "linear", Budget(count=1), x="1"),
            ],
            {"x": "1"},
            "a",
            id="then-name",
        ),
        pytest.param(
            [
                _compartment("none", None, Budget(count=1), x="1"),
                _compartment("exp", "exponential", Budget(count=5), x="1"),
            ],
            {"x": "1"},
            "exp",
            id="no-strategy-last",
        ),
        pytest.param(
            [_compartment("gpu", "fixed", Budget(count=1), gpu="yes")],
            {"gpu": "no"},
            "__default__",
            id="no-match-default",
        ),
    ],
)
def test_assignment_tie_breaks(
    compartments: list[Compartment], labels: dict[str, str], expected: str
) -> None:
    policy = Policy("p", DEFAULT, tuple(compartments))
    # 10 nodes in the wide tier, the first two also on rack 1: the capacities of the
    # smaller-capacity example.
    nodes = [_node("target", 0, **labels)] + [
        _node(f"other-{i}", i + 1, tier="a", **({"rack": "1"} if i == 0 else {})) for i in range(9)
    ]
    assigned = assign(policy, nodes, node_order_key)
    assert [n.name for n in assigned[expected]][:1] == ["target"]


node_labels = st.fixed_dictionaries(
    {}, optional={"a": st.sampled_from(["1", "2"]), "b": st.sampled_from(["1", "2"])}
)


@given(
    st.lists(node_labels, max_size=25),
    st.lists(
        st.tuples(
            st.sampled_from([*["fixed", "linear", "exponential"], None]),
            st.integers(1, 5),
            st.sampled_from([{"a": "1"}, {"a": "2"}, {"b": "1"}, {"a": "1", "b": "1"}, {}]),
        ),
        max_size=4,
    ),
    st.randoms(),
)
def test_assignment_is_a_partition_independent_of_input_order(
    labels: list[dict[str, str]],
    specs: list[tuple[str | None, int, dict[str, str]]],
    rng: random.Random,
) -> None:
    policy = Policy(
        "p",
        DEFAULT,
        tuple(
            _compartment(f"c{i}", kind, Budget(count=count), **selector)
            for i, (kind, count, selector) in enumerate(specs)
        ),
    )
    nodes = [_node(f"n{i:02}", i % 3, **lab) for i, lab in enumerate(labels)]
    assigned = assign(policy, nodes, node_order_key)
    flat = sorted(n.name for group in assigned.values() for n in group)
    assert flat == sorted(n.name for n in nodes)
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    assert assign(policy, shuffled, node_order_key) == assigned
    for name, group in assigned.items():
        compartment = next(c for c in policy.all if c.name == name)
        assert all(compartment.selector.matches(n.labels) for n in group)
        assert group == sorted(group, key=node_order_key)


# --- batches ----------------------------------------------------------------------------------


def _strategy_compartment(
    kind: str | None, budget: Budget | None = None, **fields: Any
) -> Compartment:
    return Compartment(
        "c",
        LabelSelector(),
        budget or Budget(percent=100),
        Strategy(kind, **fields) if kind is not None else None,
    )


def _rollout(
    compartment: Compartment, nodes: int, failures: dict[int, int] | None = None
) -> tuple[list[int], BatchState]:
    """Batch sizes of a rollout where batch k (from 1) has failures[k] failing nodes, until no
    node remains or the compartment stops."""
    failures = failures or {}
    state, complete, failed = BatchState(), 0, 0
    sizes: list[int] = []
    while complete + failed < nodes and not state.should_stop and len(sizes) <= nodes:
        size = batch_size(compartment, state, nodes)
        sizes.append(size)
        bad = failures.get(len(sizes), 0)
        complete, failed = complete + size - bad, failed + bad
        assert compartment.strategy is not None
        state = evaluate(compartment.strategy, state, complete=complete, failed=failed, nodes=nodes)
    return sizes, state


@pytest.mark.parametrize(
    ("compartment", "nodes", "expected"),
    [
        pytest.param(_strategy_compartment("linear", delta=2), 10, [1, 3, 5, 1], id="linear-1-2"),
        pytest.param(_strategy_compartment("exponential"), 10, [1, 2, 4, 3], id="exponential-x2"),
        pytest.param(
            _strategy_compartment("fixed", initial_batch=3), 10, [3, 3, 3, 1], id="fixed-3"
        ),
        pytest.param(_strategy_compartment("linear"), 8, [1, 2, 3, 2], id="chainsaw-linear"),
        pytest.param(_strategy_compartment("exponential"), 5, [1, 2, 2], id="chainsaw-critical"),
        pytest.param(_strategy_compartment("exponential"), 6, [1, 2, 3], id="chainsaw-standard"),
        pytest.param(
            _strategy_compartment("exponential", initial_batch=2), 4, [2, 2], id="chainsaw-test"
        ),
    ],
)
def test_batch_sizes_when_every_batch_succeeds(
    compartment: Compartment, nodes: int, expected: list[int]
) -> None:
    assert _rollout(compartment, nodes)[0] == expected


def test_no_strategy_batches_are_the_ceiling() -> None:
    assert batch_size(_strategy_compartment(None, Budget(count=3)), BatchState(), 6) == 3
    assert batch_size(_strategy_compartment(None, Budget(percent=25)), BatchState(), 10) == 2


def test_failures_stop_below_the_safety_limit() -> None:
    compartment = _strategy_compartment("linear", failure_threshold=2)
    sizes, state = _rollout(compartment, 10, failures={2: 1, 3: 1})
    assert sizes == [1, 2, 1]
    assert state == BatchState(
        current_batch=4,
        consecutive_failures=2,
        completed_nodes=2,
        failed_nodes=2,
        should_stop=True,
        last_batch_size=1,
        last_batch_failed=True,
    )


def test_failures_past_the_safety_limit_do_not_stop() -> None:
    compartment = _strategy_compartment("linear", failure_threshold=1)
    # 1, 2, 3 succeed (progress 60 %), then a failing batch of 4: no stop, and it grows.
    sizes, state = _rollout(compartment, 10, failures={4: 1})
    assert sizes == [1, 2, 3, 4]
    assert not state.should_stop and state.last_batch_failed
    # The same state over 20 nodes (progress exactly 50 %): the next batch still grows.
    assert batch_size(compartment, state, 20) == 5


@pytest.mark.parametrize(
    ("before", "complete", "failed", "after"),
    [
        pytest.param(BatchState(current_batch=0), 3, 0, BatchState(), id="zero-batch-becomes-1"),
        pytest.param(
            BatchState(completed_nodes=3), 2, 0, BatchState(completed_nodes=2), id="count-went-down"
        ),
        pytest.param(
            BatchState(completed_nodes=3, failed_nodes=1),
            3,
            1,
            BatchState(completed_nodes=3, failed_nodes=1),
            id="nothing-changed",
        ),
        pytest.param(
            BatchState(completed_nodes=2, failed_nodes=1),
            3,
            0,
            BatchState(completed_nodes=3, failed_nodes=0),
            id="failed-node-recovered",
        ),
    ],
)
def test_evaluation_only_moves_the_checkpoint(
    before: BatchState, complete: int, failed: int, after: BatchState
) -> None:
    assert evaluate(Strategy("fixed"), before, complete=complete, failed=failed, nodes=10) == after


def test_batch_state_round_trips_with_upstream_keys() -> None:
    state = BatchState(current_batch=3, completed_nodes=3, last_batch_size=2)
    assert state.to_json() == {"currentBatch": 3, "completedNodes": 3, "lastBatchSize": 2}
    assert BatchState.from_json(state.to_json()) == state
    assert BatchState.from_json({"shouldStop": True, "currentBatch": "x"}) == BatchState(
        should_stop=True
    )
    assert BatchState.from_json(None) == BatchState()


@pytest.mark.parametrize(
    ("skyhook", "policy", "expected"),
    [
        pytest.param(None, None, True, id="neither-set-resets-as-documented"),
        pytest.param(None, True, True, id="policy"),
        pytest.param(False, True, False, id="skyhook-overrides"),
        pytest.param(True, None, True, id="skyhook"),
    ],
)
def test_reset_setting(skyhook: bool | None, policy: bool | None, expected: bool) -> None:
    assert reset_enabled(skyhook, Policy("p", DEFAULT, (), policy)) is expected


strategies = st.one_of(
    st.builds(Strategy, st.just("fixed"), initial_batch=st.integers(1, 20)),
    st.builds(
        Strategy, st.just("linear"), initial_batch=st.integers(1, 20), delta=st.integers(1, 5)
    ),
    st.builds(
        Strategy,
        st.just("exponential"),
        initial_batch=st.integers(1, 20),
        growth_factor=st.integers(2, 4),
    ),
)


@given(strategies, st.integers(1, 200))
def test_successful_rollouts_grow_and_cover_every_node(strategy: Strategy, nodes: int) -> None:
    compartment = Compartment("c", LabelSelector(), Budget(percent=100), strategy)
    sizes, _ = _rollout(compartment, nodes)
    assert sum(sizes) == nodes
    assert all(size >= 1 for size in sizes)
    # Monotone growth, except the last batch, which takes whatever remains.
    assert all(a <= b for a, b in itertools.pairwise(sizes[:-1]))


@given(
    strategies,
    st.integers(1, 100),
    st.data(),
)
def test_a_batch_never_exceeds_what_remains(
    strategy: Strategy, nodes: int, data: st.DataObject
) -> None:
    processed = data.draw(st.integers(0, nodes - 1))
    failed = data.draw(st.integers(0, processed))
    state = BatchState(
        completed_nodes=processed - failed,
        failed_nodes=failed,
        last_batch_size=data.draw(st.integers(0, nodes)),
        last_batch_failed=data.draw(st.booleans()),
    )
    size = batch_size(Compartment("c", LabelSelector(), Budget(count=1), strategy), state, nodes)
    assert 1 <= size <= nodes - processed
