"""Output-length predictors with scikit-learn's estimator API: what the router reads as a request's
predicted output length (tokens), never the true length.

- `repro.routing.predictor.features`: a predictor's input ``X`` (`PredictorInput`: ``prompt_head`` and
  ``prompt_tokens`` columns, or a `repro.workload.traces.Trace`) and the features (hashed prompt-head
  n-grams, prompt-length columns).
- `repro.routing.predictor.model`: the interface every predictor meets (`OutputLengthModel`: ``fit``,
  ``predict``, ``predict_one``) and the shipped model (`LengthPredictor`, ridge on ``log1p(output_tokens)``,
  ``data/predictor/``; `load_default`), saved without pickles.
- `repro.routing.predictor.ablations`: `NoisyPredictor` (keyed multiplicative log-uniform noise of a given
  mean absolute relative error, the same per request in the simulator and the proxy) and
  `ConstantPredictor` (no length signal).
- `repro.routing.predictor.training`: the train / held-out split, training (`train_default`,
  ``python -m repro.routing.predictor``) and the held-out metrics.

This package re-exports each module's public names: import them from ``repro.routing.predictor``.
"""

from __future__ import annotations

from repro.routing.predictor.ablations import (
    REL_ERROR_MAX,
    ConstantPredictor,
    NoisyPredictor,
    keyed_uniform,
    noise_amplitude,
)
from repro.routing.predictor.features import (
    PredictorInput,
    hash_text_features,
    length_features,
    text_score_one,
    text_scores,
)
from repro.routing.predictor.model import (
    MAX_TOKENS,
    MODEL_FORMAT,
    LengthPredictor,
    OutputLengthModel,
    default_train_median,
    load_default,
)
from repro.routing.predictor.training import (
    build_datasets,
    evaluate,
    length_metrics,
    main,
    spearman,
    train_default,
)

__all__ = [
    "MAX_TOKENS",
    "MODEL_FORMAT",
    "REL_ERROR_MAX",
    "ConstantPredictor",
    "LengthPredictor",
    "NoisyPredictor",
    "OutputLengthModel",
    "PredictorInput",
    "build_datasets",
    "default_train_median",
    "evaluate",
    "hash_text_features",
    "keyed_uniform",
    "length_features",
    "length_metrics",
    "load_default",
    "main",
    "noise_amplitude",
    "spearman",
    "text_score_one",
    "text_scores",
    "train_default",
]
