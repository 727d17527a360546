"""Lesson 09's checker passes the solution and names the usual mistakes."""

import importlib
import pathlib
import statistics
import sys
import time

from gaviz.course import lesson09

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lessons"))
solution = importlib.import_module("solutions.09_timing")


def _timed(fit_once, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit_once()
        times.append(time.perf_counter() - start)
    return times


def test_the_solution_passes():
    assert lesson09.median_epoch_seconds.evaluate(solution.median_epoch_seconds).status == "pass"


def test_the_stub_is_not_attempted():
    outcome = lesson09.median_epoch_seconds.evaluate(lambda fit_once, repeats: None)
    assert outcome.status == "not attempted"


def test_no_warm_up_is_a_fault():
    outcome = lesson09.median_epoch_seconds.evaluate(
        lambda fit_once, repeats: statistics.median(_timed(fit_once, repeats)))
    assert outcome.status == "fail" and "got 3 calls" in outcome.message


def test_the_mean_is_a_fault():
    def mean_after_warm_up(fit_once, repeats):
        fit_once()
        return statistics.mean(_timed(fit_once, repeats))

    outcome = lesson09.median_epoch_seconds.evaluate(mean_after_warm_up)
    assert outcome.status == "fail" and "is the mean of the timed calls" in outcome.message


def test_an_accumulator_in_a_train_step_under_model_fit_equals_the_big_batch():
    """The lesson's VAE section: a model with its own train_step steps a gaviz.Accumulator under
    Model.fit, and FlushAtEpochEnd applies each epoch's partial window (1100 samples: 4 windows of
    8 x 32, then 32 + 32 + 12): the big batch's weights, 10 updates in 2 epochs. Without the
    callback each window runs on into the next epoch: 70 micro-batches make 8 updates."""
    import keras
    import numpy as np
    import tensorflow as tf

    import gaviz
    from gaviz.course import max_difference

    x, _ = gaviz.demo.make_data(1100, seed=0)
    noise = np.random.default_rng(0).normal(size=(1100, 2)).astype("float32")

    class VAE(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = keras.layers.Dense(4)
            self.decoder = keras.layers.Dense(gaviz.demo.FEATURES)
            self.accumulator = None

        def call(self, x):
            return self.decoder(tf.split(self.encoder(x), 2, axis=-1)[0])

        def train_step(self, data):
            x, noise = data
            with tf.GradientTape() as tape:
                mean, log_var = tf.split(self.encoder(x), 2, axis=-1)
                x_hat = self.decoder(mean + tf.exp(0.5 * log_var) * noise)
                kl = -0.5 * tf.reduce_sum(1 + log_var - mean ** 2 - tf.exp(log_var), axis=-1)
                loss = tf.reduce_mean(tf.reduce_sum((x - x_hat) ** 2, axis=-1) + kl)
            gradients = tape.gradient(loss, self.trainable_variables)
            if self.accumulator is None:
                self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
            else:
                self.accumulator.step(gradients, count=tf.shape(x)[0])
            return {"vae_loss": loss}

    def make_vae():
        keras.utils.set_random_seed(0)
        vae = VAE()
        vae.compile(keras.optimizers.Adam(1e-2))
        vae(x[:1])
        return vae

    def accumulated(flush):
        vae = make_vae()
        vae.accumulator = gaviz.Accumulator(vae.optimizer, vae.trainable_variables, 8)
        callbacks = [gaviz.FlushAtEpochEnd(vae.accumulator)] if flush else []
        vae.fit(x, noise, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=callbacks)
        return vae

    big = make_vae()
    big.fit(x, noise, batch_size=256, epochs=2, shuffle=False, verbose=0)
    assert int(big.optimizer.iterations) == 10
    flushed, unflushed = accumulated(flush=True), accumulated(flush=False)
    assert int(flushed.optimizer.iterations) == 10 and int(unflushed.optimizer.iterations) == 8
    assert max_difference(flushed, big) < 1e-5
    assert max_difference(unflushed, big) > 1e-3
    assert max_difference(big, make_vae()) > 1e-2  # it trained
