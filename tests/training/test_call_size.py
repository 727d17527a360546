"""How many windows a graph call runs (gaviz.training.fit.call_size), without training."""

import tensorflow as tf

from gaviz.training.fit.call_size import AUTO_CALL_SECONDS, AUTO_MAX_WINDOWS, CallSize, worker_count


def test_a_fixed_size_never_changes():
    size = CallSize(8)
    for _ in range(5):
        size.observe(0.0, 8)
    assert (size.size, int(size.next()), size.capacity) == (8, 8, 8)


def test_auto_doubles_quick_full_calls_up_to_its_maximum():
    size = CallSize("auto")
    assert int(size.next()) == 1 and size.capacity == AUTO_MAX_WINDOWS
    sizes = []
    for _ in range(12):
        size.observe(AUTO_CALL_SECONDS / 2, size.size)
        sizes.append(size.size)
    assert sizes[:4] == [2, 4, 8, 16] and sizes[-1] == AUTO_MAX_WINDOWS


def test_auto_keeps_slow_or_short_calls():
    size = CallSize("auto")
    size.observe(AUTO_CALL_SECONDS * 2, 1)  # slow
    size.observe(0.0, 0)  # the data ran out before the call was full
    assert size.size == 1


def test_auto_runs_one_window_per_call_while_someone_listens():
    size = CallSize("auto")
    size.observe(0.0, 1)
    size.listening = True
    assert size.size == 2 and int(size.next()) == 1
    size.observe(0.0, 1)
    assert size.size == 2  # no growth while listening


def test_auto_stays_one_window_per_call_with_several_workers():
    # Each worker would time its own calls; sizes that differ put the
    # workers' collectives out of order, and they deadlock.
    one, several = CallSize("auto", workers=1), CallSize("auto", workers=2)
    for size in (one, several):
        size.observe(0.0, 1)
    assert (one.size, several.size) == (2, 1)
    assert worker_count(tf.distribute.get_strategy()) == 1
    cluster = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]})
    )

    class Clustered:
        cluster_resolver = cluster

    assert worker_count(Clustered()) == 3
