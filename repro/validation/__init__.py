"""How far to trust the simulator: one trace replayed on a real cluster and on the simulator calibrated to
it, request by request, from light load to saturation (`repro validate`).

- `repro.validation.plan`: what a validation runs (`ValidationConfig`, the error budget, the engines'
  scheduler settings a calibration does not hold);
- `repro.validation.twin`: the simulated twin of a live run (same trace, same router, calibrated physics);
- `repro.validation.accuracy`: requests paired by id, per-request errors, goodput differences over
  traces, the policies' ordering, the load up to which the simulator stays within its budget;
- `repro.validation.run`: the whole validation on a cluster, pass by pass (`validate`);
- `repro.validation.live_runs`: the cluster it holds, its calibration and each live run;
- `repro.validation.saturation`: the load levels' reference rate (live probes, the simulator, or stated);
- `repro.validation.outputs`: what it writes (validation.json / .csv / .md, requests.parquet, figures);
- `repro.validation.figures`, `repro.validation.report`: its figures and its HTML section.
"""
