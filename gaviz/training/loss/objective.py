"""The compiled loss, as sums a window can add up.

Keras reduces a loss per batch: ``sum(w * l) / n`` for each output, times its
``loss_weight``, summed over outputs. Accumulation needs the pieces before
that division, so the window divides once. This module takes the losses
Keras's own ``CompileLoss`` resolved from ``compile`` (names, objects,
dicts or lists per output, ``loss_weights``) and computes, per micro-batch,
the weighted loss sum and what the window will be divided by, with Keras's
rules for masks (``Embedding(mask_zero=True)``, ``Masking``,
``ignore_class``) and for each loss's ``reduction``:

- ``"sum_over_batch_size"`` (the default) divides by the number of
  unmasked loss elements (``normalize="samples"``);
- ``"mean_with_sample_weight"`` divides by the total sample weight
  (``normalize="weights"``);
- ``"sum"`` does not divide (``normalize="sum"``).

Several outputs share one gradient sum, so their divisors must grow
together: they are exact when every output's loss is unmasked with a fixed
number of loss elements per sample (each output then divides by the
window's samples times that number), or when every loss is a ``"sum"``.
Other combinations are refused with a ``ValueError``, never approximated.

A model compiled without a loss whose layers add it with ``add_loss``
(:mod:`gaviz.training.loss.added_loss`) has no terms: a micro-batch then adds no loss of
its own, only its rows, by which the window divides the added losses.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import keras
import tensorflow as tf
from keras import tree

from gaviz import _keras
from gaviz.training.loss import row_losses, row_means, weighted_losses

#: What a window may be divided by (``normalize``).
NORMALIZATIONS = ("samples", "weights", "sum")

#: What each Keras reduction divides a window by (``normalize``'s values).
REDUCTION_NORMALIZE = {
    "sum_over_batch_size": "samples",
    "mean": "samples",
    "mean_with_sample_weight": "weights",
    "sum": "sum",
}


class NotPerRow(ValueError):
    """A compiled loss that is not one value per row reduced by Keras: it returns
    a scalar, or its own ``__call__`` reduces its values otherwise.

    Attributes:
        what: what it does, in words (after "`loss` ").
    """

    def __init__(self, what: str, message: str):
        self.what = what
        super().__init__(message)


class Term(NamedTuple):
    """One output's loss: where it is, the Loss object, its weight and name."""

    path: tuple
    loss: keras.losses.Loss
    weight: float
    name: str
    elements_per_sample: int | None  # several outputs only: loss elements per row


class MicroLoss(NamedTuple):
    """What one micro-batch's loss adds to the window.

    ``output_means`` holds, per output (several outputs only), the micro-batch's
    unweighted mean loss, for Keras's per-output ``"<name>_loss"`` trackers.
    """

    loss_sum: tf.Tensor
    sample_count: tf.Tensor
    normalizer: tf.Tensor
    rows: tf.Tensor
    output_means: list


def _given_reductions(user_loss) -> list:
    """The reductions of the losses ``compile`` was given, one per output: as
    Keras's ``CompileLoss`` builds them, anything but a ``keras.losses.Loss``
    (a name, a function) gets Keras's default, ``"sum_over_batch_size"``."""
    return [getattr(entry, "reduction", "sum_over_batch_size")
            if isinstance(entry, keras.losses.Loss) else "sum_over_batch_size"
            for entry in tree.flatten(user_loss) if entry is not None]


class Objective:
    """Keras's compiled loss for ``model``, as per-micro-batch sums.

    Args:
        compile_loss: the model's ``CompileLoss`` (``_keras.compile_loss(model)``).
        output_names: the model's output names (for dict targets).
        normalize: the trainer's ``normalize`` argument (None: from the
            losses' reductions).
    """

    #: The weight penalty is not in its loss: the window adds it once.
    includes_weight_penalty = False

    def __init__(self, compile_loss, output_names, normalize=None):
        self.compile_loss = compile_loss
        self.output_names = output_names
        self.requested = normalize
        self.terms: list[Term] = []
        self.masked = False  # a term's loss is masked (set by build)
        # Resolved once, from the losses compile was given: a reduction is
        # known before the losses are built on data.
        given = None if compile_loss is None else _keras.user_loss(compile_loss)
        self._normalize = self._normalization(_given_reductions(given))

    @property
    def normalize(self) -> str:
        """What a window is divided by: ``"samples"``, ``"weights"`` or ``"sum"``
        (from the losses' reductions, or the trainer's ``normalize``)."""
        return self._normalize

    @property
    def divides_by(self) -> str:
        """What a window's loss is divided by, in words."""
        if self.compile_loss is None:
            return "its rows"
        return _DIVIDES_BY[self.normalize]

    def fixed_count_per_row(self, element_spec) -> bool:
        """Whether every micro-batch's loss divides by the same number per row
        (after :meth:`build`): rows, or a fixed number of unmasked loss
        elements per row (no mask, and targets of one shape past the batch
        axis in ``element_spec``, a micro-batch's)."""
        if self.compile_loss is None or len(self.terms) > 1:
            return self.normalize != "sum"  # divided by rows
        if self.normalize != "samples" or self.masked:
            return False
        targets = element_spec[1] if isinstance(element_spec, tuple) else None
        return all(spec.shape[1:].is_fully_defined() for spec in tree.flatten(targets)
                   if hasattr(spec, "shape"))

    # ------------------------------------------------------------- building

    def build(self, y_true, y_pred) -> None:
        """Resolves the losses on one eager micro-batch and checks them.

        Raises:
            ValueError: targets, outputs and losses do not fit together, or
                the reductions cannot be honoured exactly.
        """
        if self.compile_loss is None:  # a model's own compute_loss makes the loss
            return
        y_true = self.align(y_true, y_pred)
        if not self.compile_loss.built:
            try:
                self.compile_loss.build(y_true, y_pred)
            except (KeyError, ValueError, TypeError) as error:
                raise ValueError(
                    "`loss` does not fit the model's outputs: "
                    f"{_structure(y_pred)} (outputs) against `loss`="
                    f"{_keras.user_loss(self.compile_loss)!r}: {error}"
                ) from None
        y_true, y_pred = self._as_built(y_true, y_pred)
        flat = _keras.flat_losses(self.compile_loss)
        terms, masked = [], False
        for path, loss, weight, name in flat:
            if tree.is_nested(_at(path, y_pred)) or tree.is_nested(_at(path, y_true)):
                raise ValueError(
                    "`loss` does not fit the model's outputs: give one loss per output, "
                    f"or a dict keyed by output name. Received `loss`="
                    f"{_keras.user_loss(self.compile_loss)!r} for outputs {_structure(y_pred)}."
                )
            values, mask = _checked_values(loss, _at(path, y_true), _at(path, y_pred))
            masked = masked or mask is not None
            per_row = None
            if len(flat) > 1:
                per_row = self._elements_per_sample(name, values, mask)
            terms.append(Term(path, loss, 1.0 if weight is None else float(weight), name, per_row))
        self.terms, self.masked = terms, masked
        if len(terms) > 1:
            self._warn_per_output_entries([term.name for term in terms])

    def _warn_per_output_entries(self, names) -> None:
        """Says how the per-output ``<name>_loss`` entries differ from Model.fit's."""
        size = ("per micro-batch sums, about 1/k of Model.fit's per-batch sums"
                if self.normalize == "sum" else
                "averaged over micro-batches by their rows, where Model.fit averages its "
                "batches unweighted, so they differ where a batch is short or ragged")
        warnings.warn(
            f"The per-output entries {', '.join(f'{n}_loss' for n in names)} of the logs are "
            f"{size}. The loss the trainer descends, `loss` and the weights equal "
            "Model.fit's; read `loss` (or evaluate each output) to compare outputs.",
            UserWarning,
            stacklevel=5,
        )

    def _normalization(self, reductions) -> str:
        reductions = set(reductions)
        if not reductions:  # no loss yet: checked where the loss is required
            return self.requested or "samples"
        unknown = reductions - set(REDUCTION_NORMALIZE)
        if unknown:
            raise ValueError(
                f"`loss` must reduce its values: a reduction of {sorted(map(str, unknown))} "
                "cannot be accumulated. Use one of "
                f"{tuple(REDUCTION_NORMALIZE)} (Keras's default is "
                '"sum_over_batch_size"), or pass a function returning per-sample losses.'
            )
        kinds = {REDUCTION_NORMALIZE[r] for r in reductions}
        if len(kinds) > 1:
            raise ValueError(
                "`loss`: every output's loss must use the same kind of reduction for "
                f"exact accumulation. Received reductions {sorted(reductions)}."
            )
        (kind,) = kinds
        if self.requested is None:
            return kind
        if kind != "samples" and self.requested != kind:
            raise ValueError(
                f"`normalize`={self.requested!r} contradicts the loss's reduction "
                f"({sorted(reductions)[0]!r}, which divides by "
                f"{_DIVIDES_BY[kind]}). Leave `normalize` unset to follow the loss."
            )
        return self.requested

    def _elements_per_sample(self, name, values, mask) -> int:
        """Several outputs: each must divide by samples times a fixed number."""
        fixed = values.shape[1:].num_elements()
        if self.normalize == "weights" or mask is not None or fixed is None:
            why = (
                "it is masked" if mask is not None
                else "its loss divides by the sample weights" if self.normalize == "weights"
                else "its number of loss elements per sample varies"
            )
            raise ValueError(
                f"`loss` for output {name!r} cannot be accumulated exactly with the "
                f"other outputs: {why}, so its divisor does not grow with the "
                "window's samples like theirs. gaviz keeps one gradient sum per "
                "window; train such outputs with one loss (sum them in the model) "
                "or use reduction='sum' for every output."
            )
        return max(fixed, 1)

    # ------------------------------------------------------------- checking

    def unknown_terms(self) -> list[Term]:
        """The terms (after :meth:`build`) that are not Keras's known per-row losses."""
        return [term for term in self.terms if not row_losses.known_row_wise(term.loss)]

    def check_rows(self, probe: row_means.Batch) -> None:
        """Refuses a loss the trainer cannot read per micro-batch, tried on
        ``probe`` (rows from across the data, with the model's predictions):
        one whose value for a row depends on the batch's other rows, or whose
        own ``__call__`` reduces otherwise than the trainer's reading of it.

        Raises:
            CoupledLoss: a term couples the rows.
            ValueError: a term's ``__call__`` is not its values reduced.
        """
        y_true, y_pred = self._as_built(self.align(probe.y, probe.y_pred), probe.y_pred)
        for term in self.unknown_terms():
            batch = row_means.Batch(probe.x, _at(term.path, y_true), _at(term.path, y_pred))
            coupling = row_losses.first_coupling(
                lambda y, p, loss=term.loss: _values(loss, y, p), batch)
            if coupling is not None:
                raise row_losses.CoupledLoss(self._label(term), coupling)
            weights = probe.sample_weight
            if weights is not None and tree.is_nested(weights):
                weights = _at(term.path, weights)
            self._check_reading(term, batch.y, batch.y_pred, weights)

    def _label(self, term) -> str:
        """A term's loss by name, and its output's where there are several."""
        name = getattr(term.loss, "name", None) or type(term.loss).__name__
        return f"{name}' for output '{term.name}" if len(self.terms) > 1 else name

    def _check_reading(self, term, y_true, y_pred, sample_weight) -> None:
        """A Loss with its own ``__call__``: the trainer reads ``call`` and
        reduces it as ``reduction`` says; refused where that is not its value."""
        if type(term.loss).__call__ is keras.losses.Loss.__call__:
            return
        values, mask = _values(term.loss, y_true, y_pred)
        loss_sum, count, weight_sum = weighted_losses.weighted_loss_sum(values, sample_weight, mask)
        divisor = {"samples": count, "weights": weight_sum, "sum": 1.0}[self.normalize]
        ours = float(tf.math.divide_no_nan(loss_sum, divisor))
        theirs = float(term.loss(y_true, y_pred, sample_weight))
        if abs(ours - theirs) > row_means.TOLERANCE * max(1.0, abs(theirs)):
            raise NotPerRow(
                f"'{self._label(term)}' reduces its values in its own __call__",
                f"`loss` '{self._label(term)}' ({type(term.loss).__name__}) overrides __call__: on "
                f"rows of the data it gives {theirs:.6g}, but its values (call) divided by "
                f"{_DIVIDES_BY[self.normalize]}, as its reduction "
                f"{term.loss.reduction!r} says, give {ours:.6g}. The trainer sums a "
                "micro-batch's values and divides the window once; put the loss's arithmetic "
                "in call(), returning one value per row, and leave the reduction to Keras."
            )

    # ------------------------------------------------------------ structure

    def align(self, y_true, y_pred):
        """``y_true`` in the structure of ``y_pred`` (dicts by output name).

        Raises:
            ValueError: the targets do not match the model's outputs.
        """
        if not tree.is_nested(y_true) and not tree.is_nested(y_pred):
            return y_true
        try:
            tree.assert_same_structure(y_pred, y_true)
            return y_true
        except (ValueError, TypeError):
            pass
        if not tree.is_nested(y_true) and len(tree.flatten(y_pred)) == 1:
            y_true = [y_true]
        elif isinstance(y_pred, (list, tuple)) and isinstance(y_true, dict):
            if set(y_true) == set(self.output_names or ()):
                y_true = [y_true[name] for name in self.output_names]
        if isinstance(y_pred, dict) and isinstance(y_true, dict) and set(y_pred) != set(y_true):
            raise ValueError(_mismatch(y_true, y_pred))
        try:
            return tree.pack_sequence_as(y_pred, tree.flatten(y_true))
        except (ValueError, TypeError):
            raise ValueError(_mismatch(y_true, y_pred)) from None

    def _as_built(self, y_true, y_pred):
        """Both in the structures Keras's CompileLoss was built with."""
        built_true, built_pred = _keras.build_structures(self.compile_loss)
        if built_pred is not None and tree.is_nested(built_pred):
            y_pred = _repack(built_pred, y_pred)
            y_true = _repack(built_true, y_true)
        return y_true, y_pred

    # ------------------------------------------------------------ graph code

    def micro(self, y_true, y_pred, sample_weight) -> MicroLoss:
        """The weighted loss sum, count and normalizer of one micro-batch."""
        rows = tf.cast(tf.shape(tree.flatten(y_pred)[0])[0], tf.float32)
        if self.compile_loss is None:  # the loss is what the layers add: divided by rows
            normalizer = tf.constant(0.0) if self.normalize == "sum" else rows
            return MicroLoss(tf.constant(0.0), rows, normalizer, rows, [])
        y_true, y_pred = self._as_built(self.align(y_true, y_pred), y_pred)
        parts = []
        for term in self.terms:
            weights = sample_weight
            if sample_weight is not None and tree.is_nested(sample_weight):
                weights = _at(term.path, sample_weight)
            values, mask = _values(term.loss, _at(term.path, y_true), _at(term.path, y_pred))
            parts.append(weighted_losses.weighted_loss_sum(values, weights, mask))
        if len(self.terms) == 1:
            (term,) = self.terms
            loss_sum, count, weight_sum = parts[0]
            normalizer = {"samples": count, "weights": weight_sum, "sum": tf.constant(0.0)}
            return MicroLoss(term.weight * loss_sum, count, normalizer[self.normalize], rows, [])
        return self._several(parts, rows)

    def _several(self, parts, rows) -> MicroLoss:
        """Several outputs: each output's sum scaled so the window divides by its rows."""
        sums = []
        means = []
        for term, (loss_sum, _, _) in zip(self.terms, parts):
            if self.normalize == "sum":
                sums.append(term.weight * loss_sum)
                means.append(loss_sum)
            else:
                sums.append(term.weight * loss_sum / term.elements_per_sample)
                means.append(tf.math.divide_no_nan(loss_sum, rows * term.elements_per_sample))
        normalizer = tf.constant(0.0) if self.normalize == "sum" else rows
        return MicroLoss(tf.add_n(sums), rows, normalizer, rows, means)


_DIVIDES_BY = {
    "samples": "the number of loss elements",
    "weights": "the total sample weight",
    "sum": "nothing",
}


def check_loss(loss):
    """``loss`` (or each entry of a dict or list of them): a name, a Loss or a callable."""
    for entry in tree.flatten(loss) if loss is not None else []:
        if entry is None or isinstance(entry, keras.losses.Loss):
            continue
        if isinstance(entry, str):
            try:
                keras.losses.get(entry)
            except ValueError as error:
                raise ValueError(
                    f"`loss` must be a Keras loss name, a keras.losses.Loss or a callable "
                    f"returning per-sample losses. Received: loss={entry!r} ({error})"
                ) from None
        elif not callable(entry):
            raise TypeError(
                "`loss` must be a Keras loss name, a keras.losses.Loss or a callable "
                f"returning per-sample losses (or a dict or list of them, one per output). "
                f"Received: loss={entry!r} of type {type(entry).__name__}"
            )


def check_targets(y, y_pred, per_sample_losses):
    """Checks, on one eager micro-batch, that targets fit the model's outputs.

    Called with ``per_sample_losses=None`` before the loss is computed, then
    with the losses.

    A mismatch that broadcasts (targets (b, 3) against outputs (b, 1)) would
    train silently on the wrong numbers, so it is refused here.
    """
    y_shape, pred_shape = tuple(y.shape), tuple(y_pred.shape)
    loss_shape = None if per_sample_losses is None else tuple(per_sample_losses.shape)
    problem = None
    if y_shape[:1] != pred_shape[:1]:
        problem = "targets and model outputs have different batch sizes"
    elif loss_shape is None:
        pass
    elif not loss_shape:
        problem = "`loss` returned a scalar; it must return one loss per sample"
    elif loss_shape[0] != pred_shape[0]:
        problem = "per-sample losses do not have one entry per sample"
    elif len(y_shape) == len(pred_shape) and y_shape[1:] != pred_shape[1:] and y_shape[-1] != 1:
        problem = "targets and model outputs have different shapes"
    if problem:
        raise ValueError(
            f"{problem}. Received: targets of shape {y_shape}, model outputs of shape "
            f"{pred_shape}, per-sample losses of shape {loss_shape}. Check `dataset` "
            "and `loss`."
        )


def _values(loss, y_true, y_pred):
    """Per-element losses and their Keras mask (or None), as ``Loss.__call__`` makes them."""
    in_mask = _keras.get_keras_mask(y_pred)
    dtype = getattr(loss, "dtype", None) or "float32"
    y_pred_cast = tf.cast(y_pred, dtype) if y_pred.dtype.is_floating else y_pred
    y_true_cast = tf.cast(y_true, dtype)
    values = loss.call(y_true_cast, y_pred_cast)
    out_mask = _keras.get_keras_mask(values)
    if in_mask is not None and out_mask is not None:
        mask = tf.logical_and(tf.cast(in_mask, tf.bool), tf.cast(out_mask, tf.bool))
    else:
        mask = in_mask if in_mask is not None else out_mask
    if values.shape.rank == 0:
        name = getattr(loss, "name", None) or type(loss).__name__
        raise NotPerRow(
            f"'{name}' returns one value for the batch",
            "`loss` must return one loss per sample, shape (batch, ...); it returned "
            "a scalar. Pass a Keras loss object, a loss name, or a function without "
            "reduction."
        )
    return values, mask


def _checked_values(loss, y_true, y_pred):
    """``_values`` on an eager micro-batch, with targets and shapes checked."""
    check_targets(y_true, y_pred, None)
    try:
        values, mask = _values(loss, y_true, y_pred)
    except NotPerRow:
        raise
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as error:
        raise ValueError(
            f"`loss` failed on the first micro-batch: targets of shape "
            f"{tuple(y_true.shape)}, model outputs of shape {tuple(y_pred.shape)}: {error}"
        ) from error
    check_targets(y_true, y_pred, values)
    return values, mask


def _at(path, structure):
    for key in path:
        structure = structure[key]
    return structure


def _repack(built, values):
    try:
        tree.assert_same_structure(built, values)
        return values
    except (ValueError, TypeError):
        return tree.pack_sequence_as(built, tree.flatten(values))


def _structure(values):
    return tree.map_structure(lambda _: "*", values)


def _mismatch(y_true, y_pred):
    return (
        "`y` (the targets) must match the model's outputs: one target per output, "
        f"in the same structure. Received targets {_structure(y_true)} for outputs "
        f"{_structure(y_pred)}."
    )
