"""Write an identification out: the testbed's hardware profile (with its workload parameters and stated
SLO targets) and the fit report beside it.

The profile (``data/hardware/<name>.json``) is the base profile with each fitted constant replaced by
its best value, whose ``source`` says "identified from" the training rows, with the ensemble's range
and what the numbers say of it (identified / at a bound / loose). Its ``workloads`` section holds the
workload generator's parameters (`repro.workload.params`), its ``slo`` section the stated SLO targets (the
base profile's, which a different prefill constant must not move: the paper states them), and its
``identified`` section the rows, the fitted rates and the fit's figures. The report folder
(``data/identify/<name>/``) holds ``history.csv`` (every visited vector), ``ensemble.csv``,
``parameters.csv``, ``residuals.csv`` and ``fit.json``.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from repro.engine.profile import HardwareProfile, load_profile
from repro.errors import ConfigError
from repro.paths import HARDWARE_DIR, resolve_dir
from repro.routing.cost_model import CostModel
from repro.workload.params import ESTIMATED, SOURCES

if TYPE_CHECKING:
    from repro.identify.fit import Identification, Problem

ENSEMBLE_SIZE = 24
"""Testbeds kept in the ensemble (`repro.identify.fit.Identification.ensemble`)."""


def report_dir(name: str) -> Path:
    return resolve_dir(f"data/identify/{name}")


def _shown(path: Path) -> str:
    """A report folder as a profile names it: relative to the repository when inside it."""
    from repro.paths import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT)) + "/"
    except ValueError:
        return str(path.resolve()) + "/"


def identified_source(ident: Identification, report: str, par: pd.Series) -> str:
    from repro.identify.fit import status_words

    keys = ", ".join(t.key for t in ident.problem.targets)
    cut = par.get("cut", "")
    status = status_words(str(par["status"]), cut if isinstance(cut, str) else "")
    return (f"identified from {len(ident.problem.targets)} measured baseline numbers ({keys}) by repro identify: "
            f"best {par['best']:.4g}, ensemble [{par['ensemble_lo']:.4g}, {par['ensemble_hi']:.4g}] of the prior "
            f"[{par['prior_lo']:.4g}, {par['prior_hi']:.4g}] ({status}); report {report}")


def profile_dict(ident: Identification, name: str, size: int = ENSEMBLE_SIZE, report: str = "",
                 inputs: tuple[str, ...] = (), stated_rates: dict[str, float] | None = None) -> dict[str, Any]:
    """The identified testbed's profile JSON (see the module docstring); ``report``: its report folder;
    ``inputs``: headline keys of numbers the fit was given (a stated operating rate), inputs there too;
    ``stated_rates``: the operating rates the measurements state (req/s, by rate name)."""
    report = report or f"data/identify/{name}/"
    profile = load_profile(ident.problem.profile)
    base, base_raw = profile.physics, profile.raw
    raw = profile.as_dict()
    raw["name"] = name
    raw["description"] = (f"{base_raw.get('description', '')} Constants the paper does not state identified from its "
                          f"baseline numbers (repro identify; {report}).").strip()
    pars = ident.parameters(size).set_index("parameter")
    best = ident.best
    from repro.engine.mechanisms import resolve

    mechs = resolve(ident.problem.mechanisms)
    fixed_p, fixed_w = ident.problem.fixed
    physics = {p.name: float(best[p.name]) for p in ident.problem.space if p.kind == "physics"}
    fitted = base.with_estimates({**fixed_p, **physics})
    for m in mechs:
        for pname in m.fixed_physics:
            raw["params"][pname] = {"value": getattr(fitted, pname), "source": f"mechanism {m.name}: {m.source}"}
    for pname in physics:
        raw["params"][pname] = {"value": getattr(fitted, pname),
                                "source": identified_source(ident, report, pars.loc[pname])}
    if "decode_per_seq_s" in physics:
        raw["params"]["decode_base_s"] = {
            "value": fitted.decode_base_s,
            "source": "paper §VI: measured decode 0.013237 s/token at batch 1, minus the identified per-sequence term "
                      "and the context term of one ~800-token sequence"}
    workloads = profile.workloads
    old = dict(raw.get("workloads") or {})
    section: dict[str, Any] = {}
    for wname in SOURCES:
        if wname in pars.index and pars.loc[wname, "kind"] == "workloads":
            section[wname] = {"value": float(best[wname]), "source": identified_source(ident, report, pars.loc[wname])}
        elif wname in fixed_w:
            section[wname] = {"value": float(fixed_w[wname]), "source": "fixed by the model's mechanisms"}
        else:
            value = getattr(workloads, wname)
            src = old.get(wname, {}).get("source") if value != getattr(ESTIMATED, wname) else SOURCES[wname]
            section[wname] = {"value": value, "source": src or SOURCES[wname]}
    raw["workloads"] = section
    slo = CostModel.from_physics(base).slo
    base_name = ident.problem.profile
    raw["slo"] = {
        "ttft_tight_s": {"value": slo.ttft_tight_s,
                         "source": f"stated (paper §IV-B: 175 ms tight), as the base profile {base_name}'s"},
        "tpot_tight_s": {"value": slo.tpot_tight_s,
                         "source": f"stated (paper §IV-B: 39.7 ms tight), as the base profile {base_name}'s"}}
    raw["identified"] = {
        "base_profile": ident.problem.profile,
        "mechanisms": [m.name for m in mechs],
        "training_keys": [t.key for t in ident.problem.targets],
        "inputs": list(inputs),
        "stated_rates": dict(stated_rates or {}),
        "rates": {p.name: {"value": float(best[p.name]), "ensemble_lo": float(pars.loc[p.name, "ensemble_lo"]),
                           "ensemble_hi": float(pars.loc[p.name, "ensemble_hi"]), "unit": "req/s"}
                  for p in ident.problem.space if p.kind == "rate"},
        "chi2": float(best["chi2"]), "dof": ident.dof, "threshold": ident.threshold,
        "ensemble_size": len(ident.ensemble(size)), "optimizer": ident.optimizer, "report": report,
    }
    return raw


def write(ident: Identification, name: str, *, size: int = ENSEMBLE_SIZE, profile_dir: Path = HARDWARE_DIR,
          out_dir: Path | None = None, extra: dict[str, Any] | None = None,
          inputs: tuple[str, ...] = (), stated_rates: dict[str, float] | None = None) -> dict[str, Path]:
    """Write the profile and the report folder; returns the paths written by what they hold."""
    out = out_dir or report_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    paths = {"profile": Path(profile_dir) / f"{name}.json", "history": out / "history.csv",
             "ensemble": out / "ensemble.csv", "parameters": out / "parameters.csv",
             "residuals": out / "residuals.csv", "fit": out / "fit.json"}
    raw = profile_dict(ident, name, size, report=_shown(out), inputs=inputs, stated_rates=stated_rates)
    HardwareProfile.from_dict(raw, paths["profile"], origin=str(paths["profile"]))  # what we write must load
    paths["profile"].write_text(json.dumps(raw, indent=2) + "\n")
    ident.history.to_csv(paths["history"], index=False)
    ident.ensemble(size).to_csv(paths["ensemble"], index=False)
    ident.parameters(size).to_csv(paths["parameters"], index=False)
    res = ident.residuals(size)
    res.to_csv(paths["residuals"], index=False)
    goodput = res[res["metric"] == "goodput"]
    fit = {"name": name, "base_profile": ident.problem.profile, "parameters": [p.name for p in ident.problem.space],
           "targets": [t.key for t in ident.problem.targets], "chi2": float(ident.best["chi2"]), "dof": ident.dof,
           "birge": ident.birge, "threshold": ident.threshold, "level": ident.level,
           "ensemble_size": len(ident.ensemble(size)), "fit_quality": ident.fit_quality(),
           "goodput_mean_abs_residual": float(goodput["residual"].abs().mean()) if len(goodput) else math.nan,
           "optimizer": ident.optimizer, "model": ident.problem.model, "mechanisms": list(ident.problem.mechanisms),
           **(extra or {})}
    paths["fit"].write_text(json.dumps(fit, indent=2, default=str) + "\n")
    return paths


def load_history(problem: Problem, path: Path) -> Identification:
    """An `Identification` from a written ``history.csv`` (to rewrite its report without refitting); its
    columns must be those of ``problem`` (the same parameters and targets)."""
    from repro.identify.fit import Identification

    hist = pd.read_csv(path)
    need = [p.name for p in problem.space] + [f"sim:{t.key}" for t in problem.targets] + ["chi2"]
    missing = [c for c in need if c not in hist.columns]
    if missing:
        raise ConfigError(f"identify: {path} was written for other parameters or targets (missing {missing[:4]})")
    return Identification(problem, hist)


@functools.lru_cache(maxsize=16)
def fitted_keys(profile: str) -> frozenset[str]:
    """The measured numbers a profile's testbed was identified from, and those it was given (its ``inputs``:
    a stated operating rate); empty for a profile not identified. On that testbed they are inputs, never
    results."""
    return load_profile(profile).identified.fitted_keys


@functools.lru_cache(maxsize=16)
def robustness_table(profile: str) -> pd.DataFrame | None:
    """The identified profile's ``robustness.csv`` (`repro.identify.predictions.robustness`), if written."""
    ident = load_profile(profile).identified
    path = resolve_dir(ident.report) / "robustness.csv" if ident.report else None
    return pd.read_csv(path) if path is not None and path.exists() else None


def robustness_of(profile: str, key: str) -> str:
    """A headline row's robustness across the profile's ensemble of plausible testbeds, in words ("" when
    not predicted). ``key@marginal_cost`` (the paper's reading in notebook 14) reads ``key``'s."""
    table = robustness_table(profile)
    if table is None:
        return ""
    base, _, reading = key.partition("@")
    if reading and reading != "marginal_cost":
        return ""
    hit = table[table["key"] == base]
    if hit.empty:
        return ""
    r = hit.iloc[0]
    words = f"{r['robustness']} ({int(r['holds'])} of {int(r['testbeds'])})"
    models = models_table(profile)
    if models is not None:
        m = models[models["key"] == base]
        if not m.empty:
            words += f"; across models: {m.iloc[0]['verdict']} ({m.iloc[0]['per_model']})"
    return words


@functools.lru_cache(maxsize=16)
def models_table(profile: str) -> pd.DataFrame | None:
    """The model selection's robustness across models (``robustness.csv`` of `repro models`,
    `repro.identify.selection.across_models`) when ``profile`` is the model it chose (its mechanisms are the
    choice's); None otherwise."""
    from repro.engine.mechanisms import model_name, resolve
    from repro.identify.selection import MODELS_DIR

    ident = load_profile(profile).identified
    folder = resolve_dir(MODELS_DIR)
    sel, path = folder / "selection.json", folder / "robustness.csv"
    if not ident or not sel.exists() or not path.exists():
        return None
    chosen = json.loads(sel.read_text()).get("chosen_by_cv")
    if chosen != model_name(resolve(list(ident.mechanisms))):
        return None
    return pd.read_csv(path)


def operating_rates(profile: str) -> dict[str, float]:
    """Workload -> the operating rate (req/s) of an identified testbed: the rates its measurements state
    (the paper: mixed 2p4d at 24.0 req/s) and those the fit identified (chat's, documents'); empty for a
    profile not identified. A workload absent here has no identified rate (the paper's saturation search
    finds it)."""
    return load_profile(profile).identified.operating_rates
