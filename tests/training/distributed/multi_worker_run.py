"""One worker of a two-process MultiWorkerMirroredStrategy run on 127.0.0.1.

Usage: multi_worker_run.py PORT0 PORT1 INDEX OUT.json. Both workers train
the same global data; each writes its final weights, losses and the
collective ops it finds in the traced window function.
"""

import json
import os
import sys

port0, port1, index, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"127.0.0.1:{port0}", f"127.0.0.1:{port1}"]},
    "task": {"type": "worker", "index": index},
})
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import gaviz  # noqa: E402
from gaviz.training.fit.call_size import worker_count  # noqa: E402

K, MICRO, SAMPLES = 3, 8, 100


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )


def collective_ops(trainer, iterator):
    """Collective ops in the traced window function: (outside, inside) the micro-step loop.

    The micro-step loop's body is the function that pulls micro-batches
    (IteratorGetNextAsOptional); it and every function it calls count as
    inside. Each op is listed as "op:dtype", so gradient reductions (float)
    can be told from the iterator's own end-of-data agreement between workers.
    """
    graph_def = trainer.window_loop.iterator_function(iterator).graph.as_graph_def()
    functions = {f.signature.name: f for f in graph_def.library.function}

    def listed(nodes):
        return [f"{n.op}:{tf.dtypes.as_dtype(n.attr['T'].type).name}" for n in nodes
                if n.op.startswith("Collective")]

    def called(function):
        for node in function.node_def:
            for value in node.attr.values():
                if value.func.name:
                    yield value.func.name
                yield from (f.name for f in value.list.func)

    inside = {name for name, f in functions.items()
              if any(n.op == "IteratorGetNextAsOptional" for n in f.node_def)}
    assert inside, "no micro-step loop found"
    frontier = list(inside)
    while frontier:
        for name in called(functions[frontier.pop()]):
            if name in functions and name not in inside:
                inside.add(name)
                frontier.append(name)
    outside, in_loop = listed(graph_def.node), []
    for name, function in functions.items():
        (in_loop if name in inside else outside).extend(listed(function.node_def))
    return outside, in_loop


def accumulator_loop(strategy, ds):
    """gaviz.Accumulator in a custom loop: step inside strategy.run, flush after
    each epoch. Returns the weights and the collective ops of the traced step:
    (in the update's branch, elsewhere)."""
    with strategy.scope():
        model = make_model()
        acc = gaviz.Accumulator(keras.optimizers.Adam(0.01), model.trainable_variables, K)
        loss_fn = keras.losses.MeanSquaredError()

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        acc.step(tape.gradient(loss, model.trainable_variables), tf.shape(x)[0])

    @tf.function
    def train_step(batch):
        strategy.run(replica_step, args=batch)

    distributed = strategy.experimental_distribute_dataset(ds)
    for _ in range(2):
        for batch in distributed:
            train_step(batch)
        acc.flush()
    graph_def = train_step.get_concrete_function(
        next(iter(distributed))).graph.as_graph_def()
    return model.get_weights(), branch_collectives(graph_def)


def branch_collectives(graph_def):
    """Float collective ops reachable from a conditional's branches, and elsewhere."""
    functions = {f.signature.name: f for f in graph_def.library.function}

    def calls(nodes):
        for node in nodes:
            for value in node.attr.values():
                if value.func.name:
                    yield value.func.name
                yield from (f.name for f in value.list.func)

    def reachable(names):
        seen, frontier = set(names), list(names)
        while frontier:
            for name in calls(functions[frontier.pop()].node_def):
                if name in functions and name not in seen:
                    seen.add(name)
                    frontier.append(name)
        return seen

    branches = reachable([node.attr[side].func.name
                          for f in [*functions.values()]
                          for node in f.node_def if node.op in ("If", "StatelessIf")
                          for side in ("then_branch", "else_branch")]
                         + [node.attr[side].func.name for node in graph_def.node
                            if node.op in ("If", "StatelessIf")
                            for side in ("then_branch", "else_branch")])

    def floats(nodes):
        return [n.op for n in nodes if n.op.startswith("Collective")
                and "float" in tf.dtypes.as_dtype(n.attr["T"].type).name]

    in_branch = [op for name in branches for op in floats(functions[name].node_def)]
    elsewhere = floats(graph_def.node) + [op for name, f in functions.items()
                                          if name not in branches for op in floats(f.node_def)]
    return in_branch, elsewhere


def main():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(SAMPLES, 1))).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)
    with strategy.scope():
        model = make_model()
        trainer = gaviz.AccumulationTrainer(model, keras.optimizers.Adam(0.01), "mse", K)
    start = model.get_weights()  # the Accumulator's run's too: make_model() is seeded
    history = trainer.fit(ds, epochs=2)
    outside, in_loop = collective_ops(trainer, iter(strategy.experimental_distribute_dataset(ds)))
    accumulator_weights, (in_update, per_micro_step) = accumulator_loop(strategy, ds)
    with open(out, "w") as handle:
        json.dump({
            "start": [w.tolist() for w in start],
            "weights": [w.tolist() for w in model.get_weights()],
            "loss": history.loss,
            "window_samples": history.samples,
            "replicas": trainer.num_replicas,
            "workers": worker_count(strategy),
            "windows_per_call_after_fit": trainer.call_size.size,
            "collectives_outside_loop": outside,
            "collectives_in_loop": in_loop,
            "accumulator_weights": [w.tolist() for w in accumulator_weights],
            "accumulator_collectives_in_update": in_update,
            "accumulator_collectives_per_micro_step": per_micro_step,
        }, handle)


if __name__ == "__main__":
    main()
