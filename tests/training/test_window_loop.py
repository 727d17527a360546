"""The window loop built from its parts (gaviz.training.loop.window_loop), with no trainer:
a micro-step, a window cycle, a state, a strategy, a rule and a tail."""

import keras
import pytest
import tensorflow as tf
from helpers import assert_same_weights, clone, make_mlp, start_of
from reference import dataset_of, group_windows, micro_batches, train_big_batches

from gaviz.training.loop import window_loop
from gaviz.training.loop.forward_backward import ForwardBackward, WeightPenalty
from gaviz.training.loop.state import TrainerState
from gaviz.training.loop.window_loop import WindowLoop
from gaviz.training.loss.objective import Objective
from gaviz.training.window import rules, window_cycle
from gaviz.training.window.arithmetic import WindowResult
from gaviz.training.window.tail import Tail
from gaviz.training.window.window_cycle import WindowCycle

K, LR = 3, 0.1
SIZES = [4, 6, 3, 5, 2, 7, 4]  # ragged, 7 micro-batches: two full windows and a tail of 1


@pytest.fixture
def micro(regression_data):
    x, y = regression_data
    return micro_batches(x[:31], y[:31], SIZES)


def build_loop(model, micro, rule=rules.EXACT, tail="flush"):
    """A window loop from its parts, as a trainer would build it."""
    optimizer = keras.optimizers.SGD(LR)
    model.compile(optimizer=optimizer, loss="mse")
    objective = Objective(model._compile_loss, None)
    x, y = micro[0][:2]
    objective.build(tf.constant(y), model(x))
    strategy = tf.distribute.get_strategy()
    state = TrainerState(strategy)
    state.build(model.trainable_variables, carries=tail == "carry" or rule.carries_sums)
    optimizer.build(model.trainable_variables)
    micro_step = ForwardBackward(model, optimizer, objective)
    cycle = WindowCycle(optimizer, micro_step.variables, rule, penalty=WeightPenalty(model),
                        skipped_windows=state.skipped_windows)
    return WindowLoop(micro_step, cycle, state, strategy, rule, Tail(tail), capacity=8)


def run_epoch(loop, micro, max_windows=8):
    """One epoch through the iterator function; the packed results as WindowResults."""
    iterator = iter(dataset_of(micro))
    function = loop.iterator_function(iterator)
    results = []
    while not results or not results[-1].exhausted:
        rows, done = function(iterator, tf.constant(max_windows), tf.constant(K, tf.int64))
        results += [WindowResult.read(r) for r in rows.numpy()[: int(done)]]
    return results


@pytest.mark.parametrize("tail, updates", [("flush", 3), ("drop", 2)])
def test_the_loop_alone_equals_big_batches(micro, tail, updates):
    model = make_mlp()
    reference, start = clone(model), start_of(model)
    loop = build_loop(model, micro, tail=tail)
    results = run_epoch(loop, micro)
    assert [r.applied for r in results] == [True] * 2 + [tail == "flush"]
    assert [r.micro_steps for r in results] == [3, 3, 1]
    assert [r.rows for r in results] == [13.0, 14.0, 4.0]
    train_big_batches(reference, keras.optimizers.SGD(LR), keras.losses.MeanSquaredError(reduction=None),
                      group_windows(micro, K, tail, 1))
    assert int(loop.cycle.optimizer.iterations.numpy()) == updates
    assert_same_weights(model, reference, start, terms=14)  # the largest window's rows
    assert int(loop.state.micro_step.numpy()) == len(SIZES) and loop.tracing_count == 1


def test_one_call_runs_several_windows_and_stops_at_the_end_of_the_data(micro):
    loop = build_loop(make_mlp(), micro)
    iterator = iter(dataset_of(micro))
    rows, done = loop.iterator_function(iterator)(iterator, tf.constant(2), tf.constant(K, tf.int64))
    assert int(done) == 2
    rows, done = loop.iterator_function(iterator)(iterator, tf.constant(8), tf.constant(K, tf.int64))
    assert int(done) == 1 and WindowResult.read(rows.numpy()[0]).exhausted


def test_a_carried_window_waits_in_the_state_for_the_next_epoch(micro):
    loop = build_loop(make_mlp(), micro, tail="carry")
    results = run_epoch(loop, micro)
    assert [r.applied for r in results] == [True, True, False]
    assert int(loop.state.micro_steps_in_window.numpy()) == 1
    assert float(loop.state.window.rows.read_value()) == 4.0
    first = run_epoch(loop, micro)[0]
    assert first.applied and first.micro_steps == 3 and first.consumed == 2


@pytest.mark.parametrize("rule, where", [(rules.EXACT, ["window"]),
                                         (rules.Rule(reduce_each_micro_batch=True), ["micro"])])
def test_the_rule_says_where_the_sums_are_reduced_across_replicas(micro, monkeypatch, rule, where):
    """One all-reduce per window, or (the rule's variation) one per micro-batch,
    traced once in the loop's body (benchmarks/bench_allreduce.py times both on
    two replicas)."""
    seen, all_reduce = [], window_cycle.all_reduce

    def spy(sums):
        seen.append("window" if "all_reduce" in tf.get_current_name_scope() else "micro")
        return all_reduce(sums)

    monkeypatch.setattr(window_loop.window_cycle, "all_reduce", spy)
    loop = build_loop(make_mlp(), micro, rule=rule)
    results = run_epoch(loop, micro)
    assert seen == where
    assert [r.micro_steps for r in results] == [3, 3, 1]


def test_the_rule_steps_the_optimizer_on_every_micro_batch_when_it_says_so(micro):
    loop = build_loop(make_mlp(), micro, rule=rules.Rule(apply_each_micro_batch=True))
    run_epoch(loop, micro)
    assert int(loop.cycle.optimizer.iterations.numpy()) == len(SIZES) + 3


def test_the_rules_reset_decides_what_the_next_window_starts_from(micro):
    def keep_the_gradients(sums, fresh, variables):
        return fresh._replace(gradients=sums.gradients)

    rule = rules.Rule(reset=keep_the_gradients, carries_sums=True)
    loop = build_loop(make_mlp(), micro, rule=rule)
    run_epoch(loop, micro)
    # The state keeps the sums between calls, and they were never zeroed.
    assert loop.state.carries
    assert float(tf.reduce_sum(tf.abs(loop.state.window.gradient_sums[0]))) > 0
