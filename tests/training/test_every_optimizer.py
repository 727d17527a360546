"""Every built-in Keras optimizer, accumulated, equals big-batch training with
the same optimizer (the independent reference, tests/reference.py): ragged
micro-batches, a partial window at each epoch's end, two epochs."""

import inspect

import keras
import numpy as np
import pytest
from helpers import assert_same_weights, make_mlp, start_of
from reference import dataset_of, group_windows, max_weight_difference, micro_batches, train_big_batches

import gaviz

K, EPOCHS = 4, 2
OPTIMIZERS = {
    "SGD": lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "Adam": lambda: keras.optimizers.Adam(0.01, amsgrad=True),
    "AdamW": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1),
    "Adamax": lambda: keras.optimizers.Adamax(0.01),
    "Adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "Adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "RMSprop": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "Nadam": lambda: keras.optimizers.Nadam(0.01),
    "Ftrl": lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01,
                                          l2_regularization_strength=0.01),
    "Lion": lambda: keras.optimizers.Lion(0.003),
    "Lamb": lambda: keras.optimizers.Lamb(0.01),
    "Adafactor": lambda: keras.optimizers.Adafactor(0.05),
    "Muon": lambda: keras.optimizers.Muon(0.01),
    "ScheduleFreeAdamW": lambda: keras.optimizers.ScheduleFreeAdamW(0.01),
    "Adam with use_ema": lambda: keras.optimizers.Adam(0.01, use_ema=True,
                                                       ema_overwrite_frequency=2),
}
#: Not optimizers of their own: a wrapper (tested with mixed precision), a
#: combiner of others, and the base class.
NOT_AN_OPTIMIZER = {"LossScaleOptimizer", "MultiOptimizer", "Optimizer"}


def test_every_built_in_optimizer_is_listed():
    built_in = {name for name, value in vars(keras.optimizers).items()
                if inspect.isclass(value) and issubclass(value, keras.optimizers.Optimizer)}
    assert built_in - NOT_AN_OPTIMIZER <= {name.split(" ")[0] for name in OPTIMIZERS}, (
        "a Keras optimizer gaviz is not tested with: add it to OPTIMIZERS")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_accumulated_equals_the_big_batch(regression_data, name):
    x, y = regression_data
    micro = micro_batches(x, y, [3, 17, 5, 9, 1, 20, 13, 2, 30])  # windows of 34, 36 and a tail of 30
    model = make_mlp()
    start = start_of(model)
    trainer = gaviz.AccumulationTrainer(model, OPTIMIZERS[name](), "mse", K)
    history = trainer.fit(dataset_of(micro), epochs=EPOCHS)
    reference = make_mlp()
    optimizer = OPTIMIZERS[name]()
    ref_losses = train_big_batches(reference, optimizer, keras.losses.mean_squared_error,
                                   group_windows(micro, K, "flush", EPOCHS))
    optimizer.finalize_variable_values(reference.trainable_variables)  # as fit does (EMA)
    assert len(history) == len(ref_losses) == 6
    np.testing.assert_allclose(history.loss, ref_losses, rtol=1e-5)
    assert_same_weights(model, reference, start, terms=36)  # the largest window's rows
    assert max_weight_difference(model, make_mlp()) > 1e-3  # it trained
