"""Notebook 11 (§V-H, Fig. 9): repro.paper.sections.predictor_noise."""

import pytest

from repro.errors import ConfigError
from repro.paper.sections import predictor_noise as nb


def test_noise_grid_and_headline(section):
    ctx = section(seeds=(1,), n_requests=200)
    items = nb.noise_specs(ctx, 16.0, noise_levels=(0.0, 1.5))
    assert [s.predictor_noise for _, s in items] == [0.0, 1.5, 0.0, 1.5, 0.0]
    assert items[-1][1].policy == "round_robin"
    runs = ctx.run(items)
    tab = nb.noise_table(runs)
    assert set(tab.policy) == {"marginal_cost", "length_threshold", "round_robin"}
    head = {r["key"]: r for r in nb.noise_headline(tab, runs, ctx)}
    lo, hi = head["fig9_goodput_lo"]["ours"], head["fig9_goodput_hi"]["ours"]
    mc = tab[tab.policy == "marginal_cost"]
    assert (lo.value, hi.value) == (mc.mean_goodput.min(), mc.mean_goodput.max())
    assert head["fig9_range_points"]["ours"].value == pytest.approx(100 * (hi.value - lo.value))
    assert head["fig9_max_noise"]["ours"] == pytest.approx(150.0) and head["fig9_max_noise"]["kind"] == "input"
    assert head["fig9_range_points"]["paper"] == pytest.approx(4.2)
    with pytest.raises(ConfigError, match="noise_levels"):
        nb.noise_specs(ctx, 16.0, noise_levels=(-1.0,))


def test_injected_noise_moves_the_predictions_by_its_size():
    # a build_predictions that ignored predictor_noise would give notebook 11 the same runs at every noise level
    import numpy as np

    from repro.experiment.inputs import build_predictions, build_trace
    from repro.experiment.spec import RunSpec

    spec = RunSpec.from_flat(workload="mixed", seed=1, n_requests=400, rate=16.0)
    trace = build_trace(spec)
    clean = build_predictions(spec, trace)
    spread = {}
    for noise in (0.5, 1.5):
        noisy = build_predictions(spec.replace(predictor_noise=noise), trace)
        assert noisy.shape == clean.shape and (noisy > 0).all()
        spread[noise] = float(np.median(np.abs(np.log(noisy / clean))))
    assert 0 < spread[0.5] < spread[1.5]
    assert np.array_equal(build_predictions(spec.replace(predictor_noise=0.0), trace), clean)
