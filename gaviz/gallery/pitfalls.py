"""The pitfall gallery: the exact trainer with one classic mistake each.

Everything gaviz knows about a pitfall is one :class:`Pitfall` record in
:data:`GALLERY`: its name, the :class:`~gaviz.training.window.rules.Rule` or the trainer
setting that is its mistake (labelled ``# PITFALL:``), its symptom, cause,
fix and the lesson that teaches it, the story its comparison with the exact
trainer tells, and the signature :func:`gaviz.diagnose` recognises it by.
The gallery, ``diagnose``'s fixes, comparison headlines, the dashboard and
the tests all read that table; adding a pitfall is one record (and its test).

Each record is also a trainer class (``MissingReset``, ...): the exact
:class:`gaviz.AccumulationTrainer` with the record's rule and settings, the
same constructor and the same ``fit``. They exist to be watched going
wrong: measure one against the exact trainer with
:func:`gaviz.compare_with_exact`, or name it with :func:`gaviz.diagnose`.
They are teaching tools for one device: constructed with a multi-replica
strategy, each raises ``ValueError``.

``PITFALLS`` maps each pitfall's name to its class.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Mapping

import keras
import tensorflow as tf

from gaviz import _keras
from gaviz.training.fit import checks, optimizers
from gaviz.training.trainer import AccumulationTrainer
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.occurrences import divided
from gaviz.training.window.rules import EXACT, Rule


def mean_contribution(micro: WindowSums) -> WindowSums:
    """A micro-batch's mean loss and gradient, counted as one unit of the window."""
    # PITFALL: each micro-batch is divided by its own count, not the window by its count.
    n = micro.normalizer
    return micro._replace(
        gradients=[divided(g, n, no_nan=True) for g in micro.gradients],
        loss_sum=tf.math.divide_no_nan(micro.loss_sum, n),
        normalizer=tf.ones_like(n),
    )


def no_divisor(normalizer, micro_steps, accumulation_steps):
    """Divides by one: the window's sum is used as it is."""
    del micro_steps, accumulation_steps
    # PITFALL: the window's sum is never divided.
    return tf.ones_like(normalizer)


def full_window_divisor(normalizer, micro_steps, accumulation_steps):
    """The count a full window of micro-batches this size would have."""
    # PITFALL: the divisor of a full window, whatever this one holds.
    full = tf.cast(accumulation_steps, normalizer.dtype)
    return normalizer * full / tf.cast(tf.maximum(micro_steps, 1), normalizer.dtype)


def once_per_micro_step(micro_steps):
    """The weight penalty once per micro-step of the window."""
    # PITFALL: one penalty per micro-step in the window, not one per update.
    return tf.cast(micro_steps, tf.float32)


def keep_gradients(sums: WindowSums, fresh: WindowSums, variables) -> WindowSums:
    """The next window starts with the closed one's gradient sums."""
    del variables
    # PITFALL: the gradient accumulators are never zeroed (only the counts are).
    return fresh._replace(gradients=sums.gradients)


def zero_weights(sums: WindowSums, fresh: WindowSums, variables) -> WindowSums:
    """The "reset" after a window zeroes the model's variables."""
    del sums
    # PITFALL: the reset zeroes the model's weights.
    for variable in variables:
        variable.assign(tf.zeros(variable.shape, dtype=variable.dtype))
    return fresh


def micro_steps_before(micro_steps):
    """The schedule's step at an update: the micro-batches before the window's last."""
    # PITFALL: the schedule counts micro-batches, not updates.
    return micro_steps - 1


def average_each_micro_step(micro_steps):
    """The moving average's moves before an update: one per micro-step of the
    window but the last, whose move is the update's own."""
    # PITFALL: the moving average moves on every micro-step, not once per update.
    return micro_steps - 1


class OptimizerRefused(ValueError):
    """A pitfall's trainer was given an optimizer its mistake shows nothing with.

    Attributes:
        pitfall: the pitfall's class name.
        needs: what the optimizer lacks, in words.
    """

    def __init__(self, message, pitfall, needs):
        super().__init__(message)
        self.pitfall, self.needs = pitfall, needs


def require_schedule(optimizer) -> None:
    """Raises unless ``optimizer``'s learning rate is a schedule: a constant one shows nothing."""
    inner = optimizers.inner(optimizer)
    source = None if inner is None else _keras.learning_rate_source(inner)
    if not isinstance(source, keras.optimizers.schedules.LearningRateSchedule):
        raise OptimizerRefused(
            "`optimizer` must have a learning-rate schedule "
            "(keras.optimizers.schedules.LearningRateSchedule) for SchedulePerMicroStep "
            "to show anything. Received an optimizer with a constant learning rate.",
            "SchedulePerMicroStep", "a learning-rate schedule",
        )


def require_clipping(optimizer) -> None:
    """Raises unless ``optimizer`` clips: per-micro-batch clipping shows nothing otherwise."""
    if not optimizers.clipping(optimizer):
        raise OptimizerRefused(
            "`optimizer` must clip (global_clipnorm, clipnorm or clipvalue) for "
            "PerMicroBatchClipping to show anything. Received an optimizer without "
            "clipping.",
            "PerMicroBatchClipping", "clipping",
        )


def require_moving_average(optimizer) -> None:
    """Raises unless ``optimizer`` keeps a moving average of the weights (``use_ema=True``)."""
    if not getattr(optimizers.inner(optimizer), "use_ema", False):
        raise OptimizerRefused(
            "`optimizer` must keep a moving average of the weights (use_ema=True) for "
            "EmaPerMicroStep to show anything. Received an optimizer with use_ema=False.",
            "EmaPerMicroStep", "use_ema=True",
        )


#: The stories a comparison with the exact trainer tells (``Comparison.headline``).
STORIES = ("update_growth", "learning_rate", "update_count", "moving_average", "first_update")


@dataclass(frozen=True)
class Pitfall:
    """One pitfall of the gallery: everything gaviz knows about it.

    Attributes:
        name: its key in :data:`gaviz.PITFALLS` and in ``diagnose``'s findings.
        class_name: the name of its trainer class.
        summary: the mistake in one sentence.
        symptom, cause, fix, detect: what one sees, why, what to do, and
            the test that catches it.
        lesson: the lesson that teaches it (a notebook's name without ``.ipynb``).
        probe, signature: the ``diagnose`` probe that shows it, and what
            that probe measures for it (k micro-batches per window); an empty
            probe: no probe of ``diagnose`` can show it (the signature says why).
        story: which number its comparison's headline tells, one of :data:`STORIES`.
        rule: its arithmetic (:data:`gaviz.training.window.rules.EXACT` when its mistake is a setting).
        settings: trainer arguments its mistake fixes (e.g. ``tail="drop"``).
        mistake: why a setting is fixed, for the error when another is passed.
        requires: checks the optimizer before training, raising
            ``OptimizerRefused`` (None: any optimizer).
    """

    name: str
    class_name: str
    summary: str
    symptom: str
    cause: str
    fix: str
    detect: str
    lesson: str
    probe: str
    signature: str
    story: str = "first_update"
    rule: Rule = EXACT
    settings: Mapping[str, object] = field(default_factory=dict)
    mistake: str = ""
    requires: Callable | None = None

    def docstring(self) -> str:
        """The trainer class's docstring."""
        return (f"{self.summary}\n\n    Symptom: {self.symptom}\n    Cause: {self.cause}\n"
                f"    Fix: {self.fix}.\n    Detect: {self.detect}\n    Lesson: {self.lesson}.\n")


GALLERY = (
    Pitfall(
        name="missing_reset", class_name="MissingReset",
        summary="Accumulators are never zeroed after an update.",
        symptom="updates grow with every window; the loss falls, then diverges.",
        cause="window t applies the sum of the gradients of windows 1..t.",
        fix="zero the accumulators after every update",
        detect="the norm of successive updates grows with the update count, even at a tiny "
               "learning rate.",
        lesson="04_pitfall_missing_reset",
        probe="windows", signature="window t counts (windows - t + 1) times",
        story="update_growth",
        # PITFALL: the next window starts from the last one's gradients (keep_gradients).
        rule=Rule(reset=keep_gradients, carries_sums=True),
    ),
    Pitfall(
        name="missing_normalization", class_name="MissingNormalization",
        summary="Micro-batch mean losses are summed, never divided by ``accumulation_steps``.",
        symptom="training as if the learning rate were ``accumulation_steps`` times larger "
                "(it diverges where the same learning rate did not).",
        cause="each micro-batch's loss is its own mean; adding k of them without dividing "
              "gives k times the big batch's gradient.",
        fix="divide the window's summed loss by its sample count, once per update",
        detect="with SGD the first update is exactly ``accumulation_steps`` times the exact one.",
        lesson="05_pitfall_missing_normalization",
        probe="windows", signature="every weight moves k times as far",
        story="learning_rate",
        # PITFALL: micro-batch means are summed, and the sum is never divided.
        rule=Rule(contribution=mean_contribution, divisor=no_divisor),
    ),
    Pitfall(
        name="dropped_tail", class_name="DroppedTail",
        summary="The partial window at the end of each epoch is silently discarded.",
        symptom="the micro-batches after the last full window (``ceil(N / b) mod k`` of "
                "them) never reach the weights; with unshuffled data the same samples are "
                "lost every epoch.",
        cause="the update fires only when the micro-step counter reaches k, and the epoch "
              "ends first.",
        fix="apply the partial window at the end of each epoch, divided by its own sample "
            "count",
        detect="change the tail samples: the weights do not change.",
        lesson="06_pitfall_dropped_tail",
        probe="tail", signature="the partial window counts 0, even in epoch 2",
        story="update_count",
        # PITFALL: whatever the epoch's end holds, the partial window is thrown away.
        settings={"tail": "drop"}, mistake="dropping the tail is its mistake",
    ),
    Pitfall(
        name="update_every_micro_step", class_name="UpdateEveryMicroStep",
        summary="Gradients are applied on every micro-batch as well as at the window's end.",
        symptom="``optimizer.iterations`` grows k+1 times per window; training behaves like "
                "a small batch with an extra, larger step.",
        cause="an ``apply_gradients`` left inside the micro-batch loop (one of the articles "
              "this project grew from does exactly this).",
        fix="call apply_gradients once per window, after its last micro-batch",
        detect="``optimizer.iterations == (k + 1) * windows``; with SGD the first window "
               "moves the weights about k+1 times as far as the exact one.",
        lesson="03_accumulating_by_hand",
        probe="windows", signature="more than one optimizer step per window (or, uncounted, "
                                   "every weight moves k+1x)",
        story="learning_rate",
        # PITFALL: the micro-batch's own mean gradient is applied at once, too.
        rule=Rule(apply_each_micro_batch=True),
    ),
    Pitfall(
        name="zeroed_weights", class_name="ZeroedWeights",
        summary="The \"reset\" zeroes the model's variables instead of the accumulators.",
        symptom="the loss jumps back to that of an all-zero model after every update; "
                "nothing is learned.",
        cause="``for var in model.trainable_variables: var.assign(zeros)`` where the "
              "accumulators were meant.",
        fix="zero the accumulators, not the model's variables",
        detect="every weight is exactly zero after an update.",
        lesson="04_pitfall_missing_reset",
        probe="windows", signature="every weight is 0 after the run",
        # PITFALL: the reset zeroes the model's weights (zero_weights).
        rule=Rule(reset=zero_weights),
    ),
    Pitfall(
        name="mean_of_means", class_name="MeanOfMeans",
        summary="Each micro-batch is normalized by its own size, then the means are averaged.",
        symptom="nothing visible with equal micro-batches; with ragged ones (a short last "
                "micro-batch, variable-length sequences) small micro-batches weigh as much "
                "as big ones, so some samples count more than others.",
        cause="the mean of means is not the mean. This is how Keras's built-in "
              "``gradient_accumulation_steps`` works, and the bug Hugging Face fixed in "
              "2024 for token-level losses.",
        fix="add the micro-batches' summed losses and divide once by the window's sample "
            "count, not each micro-batch by its own size",
        detect="equal to the exact trainer for equal micro-batches, different for ragged ones.",
        lesson="05_pitfall_missing_normalization",
        probe="ragged", signature="a micro-batch counts 1/its size: (N/k)/n_i",
        # PITFALL: each micro-batch's mean counts as one unit; the window averages them.
        rule=Rule(contribution=mean_contribution),
    ),
    Pitfall(
        name="per_micro_batch_clipping", class_name="PerMicroBatchClipping",
        summary="Each micro-batch's gradient is clipped instead of the accumulated one. Needs "
                "an optimizer with ``global_clipnorm``, ``clipnorm`` or ``clipvalue``.",
        symptom="updates smaller than the clip allows, and a direction that differs from the "
                "big batch's whenever a micro-batch gradient is clipped.",
        cause="clipping before accumulation (as one does without accumulation).",
        fix="clip once, the window's accumulated gradient (an optimizer's clipnorm does, "
            "when given that gradient)",
        detect="the update equals the average of individually clipped micro-batch "
               "gradients, whose norm is below the clip norm.",
        lesson="03_accumulating_by_hand",
        probe="clipping", signature="the update is 1/sqrt(k) as long as allowed",
        # PITFALL: the micro-batch's mean gradient is clipped before accumulation.
        rule=Rule(clip_micro_batches=True), requires=require_clipping,
    ),
    Pitfall(
        name="regularizer_every_micro_step", class_name="RegularizerEveryMicroStep",
        summary="``model.losses`` is added to every micro-batch's loss: k times per update.",
        symptom="weight decay ``accumulation_steps`` times stronger than asked; weights "
                "shrink as accumulation grows.",
        cause="the regularization penalty is part of each micro-batch's loss, but only the "
              "data loss is normalized over the window.",
        fix="add model.losses once per update, not to every micro-batch's loss",
        detect="with SGD the first update differs from the exact one by exactly "
               "``(k - 1) * lr * grad(penalty)`` at the initial weights.",
        lesson="03_accumulating_by_hand",
        probe="ragged", signature="the penalty moves its weights k times as far",
        # PITFALL: one penalty per micro-step in the window, not one per update.
        rule=Rule(penalty_times=once_per_micro_step),
    ),
    Pitfall(
        name="under_scaled_tail", class_name="UnderScaledTail",
        summary="A partial window is divided as if it were full: its update is too small.",
        symptom="the update of the partial window at the end of an epoch is ``m / k`` of "
                "what it should be (``m`` micro-batches of ``k``); nothing else changes.",
        cause="dividing every window by ``accumulation_steps`` (``loss / k`` on each "
              "micro-batch's mean), whatever its length: what Hugging Face Accelerate and "
              "PyTorch Lightning do with the last window of an epoch.",
        fix="divide the partial window by its own sample count, not as if it were full",
        detect="with SGD, equal to the exact trainer on full windows; the tail's update is "
               "exactly ``m / k`` times the exact one.",
        lesson="06_pitfall_dropped_tail",
        probe="tail", signature="the partial window of m counts m/k",
        story="update_count",
        # PITFALL: the divisor of a full window, whatever this one holds.
        rule=Rule(divisor=full_window_divisor),
    ),
    Pitfall(
        name="carried_tail", class_name="CarriedTail",
        summary="The partial window at the end of an epoch is continued into the next one.",
        symptom="an epoch's last micro-batches are applied together with the next epoch's "
                "first ones; windows straddle epochs, so \"one update per window of this "
                "epoch\" no longer holds, and a run's last partial window is never applied.",
        cause="a micro-step counter that is never reset at the end of an epoch: what "
              "Keras's built-in ``gradient_accumulation_steps`` does.",
        fix="apply the partial window at the end of its own epoch, divided by its sample "
            "count",
        detect="over two epochs the updates differ from the exact trainer's from the first "
               "window that straddles the epoch boundary.",
        lesson="06_pitfall_dropped_tail",
        probe="tail", signature="0 in its epoch, > 0 after the next one",
        story="update_count",
        # PITFALL: the partial window waits for the next epoch.
        settings={"tail": "carry"}, mistake="carrying the tail is its mistake",
    ),
    Pitfall(
        name="schedule_per_micro_step", class_name="SchedulePerMicroStep",
        summary="The learning-rate schedule counts micro-batches, not updates. Needs an "
                "optimizer whose learning rate is a schedule.",
        symptom="a warm-up or a decay runs ``accumulation_steps`` times too fast: a "
                "1000-step warm-up is over after 1000 / k updates, and update u already "
                "uses the rate of step u * k - 1.",
        cause="the schedule is given the count of micro-batches (the optimizer's step "
              "counter advancing on every micro-batch): what Keras's built-in "
              "``gradient_accumulation_steps`` does (its schedules read the \"real\" "
              "iterations, it documents).",
        fix="give the schedule the count of updates (optimizer.iterations), or write it "
            "in updates",
        detect="with SGD and a schedule that halves the rate every step, update 1 is "
               "``0.5 ** (k - 1)`` times the exact one.",
        lesson="07_learning_rate_scaling",
        probe="", signature="diagnose's probes use a constant learning rate: not probed",
        story="first_update",
        # PITFALL: the schedule reads the micro-steps consumed (micro_steps_before).
        rule=Rule(schedule_step=micro_steps_before), requires=require_schedule,
    ),
    Pitfall(
        name="ema_per_micro_step", class_name="EmaPerMicroStep",
        summary="The weights' moving average (``use_ema=True``) moves on every micro-step, "
                "not once per update. Needs an optimizer with ``use_ema=True``.",
        symptom="the average keeps ``ema_momentum ** k`` of itself per update instead of "
                "``ema_momentum`` (0.99 becomes 0.96 at k=4: an average over about 25 "
                "updates, not 100), and k - 1 of its k moves go towards the weights before "
                "the update; the weights themselves are exact until ``fit`` ends and copies "
                "the average into the model.",
        cause="the moving average is moved wherever the optimizer is called, outside the "
              "branch that applies the window: what Keras's built-in "
              "``gradient_accumulation_steps`` does (``_backend_apply_gradients`` moves it "
              "after its ``cond``).",
        fix="move the average once per update, after it",
        detect="with ``ema_momentum`` m, three updates, and a weight that moves only in "
               "update 2, the average of that weight ends ``m ** (k + 1)`` of its move "
               "behind it, not ``m ** 2``.",
        lesson="11_caveats",
        probe="ema", signature="the average moves k times per update (exact: once)",
        story="moving_average",
        # PITFALL: k - 1 moves of the average before each update (average_each_micro_step).
        rule=Rule(ema_updates_before_apply=average_each_micro_step),
        requires=require_moving_average,
    ),
    Pitfall(
        name="coupled_loss_summed", class_name="CoupledLossSummed",
        summary="A loss that couples a batch's rows is summed micro-batch by micro-batch.",
        symptom="each row meets only its own micro-batch's rows: its in-batch negatives "
                "are b - 1, not k * b - 1, and a batch statistic (a mean, a rank) is the "
                "micro-batch's; the updates land elsewhere than the big batch's, though "
                "every micro-batch is counted by its rows.",
        cause="the loss (a contrastive loss with in-batch negatives, Circle, Dice, a loss "
              "normalized over its batch) is not a mean of per-row terms, so no sum of "
              "micro-batches' losses is the window's: what any accumulation loop that adds "
              "micro-batches' gradients does with it.",
        fix="compute the loss once on the window's outputs and back-propagate each "
            "micro-batch's rows of its gradient (the cached window: the trainer's default, "
            "gaviz.cached_gradients in your own loop)",
        detect="with the squared mean of the batch's residuals as the loss and one weight "
               "per micro-batch, micro-batch i's weight moves ``m_i / m`` of the exact move "
               "(its own rows' mean residual over the window's).",
        lesson="11_caveats",
        probe="", signature="diagnose's probes use a per-row loss (mean squared error): "
                            "not probed",
        story="first_update",
        # PITFALL: a coupled loss summed per micro-batch, not cached (caches_coupled_loss).
        rule=Rule(caches_coupled_loss=False),
    ),
)


_CONSTRUCTOR = inspect.signature(AccumulationTrainer.__init__)


def trainer_class(pitfall: Pitfall) -> type:
    """The exact trainer with ``pitfall``'s rule and settings, as a class of its own."""

    def __init__(self, *args, **kwargs):
        arguments = _CONSTRUCTOR.bind(self, *args, **kwargs).arguments
        for name, value in pitfall.settings.items():
            given = arguments.setdefault(name, value)
            if given != value:
                raise ValueError(
                    f"`{name}` must be {value!r} for {pitfall.class_name}: {pitfall.mistake}. "
                    f"Received: {name}={given!r}"
                )
        arguments.pop("self")
        strategy = checks.check_strategy(arguments.get("strategy"),
                                        getattr(arguments["model"], "variables", []),
                                        checks.MODEL_UNDER_STRATEGY)
        checks.check_single_replica(pitfall.class_name, strategy)
        if pitfall.requires is not None:
            pitfall.requires(arguments.get("optimizer"))
        AccumulationTrainer.__init__(self, **arguments)

    namespace = {"__init__": __init__, "__doc__": pitfall.docstring(), "rule": pitfall.rule,
                 "pitfall": pitfall, "__module__": __name__}
    return type(pitfall.class_name, (AccumulationTrainer,), namespace)


#: Each pitfall's name -> its trainer class.
PITFALLS = {pitfall.name: trainer_class(pitfall) for pitfall in GALLERY}
#: Each pitfall's name -> its record.
RECORDS = {pitfall.name: pitfall for pitfall in GALLERY}
globals().update({cls.__name__: cls for cls in PITFALLS.values()})


def record_of(class_name: str) -> Pitfall | None:
    """The record of the pitfall whose class is called ``class_name`` (None: not a pitfall)."""
    return next((p for p in GALLERY if p.class_name == class_name), None)
