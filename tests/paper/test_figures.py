import hashlib

import pandas as pd

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


def test_write_headline_fills_paper_values(tmp_path):
    p = F.write_headline([{"key": "table2_mc_mean", "ours": 0.8}, {"key": "ours_only", "ours": 1.0, "unit": "x"}],
                         "04_test", tmp_path, measured="emulated, 4 live runs, all valid, K=2")
    df = pd.read_csv(p)
    assert p.name == "04_headline.csv"
    assert list(df.columns) == ["notebook", "key", "ours", "paper", "unit", "meaning", "measured"]
    assert (df.measured == "emulated, 4 live runs, all valid, K=2").all()  # validity beside every number
    assert df.loc[0, "paper"] == 0.864 and df.loc[0, "unit"] == "fraction"
    assert "goodput" in df.loc[0, "meaning"]  # the reference's quantity, so summary.csv says what each number is
    assert pd.isna(df.loc[1, "paper"]) and pd.isna(df.loc[1, "meaning"])
