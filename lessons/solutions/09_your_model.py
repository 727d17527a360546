"""Solution to lesson 09's exercise: a model of your own, trained by gaviz's trainer.

``make_my_model`` builds and compiles any Keras model for the demo data (8
features in, 1 target out): the trainer takes the optimizer, loss and
metrics from ``compile``. ``fit_accumulated`` wraps it in
``gaviz.AccumulationTrainer`` with k = 256 / 32 = 8 and calls ``fit`` with
``Model.fit``'s arguments, ``batch_size`` being the micro-batch; unshuffled,
its History equals ``model.fit(batch_size=256, shuffle=False)``'s.
``best_epoch`` reads that History as Keras's: ``history.history["val_loss"]``
holds one value per epoch, and epochs are counted from 1 where Keras prints
them ("Epoch 2/3").
"""

import keras

import gaviz


def make_my_model():
    """A small MLP of my own, compiled: the trainer takes optimizer, loss and metrics from it."""
    model = keras.Sequential([keras.Input((8,)),
                              keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", metrics=["mae"])
    return model


def fit_accumulated(model, x, y, validation_data):
    """3 epochs, updates of 256 samples as 8 micro-batches of 32, in a fixed order."""
    trainer = gaviz.AccumulationTrainer(model, accumulation_steps=256 // 32)
    return trainer.fit(x, y, batch_size=32, epochs=3, shuffle=False,
                       validation_data=validation_data, verbose=0)


def best_epoch(history):
    """The epoch, counted from 1, whose val_loss is the lowest."""
    val_loss = history.history["val_loss"]
    return val_loss.index(min(val_loss)) + 1
