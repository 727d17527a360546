"""Measuring how far a trainer lands from the exact one."""

from __future__ import annotations

from dataclasses import dataclass, field

import keras
import numpy as np

from gaviz.gallery import pitfalls
from gaviz.plotting import readable_log_axis
from gaviz.training.fit.history import NonFiniteUpdate
from gaviz.training.trainer import AccumulationTrainer


@dataclass
class Comparison:
    """A trainer and the exact trainer, run on the same model, data and seed.

    Attributes:
        name: the compared trainer's class name.
        loss, exact_loss: per-update effective-batch losses of each run.
        weight_distance: Euclidean distance between the two runs' weights
            after each update (as many as both runs made).
        update_norms, exact_update_norms: size of each update's weight change.
        first_update_relative_error: ``|d - d_exact| / |d_exact|`` for the
            first update's weight change ``d``.
        final_weight_distance: distance between the two runs' weights at the
            end, as ``fit`` left them (with ``use_ema=True``, the moving average
            it copies into the model), whatever number of updates each made (a
            dropped tail makes fewer updates, so ``weight_distance``, paired by
            update number, can understate it).
        effective_learning_rate_ratio: ``|d| / |d_exact|`` for the first
            update when both point the same way (cosine > 0.99), else None:
            how much larger the step is, as a learning-rate factor.
        error: the message of an error that ended the compared run early
            (a diverging pitfall), else None. Losses recorded before it are kept.
        failed_update: the update that failed (``NonFiniteUpdate.update``), else None.

    Note that some pitfalls also report a different loss (``mean_of_means``
    reports the mean of micro-batch means, ``missing_normalization`` k times
    the loss), so their loss curves measure their own quantity.
    """

    name: str
    loss: list = field(default_factory=list)
    exact_loss: list = field(default_factory=list)
    weight_distance: list = field(default_factory=list)
    update_norms: list = field(default_factory=list)
    exact_update_norms: list = field(default_factory=list)
    first_update_relative_error: float = float("nan")
    final_weight_distance: float = float("nan")
    effective_learning_rate_ratio: float | None = None
    error: str | None = None
    failed_update: int | None = None

    def summary(self) -> str:
        ratio = (
            "n/a (direction differs)"
            if self.effective_learning_rate_ratio is None
            else f"{self.effective_learning_rate_ratio:.3f}"
        )
        lines = [
            f"{self.label} against the exact trainer:",
            f"  first update relative error:   {self.first_update_relative_error:.3g}",
            f"  effective learning-rate ratio: {ratio}",
            f"  final weight distance:         {self.final_weight_distance:.3g}",
            f"  updates: {len(self.loss)} (exact: {len(self.exact_loss)})",
        ]
        if self.error:
            lines.append(f"  stopped early: {self.error}")
        return "\n".join(lines)

    @property
    def headline(self) -> str:
        """The number that tells this trainer's story, in words (``plot``'s title).

        Which number is the pitfall's ``story`` (:data:`gaviz.gallery.pitfalls.STORIES`):
        ``"update_growth"``, how much the update size grew, last update /
        first; ``"learning_rate"``, the effective learning-rate ratio;
        ``"update_count"``, the update counts and the final weight distance;
        ``"moving_average"``, the final weight distance, where ``fit`` copied the
        moving average into the model; ``"first_update"`` (any other trainer),
        the first update's relative error.
        """
        record = pitfalls.record_of(self.name)
        story = self._story(record.story if record else "first_update")
        return f"{self.label}: {story}" + (", then stopped: non-finite" if self.error else "")

    @property
    def label(self) -> str:
        """The compared trainer as the lessons name it: a pitfall's key in
        :data:`gaviz.PITFALLS` (``missing_reset``, not ``MissingReset``), else ``name``."""
        record = pitfalls.record_of(self.name)
        return record.name if record else self.name

    def _story(self, kind: str) -> str:
        norms, exact_norms = self.update_norms, self.exact_update_norms
        if kind == "update_growth" and len(norms) > 1 and norms[0] > 0 and exact_norms[0] > 0:
            return (f"update {len(norms)} is {norms[-1] / norms[0]:.3g}x update 1 "
                    f"(exact: {exact_norms[-1] / exact_norms[0]:.2g}x)")
        if kind == "learning_rate" and self.effective_learning_rate_ratio is not None:
            return f"effective learning rate x{self.effective_learning_rate_ratio:.3g}"
        if kind == "update_count":
            return (f"{len(self.loss)} updates (exact: {len(self.exact_loss)}), "
                    f"final weights {self.final_weight_distance:.2g} apart")
        if kind == "moving_average":
            return (f"the moving average fit leaves in the model is "
                    f"{self.final_weight_distance:.2g} from the exact one's after "
                    f"{len(self.loss)} updates")
        return f"first update off by {self.first_update_relative_error:.2g}"

    def plot(self, figure=None):
        """Loss histories and weight distance, side by side; returns the figure."""
        if figure is None:
            import matplotlib.pyplot as plt

            figure = plt.figure(figsize=(10, 3.6))
        left, right = figure.subplots(1, 2)
        left.plot(range(1, len(self.exact_loss) + 1), self.exact_loss, label="exact", linewidth=2)
        left.plot(range(1, len(self.loss) + 1), self.loss, "--", label=self.label)
        left.set_xlabel("optimizer update")
        left.set_ylabel("effective-batch loss")
        left.set_title("loss of each update", fontsize="medium")
        values = [v for v in self.loss + self.exact_loss if np.isfinite(v)]
        if values and min(values) > 0:
            left.set_yscale("log")  # a diverging pitfall would flatten the exact curve
            readable_log_axis(left)
        left.legend(fontsize="small")
        left.grid(True, alpha=0.3)
        right.plot(range(1, len(self.weight_distance) + 1), self.weight_distance, color="C3")
        right.set_xlabel("optimizer update")
        right.set_ylabel("|weights - exact weights|")
        right.set_title(f"how far {self.label}'s weights are from exact", fontsize="medium")
        right.grid(True, alpha=0.3)
        figure.suptitle(self.headline)
        figure.tight_layout()
        return figure


@dataclass
class RunTrace:
    """One trainer's run as ``compare_runs`` needs it.

    Attributes:
        losses: each update's effective-batch loss.
        weights: the model's weights flattened to float64, before the first
            update and after each one.
        failure: the ``NonFiniteUpdate`` that ended the run early, else None.
        final: the weights as ``fit`` left them (with ``use_ema=True``, the
            moving average it copied into the model); None: the last of ``weights``.
    """

    losses: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    failure: NonFiniteUpdate | None = None
    final: np.ndarray | None = None

    @property
    def final_weights(self) -> np.ndarray:
        """The weights at the end of the run: ``final``, else the last of ``weights``."""
        return self.weights[-1] if self.final is None else self.final

    @property
    def error(self) -> str | None:
        return None if self.failure is None else str(self.failure)


def record_run(trainer, dataset, epochs: int = 1, on_update=None,
               every_update: bool = True) -> RunTrace:
    """Trains ``trainer`` and records its losses and weights after every update.

    A ``NonFiniteUpdate`` ends the run; what was recorded before it is kept.
    ``on_update`` (a callable or a list) also sees each update. With
    ``every_update=False`` only the first and the last weights are kept.
    """
    trace = RunTrace(weights=[flat_weights(trainer.model)])
    listeners = [] if on_update is None else (
        [on_update] if callable(on_update) else list(on_update)
    )

    def record(update):
        if every_update:
            trace.weights.append(flat_weights(trainer.model))
        trace.losses.append(update.loss)
        for listener in listeners:
            listener(update)

    try:
        trainer.fit(dataset, epochs=epochs, on_update=record, verbose=0)
        trace.final = flat_weights(trainer.model)
    except NonFiniteUpdate as failure:
        trace.failure = failure
    if not every_update:
        trace.weights.append(flat_weights(trainer.model))
    return trace


def compare_runs(name: str, subject: RunTrace, exact: RunTrace) -> Comparison:
    """How far ``subject`` landed from ``exact`` (both from the same start)."""
    comparison = Comparison(
        name=name,
        loss=list(subject.losses),
        exact_loss=list(exact.losses),
        weight_distance=[
            float(np.linalg.norm(p - e)) for p, e in zip(subject.weights[1:], exact.weights[1:])
        ],
        update_norms=_update_norms(subject.weights),
        exact_update_norms=_update_norms(exact.weights),
        final_weight_distance=float(np.linalg.norm(subject.final_weights - exact.final_weights)),
        error=subject.error,
        failed_update=None if subject.failure is None else subject.failure.update,
    )
    if len(subject.weights) > 1 and len(exact.weights) > 1:
        step = subject.weights[1] - subject.weights[0]
        exact_step = exact.weights[1] - exact.weights[0]
        exact_norm = np.linalg.norm(exact_step)
        comparison.first_update_relative_error = float(np.linalg.norm(step - exact_step) / exact_norm)
        cosine = float(step @ exact_step / (np.linalg.norm(step) * exact_norm + 1e-30))
        if cosine > 0.99:
            comparison.effective_learning_rate_ratio = float(np.linalg.norm(step) / exact_norm)
    return comparison


def compare_with_exact(
    trainer_class,
    model,
    optimizer,
    loss,
    dataset,
    accumulation_steps: int,
    epochs: int = 1,
    seed: int = 0,
    **trainer_kwargs,
) -> Comparison:
    """Runs ``trainer_class`` and the exact trainer from identical starts.

    Args:
        trainer_class: ``AccumulationTrainer`` or a class with its constructor
            (any of ``gaviz.gallery.pitfalls.PITFALLS``).
        model: a Keras model to copy (Sequential or functional: cloned with
            its current weights) or a callable returning a fresh model with
            the same initial weights each call.
        optimizer: a Keras optimizer to copy (from its config), or a callable
            returning a fresh one.
        loss, dataset, accumulation_steps, epochs, trainer_kwargs: as for
            ``AccumulationTrainer`` and its ``fit``.
        seed: seeds Keras before each run, so both start alike.

    Returns:
        A :class:`Comparison`.
    """
    traces = []
    for cls in (trainer_class, AccumulationTrainer):
        keras.utils.set_random_seed(seed)
        trainer = cls(
            _fresh_model(model), _fresh_optimizer(optimizer), loss, accumulation_steps,
            **trainer_kwargs,
        )
        traces.append(record_run(trainer, dataset, epochs))
    return compare_runs(trainer_class.__name__, *traces)


def _fresh_model(model):
    if isinstance(model, keras.Model):
        copy = keras.models.clone_model(model)
        copy.set_weights(model.get_weights())
        return copy
    if callable(model):
        return model()
    raise TypeError(
        f"`model` must be a keras.Model or a callable returning one. Received: {model!r}"
    )


def _fresh_optimizer(optimizer):
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return optimizer.__class__.from_config(optimizer.get_config())
    if callable(optimizer):
        return optimizer()
    raise TypeError(
        "`optimizer` must be a Keras optimizer or a callable returning one. "
        f"Received: {optimizer!r}"
    )


def flat_weights(model) -> np.ndarray:
    """Every weight of ``model`` in one float64 vector (for distances)."""
    return np.concatenate([np.ravel(w) for w in model.get_weights()]).astype(np.float64)


def _update_norms(snapshots):
    return [float(np.linalg.norm(b - a)) for a, b in zip(snapshots, snapshots[1:])]
