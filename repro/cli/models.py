"""`repro models`: choose the testbed's mechanisms by the paper's baseline numbers alone (`repro.identify.selection`),
and search each model for the widest documents gap between the baselines it allows (`repro.identify.separation`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console

from repro.engine.mechanisms import CATALOGUE as MECHANISMS
from repro.errors import ConfigError

DEFAULT_MODELS = ("base", "request_path+path_tail", "vllm_budget+request_path+path_tail+shared_link+document_tail",
                  "vllm_budget+request_path+shared_link+api_queue+vllm_scheduler+resume_cache+first_token_path"
                  "+attention_context+document_tail",
                  "vllm_budget+request_path+path_tail+shared_link+api_queue+vllm_scheduler+resume_cache"
                  "+first_token_path+attention_context+document_tail")
"""The models `repro models` fits by default (those shipped in data/identify/models): the base model, the
serving path that Fig. 5's and the chat numbers bear on, the serving path with a budget, shared links and the
documents' tail, the engine as vLLM's source runs it (its serving path a queue, not a random tail), and the whole
catalogue."""
OUT = "data/identify/models"
TARGETS = "data/identify/paper_baselines.csv"
PREDICTIONS = "data/identify/paper_predictions.csv"


def models_cli(
    models: str = typer.Option(",".join(DEFAULT_MODELS), "--models",
                               help="comma-separated models, each its mechanisms joined by '+' ('base': none; "
                                    f"mechanisms: {', '.join(m.name for m in MECHANISMS)})"),
    targets: Path = typer.Option(Path(TARGETS), "--targets", help="the baseline numbers (repro.identify.targets)"),
    profile: str = typer.Option("a40-qwen2.5-3b", "--profile", help="the base hardware profile"),
    popsize: int = typer.Option(3, "--popsize", min=2, max=50, help="differential evolution: vectors per parameter"),
    generations: int = typer.Option(6, "--generations", min=0, max=500, help="generations after the initial one"),
    seed: int = typer.Option(0, "--seed", min=0, help="the searches' seed (the same for every model)"),
    gap_search: bool = typer.Option(True, "--gap-search/--no-gap-search",
                                    help="also search each model for the widest documents gap it allows"),
    out_dir: Path = typer.Option(Path(OUT), "--out-dir", help="one folder per model, and models.csv"),
    predictions: Path = typer.Option(Path(PREDICTIONS), "--predictions",
                                     help="the paper's numbers about its router, predicted on every testbed of "
                                          "every model's ensemble (model uncertainty: robustness.csv); '' for none"),
    refresh_predictions: bool = typer.Option(False, "--refresh-predictions/--keep-predictions",
                                             help="simulate the predictions again even where a model's folder "
                                                  "holds them (predictions.csv)"),
    aimed_evals: int = typer.Option(0, "--aimed-evals", min=0, max=100000,
                                    help="also run the search aimed at the documents gap (every vector at the rate "
                                         "where round-robin holds 0.585) on each model until it has this many "
                                         "feasible vectors; journaled, it resumes (0: none)"),
    aimed_generations: int = typer.Option(60, "--aimed-generations", min=1, max=1000,
                                          help="the aimed search's cap on generations (a model with few feasible "
                                               "vectors per generation may need more to reach --aimed-evals)"),
    aimed_models: str = typer.Option("", "--aimed-models",
                                     help="comma-separated models (of --models) the aimed search runs on (default: "
                                          "every one)"),
    report_only: bool = typer.Option(False, "--report-only",
                                     help="search nothing: score the models' folders as their searches left them "
                                          "(each with its own budget, in its fit.json) and write the table"),
    edges: bool = typer.Option(False, "--edges/--no-edges",
                               help="also write edges.csv in the folder of the model with the widest gap: how that "
                                    "gap moves as each parameter moves from its prior's edge toward the middle"),
    executor: str = typer.Option("", "--executor", help="local | serial | ray (default $REPRO_EXECUTOR or local)"),
    jobs: int = typer.Option(0, "--jobs", min=0, help="worker processes (0: one per core)"),
    ray_address: str = typer.Option("", "--ray-address", help="a Ray cluster's address (implies --executor ray)"),
) -> None:
    """Fit each model of the mechanism catalogue to the same baseline-only table with the same search budget,
    score the fits (chi-square per degree of freedom, AIC, BIC, leave-one-figure-out prediction error, the
    documents gap between baselines) and write models.csv, best by cross-validation first. Every search is
    journaled: an interrupted run, rerun with the same options, resumes."""
    from repro.engine.mechanisms import resolve
    from repro.experiment.executor import make_executor, settings_from_env
    from repro.identify import selection, separation, testbed
    from repro.identify.fit import Problem, identify
    from repro.identify.space import PAPER_SPACE, mechanism_space
    from repro.identify.targets import load_targets
    from repro.paths import user_path

    rows = tuple(load_targets(user_path(targets, default=TARGETS)))
    specs = [m.strip() for m in models.split(",") if m.strip()]
    if not specs:
        raise ConfigError("models: --models names no model")
    aimed_on = [m.strip() for m in aimed_models.split(",") if m.strip()] or specs
    if set(aimed_on) - set(specs):
        raise ConfigError(f"models: --aimed-models names {sorted(set(aimed_on) - set(specs))}, not in --models")
    out = user_path(out_dir, default=OUT)
    console = Console()
    kind, env_jobs, address = settings_from_env()
    ex = make_executor("ray" if ray_address else (executor or kind), jobs or env_jobs, ray_address or address)
    scores, gaps = [], []
    base_best = None  # the base model's best fit: the start of every richer model's search (nested models)
    base_hist = out / "base" / "history.csv"
    if base_hist.exists():  # a base model fitted by an earlier run
        import pandas as pd

        h = pd.read_csv(base_hist)
        base_best = h.loc[h["chi2"].idxmin()]
    try:
        for spec in specs:
            mechs = resolve([] if spec == "base" else spec.split("+"))
            space = (*PAPER_SPACE, *mechanism_space(mechs))
            problem = Problem(profile, rows, space, stated={"rate_mixed": 24.0},
                              mechanisms=tuple(m.name for m in mechs))
            folder = out / problem.model
            if report_only:
                sc, summ = _from_folder(folder, rows, len(space), problem.model)
                scores.append(sc)
                if aimed_evals and spec in aimed_on:
                    summ = _aimed(folder, mechs, profile, ex, aimed_evals, console, aimed_generations)
                if summ is not None:
                    gaps.append(summ)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            console.print(f"model {problem.model}: {len(space)} parameters, {len(rows)} numbers")
            x0 = _nested_start(space, base_best) if base_best is not None and mechs else None
            ident = identify(problem, executor=ex, popsize=popsize, generations=generations, seed=seed,
                             journal=folder / f"search-{problem.fingerprint()}.jsonl", x0=x0)
            if not mechs:
                base_best = ident.best
            wall = time.monotonic() - t0
            testbed.write(ident, problem.model.replace("+", "-"), profile_dir=folder, out_dir=folder,
                          extra={"fit_wall_s": wall, "executor": ex.describe()},
                          inputs=("saturation_rate_mixed",), stated_rates={"rate_mixed": 24.0})
            sc = selection.score(problem.model, ident.history, rows, len(space))
            sc["fit_wall_s"] = round(wall)
            sc["popsize"] = popsize
            scores.append(sc)
            selection.leave_one_figure_out(ident.history, rows).to_csv(folder / "lofo.csv", index=False)
            console.print(f"  chi2/dof {sc['chi2_per_dof']:.2f}, held-out chi2 {sc['cv_chi2']:.1f}, documents gap "
                          f"{sc['docs_gap']:+.3f} ({wall:.0f} s)")
            if gap_search:
                g0 = time.monotonic()
                gp = separation.GapProblem(mechs, profile)
                hist = separation.search(gp, executor=ex, journal=folder / "gap-search.jsonl")
                import pandas as pd

                known = separation.confirm_known(gp)  # the widest vectors found outside this search
                hist = pd.concat([hist.assign(origin="search"), known], ignore_index=True) if len(known) else hist
                hist.to_csv(folder / "gap_search.csv", index=False)
                summ = separation.summary(hist)
                summ["wall_s"] = round(time.monotonic() - g0)
                (folder / "gap_summary.json").write_text(json.dumps(summ, indent=2, default=str) + "\n")
                if aimed_evals and spec in aimed_on:
                    summ = _aimed(folder, mechs, profile, ex, aimed_evals, console, aimed_generations)
                gaps.append(summ)
                console.print(f"  widest documents gap with round-robin at 0.585 +- 0.03: {summ['widest_gap']:+.3f} "
                              f"({summ['feasible']} of {summ['vectors']} vectors feasible)")
        if edges and gaps:
            _edges(out, gaps, profile, ex, console)
    finally:
        ex.close()
    tab = selection.table(scores)
    tab.to_csv(out / "models.csv", index=False)
    if gaps:
        import pandas as pd

        from repro.identify import certificate

        pd.DataFrame(gaps).to_csv(out / "separation.csv", index=False)
        cert = certificate.documents_set(gaps, separation.PAPER_FLOOR - separation.PAPER_RR, separation.SD)
        path = certificate.write([cert] if cert else [], out / "certificate.json")
        console.print(f"certificate: {'the documents facts, no model satisfies them together' if cert else 'none'}"
                      f" ({path})")
    if str(predictions) not in ("", "."):  # '' (typer reads it as the path '.'): none
        pred_rows = tuple(load_targets(user_path(predictions, default=PREDICTIONS)))
        ex = make_executor("ray" if ray_address else (executor or kind), jobs or env_jobs, ray_address or address)
        try:
            t0 = time.monotonic()
            folders = [out / str(m) for m in tab["model"]]
            long = selection.predict_models(folders, profile, pred_rows, stated={"rate_mixed": 24.0}, executor=ex,
                                            refresh=refresh_predictions)
        finally:
            ex.close()
        robust = selection.across_models(pred_rows, long, order=list(tab["model"]))
        robust.to_csv(out / "robustness.csv", index=False)
        console.print(f"predictions across {len(folders)} models' ensembles ({time.monotonic() - t0:.0f} s):")
        console.print(robust[["key", "paper", "verdict", "per_model"]].to_string(index=False))
    (out / "selection.json").write_text(json.dumps({
        "targets": str(targets), "profile": profile, "popsize": popsize, "generations": generations, "seed": seed,
        "chosen_by_cv": str(tab.iloc[0]["model"])}, indent=2) + "\n")
    console.print(tab[["model", "k", "chi2_per_dof", "aic", "bic", "cv_chi2", "docs_gap", "akaike_weight",
                       "cv_weight"]].to_string(index=False))


def _aimed(folder: Path, mechs, profile: str, ex, evals: int, console: Console,  # type: ignore[no-untyped-def]
           generations: int = 60):
    """Run (or resume) the aimed gap search on a model's folder, seeded with the known vectors and its own search's
    five widest; write ``aimed_search.csv`` and return the model's gap summary over all its searches (also written
    to ``gap_summary.json``)."""
    import pandas as pd

    from repro.identify import separation

    gp = separation.GapProblem(mechs, profile)
    hist_path = folder / "gap_search.csv"
    before = pd.read_csv(hist_path) if hist_path.exists() else pd.DataFrame()
    seeds = [*separation.KNOWN_VECTORS, *separation.best_feasible(before, separation.aimed_space(gp))]
    t0 = time.monotonic()
    aimed = separation.aimed_search(gp, executor=ex, feasible_target=evals, journal=folder / "aimed-search.jsonl",
                                    seeds=seeds, max_generations=generations)
    top = aimed[aimed["feasible"]].sort_values("gap", ascending=False).head(3)
    # the widest three on fresh traces (CONFIRM_SEEDS), each at the rate where round-robin holds 0.585 on them
    confirmed = separation.confirm_at_paper_rr(gp, [{p.name: float(r[p.name]) for p in gp.space}
                                                    for r in top.to_dict("records")], executor=ex)
    if len(confirmed):
        aimed = pd.concat([aimed, confirmed], ignore_index=True)
    aimed.to_csv(folder / "aimed_search.csv", index=False)
    summ = separation.summary(pd.concat([before, aimed], ignore_index=True) if len(before) else aimed)
    own = aimed[aimed["origin"] == "aimed"]
    summ["aimed_vectors"] = len(own)
    summ["aimed_feasible"] = int(own["feasible"].sum())
    feas = own[own["feasible"]]
    summ["aimed_widest_gap"] = float(feas["gap"].max()) if len(feas) else float("nan")
    ok = confirmed[confirmed["feasible"]] if len(confirmed) else confirmed
    summ["aimed_confirmed_gap"] = float(ok["gap"].max()) if len(ok) else float("nan")  # feasible ones only
    summ["aimed_wall_s"] = round(time.monotonic() - t0)
    old = json.loads((folder / "gap_summary.json").read_text()) if (folder / "gap_summary.json").exists() else {}
    summ["wall_s"] = old.get("wall_s")
    (folder / "gap_summary.json").write_text(json.dumps(summ, indent=2, default=str) + "\n")
    console.print(f"  aimed search: {summ['aimed_feasible']} feasible of {summ['aimed_vectors']} vectors, widest gap "
                  f"{summ['aimed_widest_gap']:+.3f} ({summ['aimed_confirmed_gap']:+.3f} on fresh traces); over every "
                  f"search {summ['widest_gap']:+.3f}")
    return summ


def _edges(out: Path, gaps: list, profile: str, ex, console: Console) -> None:  # type: ignore[no-untyped-def]
    """The edge table (`repro.identify.separation.edge_table`) of the model whose searches found the widest
    feasible gap, from that vector, written to its folder's ``edges.csv``."""
    import math

    from repro.engine.mechanisms import resolve
    from repro.identify import separation

    found = [g for g in gaps if math.isfinite(float(g.get("widest_gap", math.nan)))]
    if not found:
        return
    best = max(found, key=lambda g: float(g["widest_gap"]))
    model = str(best["model"])
    vector = {k: float(v) for k, v in (kv.split("=") for kv in str(best["at"]).split("; ") if "=" in kv)}
    gp = separation.GapProblem(resolve([] if model == "base" else model.split("+")), profile)
    t0 = time.monotonic()
    table = separation.edge_table(gp, vector, executor=ex)
    table.to_csv(out / model / "edges.csv", index=False)
    console.print(f"  edges of {model}'s widest gap: {len(table)} vectors ({time.monotonic() - t0:.0f} s)")


def _from_folder(folder: Path, rows, k: int, model: str):  # type: ignore[no-untyped-def]
    """A model's score (and its gap search's summary, None without one) from its folder as a search left it."""
    import pandas as pd

    from repro.identify import selection

    if not (folder / "history.csv").exists():
        raise ConfigError(f"models: {folder} has no history.csv: run `repro models --models {model}` first")
    fit = json.loads((folder / "fit.json").read_text())
    sc = selection.score(model, pd.read_csv(folder / "history.csv"), rows, k)
    sc["fit_wall_s"] = round(float(fit.get("fit_wall_s", float("nan"))))
    sc["popsize"] = fit.get("optimizer", {}).get("popsize")
    summ_path, hist_path = folder / "gap_summary.json", folder / "gap_search.csv"
    if summ_path.exists():
        return sc, json.loads(summ_path.read_text())
    if hist_path.exists():
        from repro.identify import separation

        return sc, separation.summary(pd.read_csv(hist_path))
    return sc, None


def _nested_start(space, base_best):  # type: ignore[no-untyped-def]
    """A richer model's start (internal coordinates): the base model's best, with each mechanism's free
    parameter at the value that leaves the model as the base one (``off``) where it has one, else mid-prior.
    A model with only such mechanisms then fits at least as well as the base model."""
    x0 = []
    for p in space:
        if p.name in base_best.index:
            v = float(base_best[p.name])
        elif p.off is not None:
            v = float(p.off)
        else:
            lo, hi = p.internal_bounds
            x0.append((lo + hi) / 2)
            continue
        lo, hi = p.internal_bounds
        x0.append(min(max(p.to_internal(v), lo), hi))
    return x0
