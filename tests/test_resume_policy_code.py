"""A finished run is resumed only when the policy's code is the code that ran it
(`repro.routing.policies.policy_fingerprint`, `repro.experiment.runner.run`)."""

import json

from repro.experiment import runner
from repro.experiment.spec import RunSpec
from repro.routing.policies import policy_fingerprint

SPEC = RunSpec.from_flat(backend="sim", workload="mixed", topology="2p4d", seed=1, rate=8.0, n_requests=60,
                         policy="marginal_cost")


def test_fingerprints_tell_formulas_apart_and_are_stable():
    fp = {name: policy_fingerprint(name) for name in ("marginal_cost", "marginal_cost_batching",
                                                      "marginal_cost_plus", "round_robin")}
    assert len(set(fp.values())) == 4 and all(len(v) == 16 for v in fp.values())
    assert policy_fingerprint("marginal_cost") == fp["marginal_cost"]
    # a subclass's fingerprint covers its base's code: plus changes when the batching scorer does
    assert policy_fingerprint("tests.test_policies:ForwardingMarginalCost") != fp["marginal_cost"]


def test_a_run_by_other_policy_code_is_run_again_and_the_old_one_kept(tmp_path):
    first = runner.run(SPEC, tmp_path)
    manifest = tmp_path / SPEC.run_id / "manifest.json"
    assert json.loads(manifest.read_text())["policy_code"] == runner.code_fingerprint(SPEC)
    assert runner.run(SPEC, tmp_path).skipped  # same code: resumed
    # the same spec finished by another formula under this name (e.g. before marginal_cost was the paper's)
    m = json.loads(manifest.read_text())
    m["policy_code"] = "0123456789abcdef"
    m["summary"]["goodput"] = -1.0  # what the old formula measured
    manifest.write_text(json.dumps(m))
    again = runner.run(SPEC, tmp_path)
    assert not again.skipped and again.summary["goodput"] == first.summary["goodput"]
    kept = tmp_path / f"{SPEC.run_id}.code-0123456789abcdef"
    assert json.loads((kept / "manifest.json").read_text())["summary"]["goodput"] == -1.0
    # a manifest from before fingerprints were kept cannot be trusted either
    m = json.loads(manifest.read_text())
    del m["policy_code"]
    manifest.write_text(json.dumps(m))
    assert not runner.run(SPEC, tmp_path).skipped
    assert (tmp_path / f"{SPEC.run_id}.code-unknown").is_dir()
