"""The window loop built from its parts (gaviz.training.window_loop), with no trainer:
a micro-step, a window cycle, a state, a strategy, hooks and a rule."""

import keras
import pytest
import tensorflow as tf
from helpers import assert_same_weights, clone, make_mlp, start_of
from reference import dataset_of, group_windows, micro_batches, train_big_batches

from gaviz.training import rules
from gaviz.training.forward_backward import ForwardBackward, WeightPenalty
from gaviz.training.objective import Objective
from gaviz.training.state import TrainerState
from gaviz.training.window import WindowResult
from gaviz.training.window_cycle import WindowCycle
from gaviz.training.window_loop import Hooks, WindowLoop, start_afresh

K, LR = 3, 0.1
SIZES = [4, 6, 3, 5, 2, 7, 4]  # ragged, 7 micro-batches: two full windows and a tail of 1


@pytest.fixture
def micro(regression_data):
    x, y = regression_data
    return micro_batches(x[:31], y[:31], SIZES)


def build_loop(model, micro, hooks=Hooks(), rule=rules.EXACT, tail="flush"):
    """A window loop from its parts, as a trainer would build it."""
    optimizer = keras.optimizers.SGD(LR)
    model.compile(optimizer=optimizer, loss="mse")
    objective = Objective(model._compile_loss, None)
    x, y = micro[0][:2]
    objective.build(tf.constant(y), model(x))
    strategy = tf.distribute.get_strategy()
    state = TrainerState(strategy)
    state.build(model.trainable_variables, carry=tail == "carry" or rule.sums_outlive_updates)
    optimizer.build(model.trainable_variables)
    micro_step = ForwardBackward(model, optimizer, objective)
    cycle = WindowCycle(optimizer, micro_step.variables, rule, penalty=WeightPenalty(model),
                        skipped_windows=state.skipped_windows)
    return WindowLoop(micro_step, cycle, state, strategy, hooks, rule, tail, capacity=8)


def run_epoch(loop, micro, max_windows=8):
    """One epoch through the iterator function; the packed results as WindowResults."""
    iterator = iter(dataset_of(micro))
    function = loop.iterator_function(iterator)
    results = []
    while not results or not results[-1].exhausted:
        rows, done = function(iterator, tf.constant(max_windows), tf.constant(K, tf.int64))
        results += [WindowResult.unpack(r) for r in rows.numpy()[: int(done)]]
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
    assert int(done) == 1 and WindowResult.unpack(rows.numpy()[0]).exhausted


def test_a_carried_window_waits_in_the_state_for_the_next_epoch(micro):
    loop = build_loop(make_mlp(), micro, tail="carry")
    results = run_epoch(loop, micro)
    assert [r.applied for r in results] == [True, True, False]
    assert int(loop.state.micro_steps_in_window.numpy()) == 1
    assert float(loop.state.window.rows.read_value()) == 4.0
    first = run_epoch(loop, micro)[0]
    assert first.applied and first.micro_steps == 3 and first.consumed == 2


def test_the_hooks_are_called_where_the_loop_says(micro):
    calls = {"micro": tf.Variable(0), "reduce": tf.Variable(0), "next": tf.Variable(0)}

    def counted(name, function):
        def hook(sums):
            calls[name].assign_add(1)
            return function(sums)
        return hook

    hooks = Hooks(counted("micro", lambda s: s), counted("reduce", Hooks().reduce_window),
                  counted("next", start_afresh))
    run_epoch(build_loop(make_mlp(), micro, hooks=hooks), micro)
    assert {name: int(v.numpy()) for name, v in calls.items()} == {"micro": 7, "reduce": 3, "next": 3}


def test_the_rule_steps_the_optimizer_on_every_micro_batch_when_it_says_so(micro):
    loop = build_loop(make_mlp(), micro, rule=rules.Rule(apply_each_micro_batch=True))
    run_epoch(loop, micro)
    assert int(loop.cycle.optimizer.iterations.numpy()) == len(SIZES) + 3


def test_the_rules_next_window_decides_what_the_next_window_starts_from(micro):
    def keep_the_gradients(sums, fresh, variables):
        return fresh._replace(gradients=sums.gradients)

    rule = rules.Rule(next_window=keep_the_gradients, sums_outlive_updates=True)
    loop = build_loop(make_mlp(), micro, rule=rule)
    run_epoch(loop, micro)
    # The state keeps the sums between calls, and they were never zeroed.
    assert loop.state.carries
    assert float(tf.reduce_sum(tf.abs(loop.state.window.gradient_sums[0]))) > 0
