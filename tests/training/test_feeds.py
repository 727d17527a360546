"""fit's data as epochs (gaviz.training.data.feeds): each a pass, described, not run
(a fresh iterator, or the arrays in an epoch's row order); no model is trained here.
The feed is given no window loop: fit's data runs one way."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_weights, make_mlp, start_of

import gaviz
from gaviz import _keras, _tensorflow
from gaviz.training.data import feeds
from gaviz.training.loop import sources

STRATEGY = tf.distribute.get_strategy()


def arrays(n=10):
    return np.arange(n, dtype=np.float32).reshape(n, 1).repeat(5, axis=1), np.zeros((n, 1), np.float32)


def test_arrays_become_an_array_feed_cut_in_the_graph():
    x, y = arrays(10)
    feed = feeds.make_feed(feeds.FitData(x, y, 4, False), make_mlp(), STRATEGY)
    assert isinstance(feed, feeds.ArrayFeed) and feed.micro_batches() == 3
    epoch = feed.epoch()
    assert isinstance(epoch, sources.ArrayPass)
    assert (epoch.order.numpy().tolist(), epoch.batch_size, epoch.rows) == (list(range(10)), 4, 10)
    np.testing.assert_array_equal(feed.first()[0], x[:4])
    np.random.seed(0)
    shuffled = feeds.make_feed(feeds.FitData(x, y, 4, True), make_mlp(), STRATEGY)
    orders = [shuffled.epoch().order.numpy().tolist() for _ in range(2)]
    assert sorted(orders[0]) == list(range(10)) and orders[0] != orders[1]  # one order an epoch


def test_a_dataset_gives_a_fresh_iterator_every_epoch():
    x, y = arrays(6)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2).map(lambda a, b: (a, b))
    feed = feeds.make_feed(feeds.FitData(dataset), make_mlp(), STRATEGY)
    assert isinstance(feed, feeds.DatasetFeed) and feed.micro_batches() == 3
    for _ in range(2):
        epoch = feed.epoch()
        assert isinstance(epoch, sources.IteratorPass)
        taken = [next(epoch.iterator) for _ in range(3)]
        np.testing.assert_array_equal(taken[2][0], x[4:])
    unknown = dataset.filter(lambda a, b: True)
    assert feeds.DatasetFeed(feeds.FitData(unknown), unknown, STRATEGY).micro_batches() is None


def test_a_dataset_of_sliced_arrays_batched_is_cut_like_arrays():
    """from_tensor_slices(...).batch(...) (prefetched or not) is read as its
    arrays, in the dataset's order (fit's shuffle is for arrays), with the
    dataset's batch as the micro-batch; it stays batched data: no batch_size to
    validate in. This reads TensorFlow's dataset classes (_tensorflow.sliced_arrays):
    a TensorFlow that changes them fails here first."""
    x, y = arrays(10)
    w = np.linspace(0, 1, 10).astype(np.float32)
    for dataset, rows in [
        (tf.data.Dataset.from_tensor_slices((x, y)).batch(4).prefetch(2), 10),
        (tf.data.Dataset.from_tensor_slices((x, y, w)).batch(4, drop_remainder=True), 8),
        (tf.data.Dataset.from_tensor_slices(({"a": x}, y)).batch(4, num_parallel_calls=2), 10),
    ]:
        feed = feeds.make_feed(feeds.FitData(dataset), make_mlp(), STRATEGY)
        assert isinstance(feed, feeds.ArrayFeed) and feed.micro_batches() == -(-rows // 4)
        assert feed.big_batch_size(8) is None
        epoch = feed.epoch()
        assert (epoch.order.numpy().tolist(), epoch.batch_size, epoch.rows) == (
            list(range(rows)), 4, rows)
        expected = list(dataset.as_numpy_iterator())[0]
        for got, want in zip(tf.nest.flatten(feed.first()), tf.nest.flatten(expected)):
            np.testing.assert_array_equal(got, want)


def test_a_pipeline_that_does_more_than_slice_and_batch_is_iterated():
    """Shuffled, mapped, repeated or taken from, ragged, of strings, of inputs
    alone, or empty: each pass is the pipeline's to give."""
    x, y = arrays(10)
    sliced = tf.data.Dataset.from_tensor_slices((x, y))
    ragged = tf.ragged.constant([[1.0], [2.0, 3.0]])
    for dataset in [
        sliced.shuffle(10).batch(4),
        sliced.batch(4).map(lambda a, b: (a, b)),
        sliced.batch(4).repeat(2),
        sliced.batch(4).take(2),
        sliced.batch(4).cache(),
        tf.data.Dataset.from_tensor_slices((ragged, y[:2])).batch(2),
        tf.data.Dataset.from_tensor_slices((x[:, 0].astype(str), y)).batch(4),
        tf.data.Dataset.from_tensor_slices(x).batch(4),
        sliced.batch(4).take(0),
    ]:
        assert feeds._sliced_micro_batches(dataset) is None, dataset


def test_bad_data_is_named_as_the_argument_x():
    model = make_mlp()
    x, y = arrays(4)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
    with pytest.raises(ValueError, match="`y` must be None when `x` is a tf.data.Dataset"):
        feeds.make_feed(feeds.FitData(dataset, y), model, STRATEGY)
    with pytest.raises(TypeError, match="`x` must be a tf.data.Dataset.*Received: a tuple"):
        feeds.make_feed(feeds.FitData((x, y)), model, STRATEGY)
    with pytest.raises(ValueError, match="`x` is empty"):
        feeds.make_feed(feeds.FitData(dataset.take(0)), model, STRATEGY).first()
    with pytest.raises(ValueError, match="`batch_size` must be an integer >= 1"):
        feeds.make_feed(feeds.FitData(x, y, 0, True), model, STRATEGY)


def test_class_weight_on_sliced_arrays_weighs_the_arrays_rows_as_keras_weighs_batches():
    """Cut as arrays, with the weights Keras's map gives each batch."""
    x, _ = arrays(10)
    labels = np.array([[0], [1], [2], [1], [0], [2], [1], [1], [0], [2]], "float32")
    class_weight = {0: 1.0, 1: 3.0, 2: 0.5}
    dataset = tf.data.Dataset.from_tensor_slices((x, labels)).batch(4)
    feed = feeds.make_feed(feeds.FitData(dataset, class_weight=class_weight), make_mlp(),
                           STRATEGY)
    assert isinstance(feed, feeds.ArrayFeed)
    keras_batches = dataset.map(_keras.make_class_weight_map_fn(class_weight))
    np.testing.assert_array_equal(
        feed.epoch().arrays[2], np.concatenate([w for *_, w in keras_batches.as_numpy_iterator()]))


def test_a_cache_is_found_among_a_datasets_inputs():
    """What DatasetFeed.first reads to its end (TensorFlow's internals it reads
    through: DatasetV2._inputs and the class name CacheDataset)."""
    rows = tf.data.Dataset.range(4)
    assert not _tensorflow.dataset_caches(rows.batch(2).prefetch(1))
    assert _tensorflow.dataset_caches(rows.cache().batch(2).prefetch(1))
    assert _tensorflow.dataset_caches(rows.batch(2).concatenate(rows.batch(2).cache()))


def test_the_first_micro_batch_of_a_cached_dataset_is_its_first():
    x, y = arrays(6)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).cache()
    feed = feeds.make_feed(feeds.FitData(dataset), make_mlp(), STRATEGY)
    np.testing.assert_array_equal(feed.first()[0], x[:4])
    with pytest.raises(ValueError, match="`x` is empty"):
        feeds.make_feed(feeds.FitData(dataset.take(0).cache()), make_mlp(), STRATEGY).first()


def test_inputs_alone_are_micro_batches_without_targets_when_none_are_needed():
    """A model whose layers add its loss (targets=False) takes x alone: arrays
    with y=None, or a dataset of x; its micro-batches are (x, None)."""
    model = make_mlp()
    x, _ = arrays(6)
    feed = feeds.make_feed(feeds.FitData(x, None, 4, False), model, STRATEGY, targets=False)
    inputs, targets = feed.first()
    np.testing.assert_array_equal(inputs, x[:4])
    assert targets is None
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(4)
    feed = feeds.make_feed(feeds.FitData(dataset), model, STRATEGY, targets=False)
    inputs, targets = feed.first()
    np.testing.assert_array_equal(inputs, x[:4])
    assert targets is None
    with pytest.raises(TypeError, match=r"`x` elements must be tuples \(x, y\)"):
        feeds.make_feed(feeds.FitData(dataset), model, STRATEGY)
    with pytest.raises(ValueError, match="`y` must be given"):
        feeds.make_feed(feeds.FitData(x, None, 4, False), model, STRATEGY)


def test_the_feed_knows_the_data_fit_asks_about():
    """Micro-batch size, effective batch, epoch length and validation rows come
    from the feed: the trainer and the epoch loop ask it, not x."""
    model = make_mlp()
    x, y = arrays(10)
    feed = feeds.make_feed(feeds.FitData(x, y, 4, False, validation_split=0.2, steps_per_epoch=2),
                           model, STRATEGY)
    assert (feed.micro_batch_size, feed.big_batch_size(3), feed.steps_per_epoch) == (4, 12, 2)
    assert feed.rows == 8 and feed.micro_batches() == 2  # the last 2 rows validate
    val_x, val_y, val_w = feed.validation_data
    np.testing.assert_array_equal(val_x, x[8:])
    assert val_w is None
    given = (x[:2], y[:2])
    feed = feeds.make_feed(feeds.FitData(x, y, 4, validation_split=0.2, validation_data=given),
                           model, STRATEGY)
    assert feed.rows == 10 and feed.validation_data is given  # given data wins, as in Keras
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
    feed = feeds.make_feed(feeds.FitData(dataset), model, STRATEGY)
    assert (feed.micro_batch_size, feed.big_batch_size(3)) == (None, None)
    assert (feed.steps_per_epoch, feed.validation_data) == (None, None)


def test_bad_epoch_and_validation_arguments_are_named():
    model = make_mlp()
    x, y = arrays(10)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
    with pytest.raises(ValueError, match="`validation_split` must be a fraction"):
        feeds.make_feed(feeds.FitData(x, y, validation_split=1.0), model, STRATEGY)
    with pytest.raises(ValueError, match="`validation_split` takes arrays apart"):
        feeds.make_feed(feeds.FitData(dataset, validation_split=0.5), model, STRATEGY)
    with pytest.raises(ValueError, match="`steps_per_epoch` must be an integer >= 1"):
        feeds.make_feed(feeds.FitData(x, y, steps_per_epoch=0), model, STRATEGY)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        feeds.make_feed(feeds.FitData(dataset.repeat()), model, STRATEGY)


@pytest.mark.parametrize("k, steps, taken", [
    (3, 0, [0, 1, 2]), (3, 2, [0]), (3, 3, []), (8, 0, [0, 1, 2, 3, 4])])
def test_an_iterator_window_reads_ahead_but_never_past_its_end(k, steps, taken):
    """The next micro-batch is asked for while this one's step runs, but a
    window takes no element it does not use: the next window starts where it ended."""
    iterator = iter(tf.data.Dataset.range(5))

    @tf.function
    def window(steps):
        source = sources.IteratorSource(iterator)
        seen = tf.TensorArray(tf.int64, 0, dynamic_size=True)
        def micro_step(element, sums):
            return sums.write(sums.size(), element)
        seen, steps, consumed, exhausted = source.accumulate(micro_step, seen, steps, k)
        return seen.stack(), consumed, exhausted

    seen, consumed, exhausted = window(tf.constant(steps, tf.int64))
    assert seen.numpy().tolist() == taken and int(consumed) == len(taken)
    assert bool(exhausted) == (len(taken) == 5)
    rest = [int(e) for e in iterator]
    assert rest == [i for i in range(5) if i >= len(taken)]


def test_an_iterated_pipeline_is_read_without_the_autotuner_unless_its_options_say():
    """The same elements in the same order; a pipeline whose options set
    autotune.enabled (either way) keeps it."""
    x, y = arrays(10)
    pipeline = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        10, seed=0, reshuffle_each_iteration=False).batch(4).map(
        lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
    feed = feeds.make_feed(feeds.FitData(pipeline), make_mlp(), STRATEGY)
    assert feed.source.options().autotune.enabled is False
    assert pipeline.options().autotune.enabled is None  # the user's dataset is untouched
    for ours, theirs in zip(feed.source, pipeline, strict=True):
        for got, want in zip(tf.nest.flatten(ours), tf.nest.flatten(theirs)):
            np.testing.assert_array_equal(got, want)
    for enabled in (True, False):
        options = tf.data.Options()
        options.autotune.enabled = enabled
        chosen = feeds.make_feed(feeds.FitData(pipeline.with_options(options)), make_mlp(),
                                 STRATEGY)
        assert chosen.source.options().autotune.enabled is enabled


def test_reading_ahead_leaves_a_reshuffling_pipeline_on_model_fits_first_order():
    """fit reads a dataset's first micro-batches before epoch 1 (its spec, the loss
    checks) from a copy: a shuffle(seed=...) that reshuffles each iteration gives
    the next iterator the next order, and epoch 1 would have read Model.fit's second.
    (Keras's later epochs of such a pipeline are not plain iteration's; noticed.)"""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 5)).astype("float32")
    y = rng.normal(size=(48, 1)).astype("float32")

    def dataset(batch):
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
            48, seed=3, reshuffle_each_iteration=True).batch(batch)

    def make():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
        return model

    ours, theirs = make(), make()
    start = start_of(ours)
    gaviz.AccumulationTrainer(ours, accumulation_steps=3).fit(dataset(4), epochs=1, verbose=0)
    theirs.fit(dataset(12), epochs=1, verbose=0)
    assert_same_weights(ours, theirs, start, terms=12)
