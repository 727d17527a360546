"""The trainer's state between graph calls (gaviz.training.loop.state): counters, and a
carried window kept and read back."""

import tensorflow as tf

from gaviz.training.loop.state import TrainerState
from gaviz.training.window import arithmetic


def variables():
    return [tf.Variable(tf.ones((2, 3))), tf.Variable(tf.ones(3, dtype=tf.float64))]


def test_counters_start_at_zero_and_nothing_is_carried_by_default():
    state = TrainerState(tf.distribute.get_strategy())
    counters = (state.micro_step, state.micro_steps_in_window, state.skipped_windows,
                state.array_cursor)
    assert [int(c.numpy()) for c in counters] == [0, 0, 0, 0]
    state.build(variables(), carries=False)
    assert not state.carries and state.window.gradient_sums == []
    loaded = state.window.read(variables())
    assert float(loaded.loss_sum) == 0.0 and all(float(tf.reduce_sum(g)) == 0 for g in loaded.gradients)


def test_a_carried_window_is_stored_and_loaded_back():
    state = TrainerState(tf.distribute.get_strategy())
    weights = variables()
    state.build(weights, carries=True)
    assert state.carries and [a.dtype for a in state.window.gradient_sums] == [tf.float32,
                                                                              tf.float64]
    sums = arithmetic.WindowSums([tf.fill((2, 3), 2.0), tf.fill([3], tf.constant(3.0, tf.float64))],
                             tf.constant(5.0), tf.constant(7.0), tf.constant(7.0), tf.constant(4.0))
    state.window.write(sums)
    loaded = state.window.read(weights)
    assert [float(tf.reduce_sum(g)) for g in loaded.gradients] == [12.0, 9.0]
    assert [float(v) for v in loaded[1:]] == [5.0, 7.0, 7.0, 4.0]
    state.build(weights, carries=True)  # building again keeps what was carried
    assert float(tf.reduce_sum(state.window.read(weights).gradients[0])) == 12.0


def test_state_travels_in_a_checkpoint(tmp_path):
    state = TrainerState(tf.distribute.get_strategy())
    state.build(variables(), carries=True)
    state.micro_step.assign(11)
    state.micro_steps_in_window.assign(2)
    state.window.gradient_sums[0].assign(tf.fill((2, 3), 4.0))
    path = tf.train.Checkpoint(state=state).write(str(tmp_path / "state"))
    restored = TrainerState(tf.distribute.get_strategy())
    restored.build(variables(), carries=True)
    tf.train.Checkpoint(state=restored).read(path).assert_consumed()
    assert (int(restored.micro_step.numpy()), int(restored.micro_steps_in_window.numpy())) == (11, 2)
    assert float(tf.reduce_sum(restored.window.gradient_sums[0])) == 24.0
