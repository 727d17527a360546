"""The probes behind :func:`gaviz.diagnose`: small seeded problems that turn
each accumulation defect into a number.

Every probe trains the same kind of model, a linear map without bias
(``y = x @ w``), on micro-batches built so that micro-batch ``i`` touches
weight ``i`` only: each of its samples is zero everywhere but in input
coordinate ``i``. With plain SGD a weight then moves by exactly
``learning_rate x`` what its micro-batch contributed to the applied
gradients, so a subject's weight change divided by the exact trainer's,
weight by weight, reads how much each micro-batch counted::

    contribution_i = (w_subject_i - w0_i) / (w_exact_i - w0_i)     # 1 when exact

A micro-batch counted twice reads 2, a dropped one 0, one divided by ``k``
too many ``1/k``: the probes need no optimization to converge and no
threshold on a loss curve, only arithmetic that rounding does not blur.

Five probes, each a :class:`Probe` (what to feed) then an
:class:`Observation` (the weights that came out):

- ``windows``: three full windows of equal micro-batches (scale, steps per
  window, re-applied windows, wiped weights);
- ``ragged``: one full window of micro-batches of 6 and 2 samples, and a
  model with an L2-penalized kernel that no sample reaches (mean of means,
  the penalty counted per micro-batch);
- ``tail``: one full window and a partial one, over two epochs (the partial
  window dropped, under-scaled or carried);
- ``clipping``: one full window with ``global_clipnorm`` below every
  micro-batch's gradient norm (clipping each micro-batch);
- ``ema``: the ``windows`` probe with an optimizer that keeps a moving
  average of the weights (``use_ema=True``), which is what it reads: a
  weight that moves in window 2 only, by ``d``, has an average
  ``(1 - m^2) d`` from where it started after the three updates when the
  average moves once per update, ``(1 - m^(k+1)) d`` when it moves on every
  micro-step (the momentum ``m`` is 0 at the first update, so the average of a
  weight that moves in window 1 is the weight itself, whatever moves it).

The other probes' optimizer clips at a norm no gradient here reaches, so a
trainer that needs a clipping optimizer (``per_micro_batch_clipping``) runs
on every probe. Only the ``ema`` probe's keeps a moving average:
``Model.fit`` and the trainer copy it into the model when they end, so on the
other probes it would hide what the weights did.
"""

from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from gaviz.gallery.measure import flat_weights

#: Full windows in the ``windows`` probe: enough for growth to show a trend.
WINDOWS = 3
#: Samples per micro-batch wherever the micro-batches are equal.
MICRO_BATCH_SIZE = 4
#: The ``ragged`` probe's micro-batch sizes, repeated: 6, 2, 6, 2...
RAGGED_SIZES = (6, 2)
#: SGD's learning rate: each weight moves by about 0.1 / k, far above float32's
#: resolution at weights near 1.
LEARNING_RATE = 0.1
#: L2 factor of the penalized kernel: the exact update moves it by 2 x 0.1 x 0.1.
PENALTY = 0.1
#: Penalized weights no sample reaches (``ragged`` probe).
PENALIZED_WEIGHTS = 2
#: ``global_clipnorm`` of the probes that are not about clipping: never reached.
LOOSE_CLIPNORM = 1e6
#: ``ema_momentum`` of the ``ema`` probe's optimizer: the average of a weight that
#: moved in window 2 lags it by 0.8^2 = 0.64 of the move when exact, by 0.8^(k+1)
#: (0.33 at k=4, 0.02 at k=16) when it moves on every micro-step: far apart, and
#: far above float32's resolution.
EMA_MOMENTUM = 0.8


class Probe(NamedTuple):
    """What one probe feeds the subject and the exact trainer.

    Attributes:
        name: ``"windows"``, ``"ragged"``, ``"tail"``, ``"clipping"`` or ``"ema"``.
        setup: the probe in a phrase, for tables.
        sizes: samples in each micro-batch, in order; micro-batch ``i``
            touches weight ``i`` only.
        micro_batches: one epoch of ``(x, y)`` float32 arrays.
        initial: the data kernel's initial weights, shape ``(inputs,)``.
        epochs: epochs to train (the subject is called once per epoch).
        penalized: whether the model has the L2-penalized kernel.
        clipnorm: the optimizer's ``global_clipnorm``.
        ema_momentum: the optimizer's ``ema_momentum`` (``use_ema=True``); None:
            the optimizer keeps no moving average.
    """

    name: str
    setup: str
    sizes: tuple
    micro_batches: list
    initial: np.ndarray
    epochs: int
    penalized: bool
    clipnorm: float
    ema_momentum: float | None = None


class Observation(NamedTuple):
    """The weights a run produced, as flat float64 vectors.

    Attributes:
        start: weights before training (data kernel, then the penalized one).
        after_epoch: weights after each epoch (fewer if the run stopped).
        optimizer_steps: ``optimizer.iterations`` at the end: how many times
            the subject stepped the optimizer it was given.
        error: a ``FloatingPointError``'s message if a trainer refused a
            non-finite update, else None.
        average: the moving average of the weights at the end (probes whose
            optimizer keeps one), as :func:`moving_average` reads it; None when
            the probe's optimizer keeps none or the subject moved none.
    """

    start: np.ndarray
    after_epoch: list
    optimizer_steps: int
    error: str | None
    average: np.ndarray | None = None


def inputs(accumulation_steps: int) -> int:
    """Width of the data kernel: one weight per micro-batch of the longest probe."""
    return WINDOWS * accumulation_steps


def tail_length(accumulation_steps: int) -> int:
    """Micro-batches in the ``tail`` probe's partial window: half a window, at least 1."""
    return max(1, accumulation_steps // 2)


def make_probes(accumulation_steps: int, seed: int = 0) -> list[Probe]:
    """The five probes, in the order they are judged."""
    k = accumulation_steps
    rng = np.random.default_rng(seed)
    width = inputs(k)
    initial = rng.uniform(0.5, 1.5, width)
    ragged = tuple(RAGGED_SIZES[i % len(RAGGED_SIZES)] for i in range(k))
    m = tail_length(k)
    equal = MICRO_BATCH_SIZE

    def probe(name, setup, sizes, epochs=1, penalized=False, clipnorm=LOOSE_CLIPNORM,
              start=initial):
        return Probe(name, setup, tuple(sizes), _micro_batches(sizes, start, rng),
                     start, epochs, penalized, clipnorm)

    windows = probe("windows", f"{WINDOWS} windows of {k} micro-batches of {equal}",
                    [equal] * (WINDOWS * k))
    sizes_text = ", ".join(str(s) for s in ragged)
    ragged_probe = probe("ragged", f"1 window of micro-batches of {sizes_text}; an L2 penalty",
                         ragged, penalized=True)
    tail = probe("tail", f"1 window of {k} and a partial one of {m} micro-batches, 2 epochs",
                 [equal] * (k + m), epochs=2)
    clipping = probe("clipping", f"1 window of {k} micro-batches of {equal}; global_clipnorm",
                     [equal] * k)
    # Below every micro-batch's gradient norm and the window's: both get clipped.
    norms = micro_gradient_norms(clipping)
    clipping = clipping._replace(clipnorm=float(0.5 * norms.min() / np.sqrt(k)))
    # From 0: the average's moves are a fraction of a weight's, and float32 resolves
    # them finer near 0 than near 1 (the reading of moves per update magnifies them).
    ema = probe("ema", f"{WINDOWS} windows of {k} micro-batches of {equal}; use_ema=True, "
                f"ema_momentum={EMA_MOMENTUM}", [equal] * (WINDOWS * k), start=np.zeros(width))
    ema = ema._replace(ema_momentum=EMA_MOMENTUM)
    return [windows, ragged_probe, tail, clipping, ema]


def _micro_batches(sizes, initial, rng):
    """Micro-batch ``i``: samples ``a * e_i`` with targets ``a * w0_i - r``.

    Every sample's residual at the start is ``r`` in [0.5, 1.5], so every
    gradient component has the same sign and none is near zero.
    """
    out = []
    for i, size in enumerate(sizes):
        a = rng.uniform(0.5, 1.5, size)
        r = rng.uniform(0.5, 1.5, size)
        x = np.zeros((size, len(initial) + PENALIZED_WEIGHTS), np.float32)
        x[:, i] = a
        y = (a * initial[i] - r)[:, None].astype(np.float32)
        out.append((x, y))
    return out


def micro_gradient_norms(probe: Probe) -> np.ndarray:
    """Norm of each micro-batch's mean-squared-error gradient at the start.

    Micro-batch ``i`` has one non-zero component, ``mean(2 a (a w0_i - y))``.
    """
    norms = []
    for i, (x, y) in enumerate(probe.micro_batches):
        a = x[:, i].astype(np.float64)
        norms.append(abs(np.mean(2 * a * (a * probe.initial[i] - y[:, 0]))))
    return np.array(norms)


def make_model(probe: Probe) -> keras.Model:
    """The linear model, with the probe's initial weights.

    The penalized kernel reads input columns that are always zero: the
    penalty is the only thing that moves it.
    """
    width = len(probe.initial)
    x = keras.Input((width + PENALIZED_WEIGHTS,), name="x")
    # float32 whatever the global mixed-precision policy: the signatures are ratios
    # read at float32's resolution.
    y = keras.layers.Dense(1, use_bias=False, dtype="float32", name="data")(x[:, :width])
    if probe.penalized:
        penalized = keras.layers.Dense(
            1, use_bias=False, kernel_initializer="ones", dtype="float32",
            kernel_regularizer=keras.regularizers.L2(PENALTY), name="penalized",
        )(x[:, width:])
        y = keras.layers.Add(dtype="float32")([y, penalized])
    model = keras.Model(x, y, name=f"probe_{probe.name}")
    model.get_layer("data").kernel.assign(probe.initial[:, None].astype(np.float32))
    return model


def make_optimizer(probe: Probe) -> keras.optimizers.Optimizer:
    if probe.ema_momentum is None:
        return keras.optimizers.SGD(LEARNING_RATE, global_clipnorm=probe.clipnorm)
    return keras.optimizers.SGD(LEARNING_RATE, global_clipnorm=probe.clipnorm, use_ema=True,
                                ema_momentum=probe.ema_momentum)


def make_dataset(probe: Probe) -> tf.data.Dataset:
    """The probe's micro-batches, in order, as a dataset of ``(x, y)``."""
    parts = [tf.data.Dataset.from_tensors(micro) for micro in probe.micro_batches]
    dataset = parts[0]
    for part in parts[1:]:
        dataset = dataset.concatenate(part)
    return dataset


#: Trains ``epochs`` epochs, yielding after each: ``(model, optimizer, loss,
#: dataset, accumulation_steps, epochs) -> iterator``.
Train = Callable[..., Iterator[None]]


def observe(train: Train, probe: Probe, accumulation_steps: int) -> Observation:
    """Runs ``train`` on a fresh model and optimizer; records the weights per epoch.

    A ``FloatingPointError`` (a trainer refusing a non-finite update) ends the
    run and is recorded; any other exception propagates.
    """
    model, optimizer = make_model(probe), make_optimizer(probe)
    start, after_epoch, error = flat_weights(model), [], None
    epochs = train(model, optimizer, keras.losses.MeanSquaredError(), make_dataset(probe),
                   accumulation_steps, probe.epochs)
    try:
        for _ in epochs:
            after_epoch.append(flat_weights(model))
    except FloatingPointError as failure:
        error = str(failure)
    average = None
    if probe.ema_momentum is not None and error is None:
        average = moving_average(model, optimizer)
    return Observation(start, after_epoch, int(optimizer.iterations.numpy()), error, average)


def moving_average(model, optimizer) -> np.ndarray | None:
    """The moving average of ``model``'s weights that a run kept, flat.

    Read as ``Model.fit`` leaves it: the ``finalize_variable_values`` of the
    optimizer that stepped (the one given, else the one the subject compiled
    into the model, as a loop on ``Model.fit`` does) copies it into the model,
    which then holds it. None when neither keeps an average and stepped.
    """
    for candidate in (optimizer, getattr(model, "optimizer", None)):
        if (isinstance(candidate, keras.optimizers.Optimizer) and candidate.use_ema
                and int(candidate.iterations.numpy()) > 0):
            candidate.finalize_variable_values(model.trainable_variables)
            return flat_weights(model)
    return None


def averaged(observation: Observation) -> Observation:
    """``observation`` with its moving average as its one epoch's weights (none
    if it has none): what :func:`contributions` compares on the ``ema`` probe."""
    average = observation.average
    return observation._replace(after_epoch=[] if average is None else [average])


def contributions(subject: Observation, exact: Observation, epoch: int = 1) -> np.ndarray:
    """How much each weight moved for the subject, as a multiple of the exact move.

    NaN where the exact trainer did not move the weight (no micro-batch
    touches it) or where the subject has no weights for that epoch.
    """
    if len(subject.after_epoch) < epoch or len(exact.after_epoch) < epoch:
        return np.full(len(subject.start), np.nan)
    exact_move = exact.after_epoch[epoch - 1] - exact.start
    subject_move = subject.after_epoch[epoch - 1] - subject.start
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(exact_move != 0, subject_move / exact_move, np.nan)
