import hashlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer

from repro.paper import figures as F


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _figure():
    df = pd.DataFrame({"policy": F.POLICY_ORDER, "goodput": [0.70, 0.75, 0.76, 0.80], "sd": [0.01] * 4})
    paper = pd.DataFrame({"policy": ["marginal_cost"], "paper": [0.864]})
    return F.bar_with_paper(df, "policy", "goodput", paper=paper, err="sd", title="Table II (test)",
                            ylabel="goodput (fraction)")


def test_save_writes_png_and_pdf_byte_identical(tmp_path):
    fig, ax = _figure()
    a = F.save(fig, "t", tmp_path / "a")
    fig, ax = _figure()
    b = F.save(fig, "t", tmp_path / "b")
    assert [p.suffix for p in a] == [".png", ".pdf"]
    assert [_digest(p) for p in a] == [_digest(p) for p in b]
    pdf = a[1].read_bytes()
    assert b"CreationDate" not in pdf and b"ModDate" not in pdf


def test_bar_with_paper_marks_paper_value():
    fig, ax = _figure()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "paper" in labels
    assert ax.get_title() == "Table II (test)"


def test_write_results_deterministic(tmp_path):
    df = pd.DataFrame({"a": [1.0 / 3, float("nan")], "b": ["x", "y"]})
    p = F.write_results(df, "r", tmp_path)
    assert p.read_text() == "a,b\n0.333333,x\n,y\n"


# ---- one look for every figure (issue "figures a reviewer accepts") ------------------------------------------------
def _bars(ax):
    """The bars of an axes, left to right: (x centre, RGBA face colour)."""
    return sorted(((p.get_x() + p.get_width() / 2, p.get_facecolor()) for p in ax.patches), key=lambda b: b[0])


def _rgba(c):
    return tuple(round(v, 6) for v in to_rgba(c))


def test_policy_colour_is_the_same_in_any_order_and_plot():
    df = pd.DataFrame({"policy": F.POLICY_ORDER, "goodput": [0.70, 0.75, 0.76, 0.80]})
    for order in (F.POLICY_ORDER, F.POLICY_ORDER[::-1], ["marginal_cost", "round_robin"]):
        fig, ax = F.bar_with_paper(df, "policy", "goodput", order=order)  # bars along x: coloured by their policy
        assert [_rgba(c) for _, c in _bars(ax)] == [_rgba(F.policy_color(p)) for p in order], order
        plt.close(fig)
    grid = pd.DataFrame([{"width": w, "policy": p, "goodput": 0.5} for w in (3, 4) for p in F.POLICY_ORDER])
    for hue_order in (F.POLICY_ORDER, F.POLICY_ORDER[::-1]):
        fig, ax = F.bar_with_paper(grid, "width", "goodput", hue="policy", hue_order=hue_order)  # bars by hue
        expected = [_rgba(F.policy_color(p)) for _ in (3, 4) for p in hue_order]
        assert [_rgba(c) for _, c in _bars(ax)] == expected, hue_order
        plt.close(fig)
    assert F.policy_color("marginal_cost") == F.POLICY_COLORS["marginal_cost"]
    assert len(set(F.POLICY_COLORS.values())) == len(F.POLICY_COLORS)  # no two policies share a colour
    # a name the map does not know: a fixed colour of the fallback palette, the same every time
    assert F.policy_color("pkg.mod:MyRouter") == F.policy_color("pkg.mod:MyRouter") in F.FALLBACK_COLORS


def _error_bars(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _legend_texts(ax):
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


def test_error_bars_need_two_traces():
    tab = pd.DataFrame({"policy": F.POLICY_ORDER, "goodput": [0.70, 0.75, 0.76, 0.80], "sd": [0.0] * 4})
    one, label = F.with_interval(tab, "goodput", "sd", n_traces=1)  # one trace, no per-request data: no bar
    fig, ax = F.bar_with_paper(one, "policy", "goodput", err=("lo", "hi"), err_label=label)
    assert not _error_bars(ax)
    assert "sd" not in label and not any("sd" in t for t in _legend_texts(ax))
    plt.close(fig)
    two, label = F.with_interval(tab.assign(sd=0.02), "goodput", "sd", n_traces=2)
    fig, ax = F.bar_with_paper(two, "policy", "goodput", err=("lo", "hi"), err_label=label)
    assert len(_error_bars(ax)) == 1 and "±1 sd over 2 traces" in _legend_texts(ax)
    plt.close(fig)


def test_one_trace_shows_the_interval_over_its_requests():
    tab = pd.DataFrame({"policy": F.POLICY_ORDER, "goodput": [0.70, 0.75, 0.76, 0.80], "sd": [0.0] * 4})
    one, label = F.with_interval(tab, "goodput", "sd", n_traces=1, n_requests=2000)
    assert label == F.CI_LABEL and "1 trace" in label and "sd" not in label
    half = 1.96 * np.sqrt(0.8 * 0.2 / 2000)  # the normal approximation of the same interval
    row = one.iloc[-1]
    assert row.lo < 0.8 < row.hi and abs((row.hi - row.lo) / 2 - half) < 0.003
    assert F.request_interval(0.8, 2000) == F.request_interval(0.8, 2000)  # deterministic (seeded)
    fig, ax = F.bar_with_paper(one, "policy", "goodput", err=("lo", "hi"), err_label=label)
    assert len(_error_bars(ax)) == 1 and F.CI_LABEL in _legend_texts(ax)
    plt.close(fig)


def test_legend_is_outside_the_axes():
    df = pd.DataFrame({"policy": F.POLICY_ORDER, "goodput": [0.70, 0.75, 0.76, 0.98], "sd": [0.01] * 4})
    paper = pd.DataFrame({"policy": ["marginal_cost"], "paper": [0.864]})
    for where in ("right", "below"):
        fig, ax = F.bar_with_paper(df, "policy", "goodput", paper=paper, err="sd", err_label="±1 sd over 3 traces",
                                   legend=None, xlabel="policy")
        fig.tight_layout()
        leg = F.legend_outside(ax, where)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        lb, ab = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert lb.x0 >= ab.x1 or lb.y1 <= ab.y0, (where, lb, ab)  # entirely right of or below the data
        if where == "below":  # and under the tick labels and the x label
            labels = [t.get_window_extent(renderer) for t in ax.get_xticklabels()] + \
                [ax.xaxis.label.get_window_extent(renderer)]
            assert lb.y1 <= min(b.y0 for b in labels)
        plt.close(fig)
    fig, ax = F.bar_with_paper(df, "policy", "goodput", paper=paper, err="sd")  # the default: right of the axes
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    plt.close(fig)


def test_lines_join_only_neighbouring_measured_points():
    assert F.contiguous_groups([3, 4, 5, 6]) == [0, 0, 0, 0]
    assert F.contiguous_groups([3, 6]) == [0, 1]  # 4 and 5 GPUs were not measured
    assert F.contiguous_groups([3, 4, 6, 6, 7]) == [0, 0, 1, 1, 1]
    fig, ax = plt.subplots()
    F.policy_line(ax, [3, 6], [0.2, 0.8], "marginal_cost", groups=F.contiguous_groups([3, 6]))
    drawn = [ln for ln in ax.lines if ln.get_linestyle() not in ("None", "none", "") and len(ln.get_xdata()) > 1]
    assert not drawn  # markers only: no line from 3 to 6 GPUs
    F.policy_line(ax, [3, 4], [0.2, 0.3], "round_robin", groups=F.contiguous_groups([3, 4]))
    drawn = [ln for ln in ax.lines if ln.get_linestyle() not in ("None", "none", "") and len(ln.get_xdata()) > 1]
    assert len(drawn) == 1 and list(drawn[0].get_xdata()) == [3, 4]
    plt.close(fig)


def test_save_shows_the_figure_in_a_kernel_only(tmp_path, monkeypatch):
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    fig, _ = _figure()
    paths = F.save(fig, "plain", tmp_path)  # plain Python (no kernel): nothing shown
    assert shown == [] and [p.name for p in paths] == ["plain.png", "plain.pdf"]
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    fig, _ = _figure()
    paths = F.save(fig, "kernel", tmp_path)
    assert len(shown) == 1 and shown[0].data == paths[0].read_bytes()  # the saved PNG, inline
    assert hasattr(paths, "_ipython_display_")  # the cell does not also echo the paths
    assert not plt.fignum_exists(fig.number)


def test_missing_numbers_read_n_a():
    assert F.num(float("nan")) == "n/a" and F.num(None) == "n/a"
    assert F.num(0.81234) == "0.812" and F.num(7.0, "g") == "7"
