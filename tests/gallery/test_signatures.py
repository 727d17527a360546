"""diagnose's judges, each on observations made by hand: no training.

A subject's observation is the exact one with each weight's move scaled by the
contribution a defect predicts (``gaviz.gallery.signatures.SIGNATURES``), so each test
states the numbers it feeds and the name and number the judge must read.
"""

import numpy as np
import pytest

import gaviz
from gaviz.gallery import probes, signatures
from gaviz.gallery.pitfalls import OptimizerRefused
from gaviz.gallery.probes import Observation
from gaviz.gallery.signatures import SIGNATURES, Context, Outcome, Stop

K = 4
W = probes.WINDOWS
PROBES = {probe.name: probe for probe in probes.make_probes(K)}
M = len(PROBES["tail"].sizes) - K  # micro-batches in the partial window (2)


def exact_run(probe):
    """The exact trainer's observation: weight i moves -0.01 x (1 + i % 3) per epoch."""
    width = len(probe.initial) + (probes.PENALIZED_WEIGHTS if probe.penalized else 0)
    start = np.concatenate([probe.initial, np.ones(width - len(probe.initial))])
    move = np.zeros(width)
    used = len(probe.sizes)
    move[:used] = -0.01 * (1 + np.arange(used) % 3)
    move[len(probe.initial):] = -0.02  # the penalized kernel, when there is one
    moves = [move * (epoch + 1) for epoch in range(probe.epochs)]
    average = None
    if probe.ema_momentum is not None:  # the exact average after 3 updates, per window
        shares = np.repeat(exact_average_shares(probe.ema_momentum), K)
        average = start + np.concatenate([shares, np.zeros(width - used)]) * moves[-1]
    steps = W if probe.name in ("windows", "ema") else 1
    return Observation(start, [start + m for m in moves], steps, None, average), moves


def exact_average_shares(m):
    """How far the exact average of the weights of windows 1, 2, 3 moved after the 3
    updates, as a share of their weights' move: the average copies the weights at
    update 1 (momentum 0), then moves once per update, by 1 - m."""
    return np.array([1.0, 1 - m ** 2, 1 - m])


def run(name, contributions, second=None, penalty=1.0, steps=None, error=None, average=None):
    """``(probe, subject, exact)``: the subject moves weight i ``contributions[i]``
    times as far as the exact trainer, in epoch 1 (``second`` in epoch 2) and its
    penalized weights ``penalty`` times as far; its moving average (``ema``
    probe) ends ``average[i]`` times as far as the exact one's (the move of its
    weights, ``contributions``, when not given)."""
    probe = PROBES[name]
    exact, moves = exact_run(probe)
    used = len(probe.sizes)
    after = []
    for epoch, move in enumerate(moves):
        scale = np.ones(len(move))
        scale[:used] = contributions if epoch == 0 or second is None else second
        scale[len(probe.initial):] = penalty
        after.append(exact.start + scale * move)
    steps = exact.optimizer_steps if steps is None else steps
    subject_average = None
    if exact.average is not None and average != "none":
        scale = np.ones(len(exact.start))
        scale[:used] = contributions if average is None else average
        subject_average = exact.start + scale * (exact.average - exact.start)
    return probe, Observation(exact.start, after, steps, error, subject_average), exact


def read(name, contributions, context=Context(), **kwargs):
    return signatures.read(*run(name, contributions, **kwargs), K, context)


def only_finding(outcome):
    (finding,) = outcome.findings
    assert not outcome.unexplained and not outcome.unused
    return finding


# ------------------------------------------------------------------ the table


def test_the_table_has_a_row_for_every_pitfall_and_a_judge_for_its_probe():
    assert set(SIGNATURES) == {p.name for p in gaviz.gallery.pitfalls.GALLERY if p.probe}
    assert all(name == row.name for name, row in SIGNATURES.items())
    assert {row.probe for row in SIGNATURES.values()} == set(signatures.READINGS)
    assert [probe.name for probe in probes.make_probes(K)] == list(signatures.READINGS)


# ------------------------------------------------------------------ windows


def test_exact_windows_read_exact():
    outcome, context = read("windows", 1.0)
    assert outcome.verdict == "exact" and not outcome.findings
    assert outcome.measured == "windows 1.00, 1.00, 1.00x exact; optimizer steps per window: 1.00"
    assert context == Context()


def test_every_window_k_times_as_far_is_missing_normalization():
    outcome, context = read("windows", float(K))
    finding = only_finding(outcome)
    assert (finding.name, finding.probe) == ("missing_normalization", "windows")
    assert finding.value == pytest.approx(K)
    assert context.missing_normalization and context.window_scale == pytest.approx(K)


def test_windows_counted_3_2_1_times_are_a_missing_reset():
    profile = np.repeat(np.arange(W, 0, -1.0), K)  # window 1 re-applied by every update
    outcome, context = read("windows", profile)
    finding = only_finding(outcome)
    assert (finding.name, finding.value) == ("missing_reset", pytest.approx(W))
    assert not context.each_window_once  # the moving average of such weights is not judged


def test_k_plus_1_steps_per_window_are_an_update_every_micro_step():
    outcome, context = read("windows", K + 1.0, steps=W * (K + 1))
    finding = only_finding(outcome)
    assert (finding.name, finding.value) == ("update_every_micro_step", pytest.approx(K + 1))
    # Later probes take the k micro-batch steps off each window's move.
    assert context.micro_part == K and context.window_scale == pytest.approx(1)


def test_uncounted_steps_are_read_from_a_move_k_plus_1_times_as_far():
    outcome, context = read("windows", K + 1.0, steps=0)
    finding = only_finding(outcome)
    assert (finding.name, finding.value) == ("update_every_micro_step", pytest.approx(K + 1))
    assert "not counted" in outcome.measured
    assert context == Context(micro_part=K, window_scale=1.0)


def test_wiped_weights_stop_the_diagnosis():
    probe, subject, exact = run("windows", 1.0)
    wiped = subject._replace(after_epoch=[np.zeros_like(subject.start)])
    outcome, context = signatures.read(probe, wiped, exact, K, Context())
    finding = only_finding(outcome)
    assert (finding.name, finding.value) == ("zeroed_weights", pytest.approx(0.0))
    assert context.stop is Stop.WIPED


def test_unmoved_weights_stop_the_diagnosis_without_a_finding():
    outcome, context = read("windows", 0.0, steps=0)
    assert not outcome.findings and outcome.verdict == "unchanged"
    assert context.stop is Stop.UNCHANGED


def test_micro_batches_of_one_window_counting_differently_match_no_signature():
    outcome, _ = read("windows", np.tile([1.0, 2.0, 1.0, 1.0], W))
    assert not outcome.findings and outcome.verdict == "unexplained"
    assert outcome.unexplained[0].startswith(
        "windows probe: micro-batches of one window count differently")


def test_a_run_that_stopped_is_unexplained_whatever_its_probe():
    outcome, context = read("tail", 1.0, error="refused a non-finite update")
    assert outcome.unexplained == ["tail probe: the run stopped: refused a non-finite update"]
    assert context == Context()


# ------------------------------------------------------------------- ragged

SIZES = np.array(PROBES["ragged"].sizes, float)  # 6, 2, 6, 2
MEAN_OF_MEANS = (SIZES.sum() / K) / SIZES  # each micro-batch weighs 1/k: (N/k)/n_i


def test_ragged_micro_batches_counted_by_size_read_exact():
    outcome, context = read("ragged", 1.0)
    assert outcome.verdict == "exact" and outcome.measured.startswith(
        "a sample in a micro-batch of 2 counts 1.00x one in a micro-batch of 6")
    assert context == Context()


def test_micro_batches_weighing_the_same_are_a_mean_of_means():
    finding = only_finding(read("ragged", MEAN_OF_MEANS)[0])
    assert (finding.name, finding.probe) == ("mean_of_means", "ragged")
    assert finding.value == pytest.approx(3.0)  # a sample of a micro-batch of 2 counts 6/2x


def test_a_mean_of_means_without_normalization_is_that_normalization():
    context = Context(window_scale=K, missing_normalization=True)
    outcome, _ = read("ragged", K * MEAN_OF_MEANS, context, penalty=K)
    assert [f.name for f in outcome.findings] == ["regularizer_every_micro_step"]
    assert outcome.note == "as missing_normalization"


def test_a_micro_batch_step_is_taken_off_before_sizes_are_judged():
    # Each micro-batch's own step moves its weight N/n_i exact shares (k (N/k)/n_i).
    context = Context(micro_part=K, window_scale=1.0)
    assert read("ragged", 1 + K * MEAN_OF_MEANS, context)[0].verdict == "exact"


def test_a_penalty_k_times_as_far_is_added_per_micro_batch():
    finding = only_finding(read("ragged", 1.0, penalty=K)[0])
    assert (finding.name, finding.value) == ("regularizer_every_micro_step", pytest.approx(K))


def test_an_unmoved_penalty_is_noted_as_unused():
    outcome, _ = read("ragged", 1.0, penalty=0.0)
    assert not outcome.findings and not outcome.unexplained
    assert outcome.unused == ["the model's regularization losses (model.losses)"]
    assert outcome.verdict == "penalty not used"


def test_sizes_are_not_judged_when_windows_are_not_applied():
    outcome, _ = read("ragged", 0.0, Context(window_scale=0.0))
    assert outcome.note == "size dependence not judged"


# --------------------------------------------------------------------- tail


def test_a_partial_window_applied_in_full_reads_exact():
    assert read("tail", 1.0)[0].verdict == "exact"


def test_a_partial_window_divided_as_if_full_is_under_scaled():
    contributions = [1.0] * K + [M / K] * M
    finding = only_finding(read("tail", contributions)[0])
    assert (finding.name, finding.value) == ("under_scaled_tail", pytest.approx(M / K))


def test_a_partial_window_never_applied_is_dropped():
    contributions = [1.0] * K + [0.0] * M
    finding = only_finding(read("tail", contributions)[0])
    assert (finding.name, finding.value) == ("dropped_tail", pytest.approx(0.0))


def test_a_partial_window_applied_in_the_next_epoch_is_carried():
    first, second = [1.0] * K + [0.0] * M, [1.0] * K + [0.5] * M
    finding = only_finding(read("tail", first, second=second)[0])
    assert (finding.name, finding.value) == ("carried_tail", pytest.approx(0.5))


def test_an_under_scaled_tail_without_normalization_is_that_normalization():
    context = Context(window_scale=K, missing_normalization=True)
    outcome, _ = read("tail", [K] * K + [M] * M, context)  # k x (m/k): a constant divisor
    assert not outcome.findings and outcome.verdict == "as missing_normalization"


# ----------------------------------------------------------------- clipping


def test_a_window_clipped_once_reads_exact():
    assert read("clipping", 1.0)[0].verdict == "exact"


def test_an_update_1_over_sqrt_k_as_long_is_clipping_per_micro_batch():
    finding = only_finding(read("clipping", 1 / np.sqrt(K))[0])
    assert (finding.name, finding.value) == ("per_micro_batch_clipping", pytest.approx(0.5))


def test_an_update_longer_than_the_clip_allows_ignores_clipping():
    outcome, _ = read("clipping", 1.5)
    assert outcome.unused == ["the optimizer's clipping (global_clipnorm)"]
    assert outcome.verdict == "clipping not used"


def test_clipping_is_not_judged_for_a_subject_stepping_every_micro_batch():
    outcome, _ = read("clipping", 1 / np.sqrt(K), Context(micro_part=K))
    assert not outcome.findings and outcome.note.startswith("not judged")


# ---------------------------------------------------------------------- ema

EMA = PROBES["ema"].ema_momentum  # 0.8


def per_micro_step_shares(m, k):
    """Each window's average, as a share of the exact one's, when the average moves on
    every micro-step: windows 1 and 3 as exact; window 2's weight, which moved by d
    in update 2, ends m^(k + 1) d ahead of its average, not m^2 d."""
    return np.repeat([1.0, (1 - m ** (k + 1)) / (1 - m ** 2), 1.0], k)


def test_an_average_moving_once_per_update_reads_exact():
    outcome, context = read("ema", 1.0)
    assert outcome.verdict == "exact" and not outcome.findings
    assert outcome.measured == "average of windows 1-3 1.00, 1.00, 1.00x exact: 1.00 moves per update"
    assert context == Context()


def test_an_average_moving_on_every_micro_step_is_keras_builtin_ema():
    shares = per_micro_step_shares(EMA, K)
    assert shares[K] == pytest.approx((1 - 0.8 ** 5) / 0.36)  # 1.8676: window 2
    finding = only_finding(read("ema", shares)[0])
    assert (finding.name, finding.probe) == ("ema_per_micro_step", "ema")
    assert finding.value == pytest.approx(K)  # moves per update
    assert finding.measured == ("the moving average (use_ema) moves 4.00 times per update: "
                                "each update keeps 0.41 of it, not 0.8")


def test_an_average_of_weights_moving_k_times_as_far_is_read_per_window_scale():
    context = Context(window_scale=K, missing_normalization=True)
    assert read("ema", K * 1.0, context)[0].verdict == "exact"
    finding = only_finding(read("ema", K * per_micro_step_shares(EMA, K), context)[0])
    assert finding.value == pytest.approx(K)


@pytest.mark.parametrize("k", [2, 3, 8])
def test_the_moves_per_update_are_read_for_any_k(k):
    ema = probes.make_probes(k)[-1]
    exact = np.full(probes.WINDOWS * k, 1.0)
    start = np.zeros(len(ema.initial))
    shares = per_micro_step_shares(EMA, k)
    exact_average = np.concatenate([exact * np.repeat(exact_average_shares(EMA), k),
                                    np.zeros(len(start) - len(exact))])
    subject_average = np.concatenate([shares * exact_average[: len(shares)],
                                      np.zeros(len(start) - len(shares))])
    observation = Observation(start, [start], W, None)
    outcome, _ = signatures.read(ema, observation._replace(average=subject_average),
                                 observation._replace(average=exact_average), k, Context())
    assert only_finding(outcome).value == pytest.approx(k)


def test_an_average_no_optimizer_kept_is_noted_as_unused():
    outcome, _ = read("ema", 1.0, average="none")
    assert not outcome.findings and not outcome.unexplained
    assert outcome.unused == ["the optimizer's moving average (use_ema)"]
    assert outcome.verdict == "moving average not used"


@pytest.mark.parametrize("context", [Context(micro_part=K), Context(each_window_once=False)])
def test_the_average_is_not_judged_when_windows_moved_the_weights_more_than_once(context):
    outcome, _ = read("ema", per_micro_step_shares(EMA, K), context)
    assert not outcome.findings and not outcome.unexplained
    assert outcome.note.startswith("not judged")


def test_an_average_off_in_another_way_matches_no_signature():
    outcome, _ = read("ema", np.repeat([1.0, 1.2, 1.0], K))  # 1.2: no whole number of moves
    assert not outcome.findings and outcome.verdict == "unexplained"
    assert outcome.unexplained == ["ema probe: the moving average of windows 1-3 moved 1.00, "
                                   "1.20, 1.00 times as far as the exact one"]


# ------------------------------------------------------------- the whole judge


def observe_all(contributions, **kwargs):
    """``runs`` and ``observe`` for judge: the subject reads ``contributions`` on every probe."""
    runs, observed = [], {}
    for name in PROBES:
        probe, subject, exact = run(name, contributions, **kwargs)
        runs.append((probe, exact))
        observed[name] = subject

    def observe(probe):
        observe.calls.append(probe.name)
        return observed[probe.name]

    observe.calls = []
    return runs, observe


def test_an_exact_subject_is_observed_and_judged_on_every_probe():
    runs, observe = observe_all(1.0)
    judgement = signatures.judge(runs, observe, K)
    assert observe.calls == list(PROBES)
    assert [v.verdict for v in judgement.verdicts] == ["exact"] * 5
    assert all(v.not_run is None for v in judgement.verdicts)
    assert judgement.changes_weights and judgement.findings == []
    assert [v.labels[:2] for v in judgement.verdicts] == [
        ["w1.1", "w1.2"], ["n=6", "n=2"], ["full 1", "full 2"], ["1", "2"], ["w1.1", "w1.2"]]
    assert judgement.verdicts[1].labels[-2:] == ["L2", "L2"]


def test_after_a_stop_the_later_probes_are_not_run():
    runs, observe = observe_all(0.0, steps=0)
    judgement = signatures.judge(runs, observe, K)
    assert observe.calls == ["windows"]
    assert not judgement.changes_weights
    assert [v.not_run for v in judgement.verdicts] == [None] + [Stop.UNCHANGED] * 4
    assert [v.verdict for v in judgement.verdicts[1:]] == [
        "not run: the subject does not change the weights"] * 4


def test_a_probe_whose_optimizer_the_subject_refuses_is_not_run():
    runs, observe = observe_all(1.0)
    refusal = OptimizerRefused("`optimizer` must keep a moving average", "EmaPerMicroStep",
                               "use_ema=True")

    def refusing(probe):
        if probe.name != "ema":
            raise refusal
        return observe(probe)

    judgement = signatures.judge(runs, refusing, K)
    assert [v.not_run for v in judgement.verdicts] == [Stop.REFUSED] * 4 + [None]
    assert judgement.verdicts[0].verdict == "not run: the subject needs use_ema=True"
    assert judgement.verdicts[0].measured == "`optimizer` must keep a moving average"
    assert judgement.verdicts[-1].verdict == "exact" and judgement.changes_weights


def test_a_probes_verdict_names_its_findings_then_unexplained():
    finding = signatures.Finding("missing_reset", "windows", 3.0, "")
    merged = Outcome.merged("m", Outcome(findings=[finding], note="a"),
                            Outcome(unexplained=["x"], note="b"))
    assert merged == Outcome("m", [finding], ["x"], [], "a; b")
    assert merged.verdict == "missing_reset, unexplained"
    assert Outcome(note="a").verdict == "a" and Outcome().verdict == "exact"
