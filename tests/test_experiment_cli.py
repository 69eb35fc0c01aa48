import json

import pytest
from typer.testing import CliRunner

from repro.cli.root import app
from repro.errors import ConfigError
from repro.experiment.journal import read as read_journal
from repro.experiment.runner import run
from repro.experiment.saturation import saturation_search
from repro.experiment.spec import RunSpec, load_spec
from repro.journal_schema import FIELD_NAMES

runner = CliRunner()


def test_run_writes_journal_and_manifest_and_resumes(tmp_path):
    spec = RunSpec(workload="chat", rate=20.0, n_requests=200, seed=3)
    res = run(spec, tmp_path)
    j = read_journal(res.journal_path)
    assert list(j.columns) == list(FIELD_NAMES) and len(j) == 200
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["spec"]["seed"] == 3
    assert manifest["summary"]["requests"] == 200
    again = run(spec, tmp_path)
    assert again.skipped and again.summary == res.summary
    # a half-written run (journal present, no manifest) is redone, not trusted
    (res.run_dir / "manifest.json").unlink()
    redo = run(spec, tmp_path)
    assert not redo.skipped and redo.journal_path.read_bytes() == res.journal_path.read_bytes()


def test_same_spec_same_journal_bytes(tmp_path):
    spec = RunSpec(workload="mixed", rate=12.0, n_requests=300, seed=1)
    a = run(spec, tmp_path / "a").journal_path.read_bytes()
    b = run(spec, tmp_path / "b").journal_path.read_bytes()
    assert a == b


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("rate", -1.0, "field 'rate'"),
        ("workload", "poetry", "field 'workload'"),
        ("topology", "2x4", "topology"),
        ("policy", "nope", "unknown policy"),
        ("backend", "tpu", "field 'backend'"),
        ("n_requests", 0, "field 'n_requests'"),
        ("predictor_noise", 11.0, "field 'predictor_noise'"),
    ],
)
def test_bad_spec_fields_are_named(field, value, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec.from_flat(**{field: value})


def test_yaml_spec_and_its_errors(tmp_path):
    good = tmp_path / "s.yaml"
    good.write_text("workload: chat\nrate: 30\nn_requests: 50\npolicy: least_loaded\n")
    spec = load_spec(good, seed=4)
    assert (spec.workload, spec.rate, spec.seed, spec.policy) == ("chat", 30, 4, "least_loaded")
    bad = tmp_path / "b.yaml"
    bad.write_text("workload: [chat\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_spec(bad)
    unknown = tmp_path / "u.yaml"
    unknown.write_text("wrkload: chat\n")
    with pytest.raises(ConfigError, match="unknown field"):
        load_spec(unknown)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--rate", "-1"], "rate"),
        (["--policy", "nope"], "policy"),
        (["--topology", "2x4d"], "topology"),
        (["--workload", "poetry"], "workload"),
        (["-o", "bogus=1"], "bogus"),
        (["--profile", "nope"], "profile"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, field):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    text = result.output.strip()
    assert "Traceback" not in text and field in text


def test_cli_malformed_yaml_exit_2(tmp_path):
    bad = tmp_path / "b.yaml"
    bad.write_text("rate: [1,\n")
    result = runner.invoke(app, ["run", "--spec", str(bad)])
    assert result.exit_code == 2 and "malformed YAML" in result.output


def test_cli_runs_a_small_grid(tmp_path):
    result = runner.invoke(
        app, ["run", "--workload", "chat", "-n", "100", "--rate", "20", "--policy", "round_robin,marginal_cost",
              "--seed", "1,2", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("round_robin") == 2 and result.output.count("marginal_cost") == 2
    assert len(list(tmp_path.glob("*/manifest.json"))) == 4


def test_every_command_has_help():
    commands = ["run", "policies", "data", "proxy", "saturate", "anchor", "loadgen", "gates", "calibrate", "cluster",
                "emulator"]
    for args in [["--help"]] + [[c, "--help"] for c in commands]:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert "usage" in result.output.lower()


def test_saturation_search_brackets_the_collapse_point():
    calls = []

    def probe(spec):  # a synthetic goodput curve with known collapse point
        calls.append(spec.policy)
        return 0.9 if spec.rate <= 10 else max(0.0, 0.9 - 0.03 * (spec.rate - 10))

    res = saturation_search(RunSpec(workload="mixed", n_requests=10), probe=probe, collapse_fraction=0.8, band=0.01)
    assert set(calls) == {"round_robin"}
    assert abs(probe(RunSpec(rate=res.rate)) - 0.72) <= 0.01
    assert 15.5 < res.rate < 16.5


def test_a_search_whose_probes_run_out_lands_in_its_last_bracket_not_on_a_noisy_probe():
    """A live 1p1d search (1p1d-cpu, a 2-core AMD EPYC, commit 8da6c0c): light goodput 0.967 (target 0.805 +- 0.03),
    0.850 at 2 req/s (noise), the collapse between 3.36 (0.853) and 3.67 (0.743) when its 8 probes ran out. The
    probe nearest the target in goodput is the one at 2 req/s, outside the bracket; the search's rate is the
    crossing inside it."""
    measured = {0.25: 29 / 30, 0.5: 1.0, 1.0: 1.0, 2.0: 0.85, 4.0: 0.6375, 2.8284271247461903: 17 / 19,
                3.3635856610148585: 29 / 34, 3.668016172818685: 55 / 74}

    def probe(spec):
        return measured[min(measured, key=lambda r: abs(r - spec.rate))]

    res = saturation_search(RunSpec(workload="mixed", n_requests=10), light_rate=0.25, probe=probe, band=0.03,
                            max_probes=8)
    assert [r for r, _ in res.probes] == list(measured)
    assert not res.converged
    assert 3.36 < res.rate < 3.67
    assert 3.45 < res.rate < 3.55  # log-linear between (3.36, 0.853) and (3.67, 0.743) at 0.805
    # a search that does come within the band still returns that probe's rate
    done = saturation_search(RunSpec(workload="mixed", n_requests=10), light_rate=0.25, probe=probe, band=0.05,
                             max_probes=8)
    assert done.converged and done.rate in measured
