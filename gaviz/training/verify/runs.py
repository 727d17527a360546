"""What ``trainer.verify`` runs: a fit of the trainer and ``Model.fit`` at the
big batch, on the same rows, and what the runs change (put back afterwards)."""

from __future__ import annotations

from gaviz.training.data import feeds
from gaviz.training.verify import verification


def verification_runs(trainer, k: int, m: int, class_weight):
    """What ``verify`` runs on ``trainer`` at micro-batches of ``m``, and the
    attributes the runs change (put back afterwards)."""
    model = trainer.model

    def prepare(rows):
        trainer._follow_compile()
        trainer._checked_spec = None  # the model's losses checked again, their warnings heard
        data = feeds.FitData(rows.x, rows.y, m, False, rows.sample_weight, class_weight, 0.0,
                             None, None)
        trainer._prepare(feeds.make_feed(data, model, trainer.strategy,
                                         targets=trainer._needs_targets))

    def gaviz_run(rows):
        return trainer.fit(rows.x, rows.y, m, epochs=1, verbose=0, shuffle=False,
                           sample_weight=rows.sample_weight, class_weight=class_weight).history

    def keras_run(rows):
        return model.fit(rows.x, rows.y, k * m, epochs=1, verbose=0, shuffle=False,
                         sample_weight=rows.sample_weight, class_weight=class_weight).history

    def refresh():  # after a layer's setting changed: both traced anew
        trainer.window_loop = trainer._window_loop()
        model.train_function = None

    attributes = {model: ("train_function", "history", "stop_training"),
                  trainer: ("_checked_spec", "_state_watched", "window_loop"),
                  trainer.call_size: ("size", "listening")}
    return verification.Runs(prepare, gaviz_run, keras_run, refresh), attributes
