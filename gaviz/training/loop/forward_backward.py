"""One micro-batch's forward and backward pass, as the sums a window adds.

A micro-batch contributes its summed (not mean) loss, the gradients of that
sum, its sample count and its normalizer (:class:`gaviz.training.window.arithmetic.WindowSums`);
the window adds these up and divides once, when it finishes.
"""

from __future__ import annotations

import tensorflow as tf

from gaviz import _keras
from gaviz.training.fit import optimizers
from gaviz.training.loss.objective import Objective
from gaviz.training.window.arithmetic import WindowSums
from gaviz.training.window.occurrences import divided, scaled


class ForwardBackward:
    """Forward and backward pass of one micro-batch, unnormalized.

    The objective is the summed weighted loss (the compiled loss's terms,
    masks applied), plus the forward losses added with ``add_loss``
    (activity regularizers) rescaled to sums. The compiled metrics see the
    micro-batch: their sums and counts add up to the big batch's.
    """

    def __init__(self, model, optimizer, objective: Objective, own_loss=None):
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.own_loss = own_loss  # an OwnLoss: the model's compute_loss, not the compiled one
        self.loss_scaled = optimizers.loss_scaled(optimizer)
        #: Which variables the loss reaches, as the micro-step's trace finds them.
        self.reach = Reach()

    def variables(self) -> list:
        """The variables trained: the model's trainable ones, read when called."""
        return self.model.trainable_variables

    def sums(self, x, y, sample_weight, accumulation_steps=1) -> WindowSums:
        """What the micro-batch ``(x, y, sample_weight)`` adds to its window of
        ``accumulation_steps`` micro-batches (which only a loss scale reads)."""
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)
            with tf.name_scope("loss"):
                micro, loss_sum = self._loss(x, y, y_pred, sample_weight, accumulation_steps)
            target, per = self._scaled(loss_sum, micro.normalizer, accumulation_steps)
        grads = gradients(tape, target, self.model.trainable_variables, self.reach)
        if per is not None:  # back to the gradient of the sum, in float32
            grads = [scaled(g, per) for g in grads]
        self._update_metrics(y, y_pred, sample_weight, micro)
        return WindowSums(grads, loss_sum, micro.sample_count, micro.normalizer, micro.rows)

    def sparse(self, element, strategy) -> frozenset:
        """The trained variables (by index) whose gradient a micro-step on
        micro-batches like ``element`` gives as ``tf.IndexedSlices`` (an
        Embedding's table, not tied to a dense use), found by tracing the
        micro-step once under ``strategy`` (nothing runs)."""
        found = set()

        def replica(*element):
            micro = self.sums(*unpack(element))
            found.update(i for i, g in enumerate(micro.gradients)
                         if isinstance(g, tf.IndexedSlices))

        def trace(*element):
            strategy.run(replica, args=element)
            return tf.constant(0)

        tf.function(trace, autograph=False).get_concrete_function(*element)
        return frozenset(found)

    def _loss(self, x, y, y_pred, sample_weight, accumulation_steps):
        """``(micro, loss_sum)``: the micro-batch's MicroLoss and everything its
        loss sum holds (the model's own compute_loss holds the added losses)."""
        if self.own_loss is not None:
            micro = self.own_loss.micro(x, y, y_pred, sample_weight)
            return micro, micro.loss_sum
        micro = self.objective.micro(y, y_pred, sample_weight)
        added = self._added_loss_sum(micro.normalizer, accumulation_steps)
        return micro, micro.loss_sum + added

    def _scaled(self, loss_sum, normalizer, accumulation_steps):
        """What the tape differentiates: ``(loss, per)``, the gradient of the
        sum being ``per`` times the loss's (``per`` None: the loss is the sum).

        A loss-scaling optimizer's scale keeps float16 gradients from
        underflowing. Keras scales the big batch's mean loss, where each
        sample weighs 1 / (its ``n`` samples); the micro-batch's samples get
        that same weight, 1 / (``n_micro * k``), so float16 sees the values
        it sees in ``Model.fit`` (the sum, ``n`` times larger, would overflow
        where Keras does not). The optimizer unscales once per window.
        """
        if not self.loss_scaled:
            return loss_sum, None
        count = tf.where(normalizer > 0, normalizer, tf.ones_like(normalizer))
        per = count * tf.cast(accumulation_steps, count.dtype)
        return self.optimizer.scale_loss(loss_sum / per), per

    def _update_metrics(self, y, y_pred, sample_weight, micro):
        """Keras's compiled metrics and per-output loss trackers, on one micro-batch."""
        metrics = _keras.compile_metrics(self.model)
        if metrics is not None:
            metrics.update_state(y, y_pred, sample_weight)
        compiled_loss = _keras.compile_loss(self.model)
        trackers = [] if compiled_loss is None else compiled_loss.metrics
        for tracker, mean in zip(trackers, micro.output_means):
            tracker.update_state(mean, sample_weight=micro.rows)

    def _added_loss_sum(self, normalizer, accumulation_steps):
        """What the losses the last forward pass added (``add_loss``, activity
        regularizers) add to the window's loss sum.

        ``model.losses`` lists those first, then one penalty per regularized
        weight (recomputed on every access: read it once). Keras adds them to
        the batch's loss as they are, next to a loss divided by its count; so
        each is multiplied by the micro-batch's ``normalizer`` (rows, loss
        elements or total weight), and the window's one division gives it
        back: Model.fit's value at ``accumulation_steps=1``, and over a window
        exactly where :mod:`gaviz.training.loss.added_loss` says. With a loss that
        is not divided (``normalize="sum"``), each counts ``1 / k``.
        """
        losses = self.model.losses
        n_forward = len(losses) - len(regularized_weights(self.model))
        if n_forward <= 0:
            return tf.constant(0.0)
        added = tf.add_n([tf.cast(value, tf.float32) for value in losses[:n_forward]])
        if self.objective.normalize == "sum":
            return added / tf.cast(accumulation_steps, tf.float32)
        return added * normalizer


def added_loss_layers(model) -> list[str]:
    """The layers whose last call added a loss with ``add_loss`` (activity
    regularizers aside, which Keras adds as means over the batch)."""
    return [layer.name for layer in _keras.flatten_layers(model)
            if layer.activity_regularizer is None and _keras.own_losses(layer)]


def clip_mean_gradient(micro: WindowSums, optimizer) -> WindowSums:
    """The micro-batch's mean gradient clipped by ``optimizer``, back as a sum."""
    normalizer = micro.normalizer
    mean = [divided(g, normalizer, no_nan=True) for g in micro.gradients]
    clipped = _keras.clip_gradients(optimizer, mean)  # Keras's own clipping rules
    return micro._replace(gradients=[scaled(g, normalizer) for g in clipped])


class WeightPenalty:
    """A model's weight penalty (its weights' regularizers), which a window adds
    once, not once per micro-batch (:class:`gaviz.training.window.window_cycle.WindowCycle`)."""

    def __init__(self, model):
        self.model = model

    def reaches(self) -> frozenset:
        """The trained variables it reaches (those with a regularizer), by index."""
        regularized = {id(v) for v in regularized_weights(self.model)}
        return frozenset(i for i, v in enumerate(self.model.trainable_variables)
                         if id(v) in regularized)

    def __call__(self):
        """``(penalty, gradients)``: a gradient None where it reaches no variable."""
        with tf.GradientTape() as tape:
            penalty = tf.add_n([tf.cast(v.regularizer(v), tf.float32)
                                for v in regularized_weights(self.model)])
        return penalty, tape.gradient(penalty, self.model.trainable_variables)


def regularized_weights(model) -> list:
    """The trainable weights that carry a regularizer (a penalty in ``model.losses``)."""
    return [v for v in model.trainable_variables if getattr(v, "regularizer", None) is not None]


class Reach:
    """Which trained variables a micro-step's loss reaches: the others get a
    None gradient from the tape, which ``Model.fit`` hands its optimizer as
    None, so that they are left out of the update (not moved by momentum, not
    decayed). The window sums zeros for them; its update steps the others
    (:meth:`gaviz.training.window.window_cycle.WindowCycle.patterns`).

    Set while the micro-step is traced (the model's graph decides it, the same
    in every trace of one model), read by the update traced after it.
    """

    def __init__(self):
        #: Indices into the trained variables of those with a gradient (None: not traced).
        self.reached: frozenset | None = None

    def note(self, grads) -> None:
        self.reached = frozenset(i for i, g in enumerate(grads) if g is not None)

    def seen(self) -> list:
        """The sets of variables micro-steps gave a gradient (none before a trace)."""
        return [] if self.reached is None else [self.reached]


def gradients(tape, target, variables, reach: Reach | None = None):
    """Gradients of ``target``; zeros for variables it does not reach (noted
    in ``reach`` if given).

    (``UnconnectedGradients.ZERO`` fails on Keras variables, whose dtype is a
    string, so the zeros are made here.)
    """
    grads = tape.gradient(target, variables)
    if reach is not None:
        reach.note(grads)
    return [
        tf.zeros(v.shape, dtype=tf.as_dtype(v.dtype)) if g is None else g
        for g, v in zip(grads, variables)
    ]


def unpack(element):
    """``(x, y, sample_weight)`` of a micro-batch ``(x, y)`` or ``(x, y, sample_weight)``."""
    if len(element) == 3:
        return tuple(element)
    x, y = element
    return x, y, None
