"""The router proxy: an OpenAI-compatible front for a prefill/decode-disaggregated vLLM cluster.

Per request (``POST /v1/completions`` or ``/v1/chat/completions``): admit it (size-limited body,
vLLM-like validation, ``X-Request-Id``, ``X-SLO-Class``), count its prompt tokens and predict its
output length, ask the policy through the shared `repro.routing.router.Router` (the same object the
simulator drives; a rejection -> 429 with ``Retry-After``), run vLLM's two-step P/D flow (prefill
call, then the decode call with the prefill's ``kv_transfer_params``), relay the decode answer byte
for byte, and journal one row per request with proxy-side timestamps. The response carries
``X-Request-Id``, ``X-Prefill-Instance`` and ``X-Decode-Instance``.

Every engine's ``/metrics`` (its three load gauges) is polled every ``poll_interval_s`` of physics
time; an engine that does not answer is skipped by the policies until it answers again. Requests in flight to a failing
engine are journaled as failed and answered 502 (or an SSE error event once streaming began);
every engine call has timeouts. Clock: the engines run ``time_scale`` K times faster than the wall
clock (1 for real vLLM); the ledger and the journal use physics seconds (wall seconds x K) since
the proxy started.

Modules (import from them directly; this package re-exports nothing, so that importing the light
`config` does not load FastAPI):

- `repro.live.proxy.config`: `Endpoint`, `ProxyConfig` (JSON round trip), `endpoints_from_cluster`,
  `API_KEY_ENV`.
- `repro.live.proxy.core`: `Proxy`, the state apart from HTTP: router, predictor, engine client,
  ``/metrics`` pollers and health, journal, Prometheus metrics.
- `repro.live.proxy.routes`: the HTTP routes: admission and validation, routing, rejection,
  ``/health``, ``/metrics``, ``/v1/models``.
- `repro.live.proxy.relay`: `Exchange`, one placed request's P/D calls, the streaming relay and the
  end of its journal row (exactly once); OpenAI-style errors.
- `repro.live.proxy.engine_client`: `EngineClient`, the P/D calls' HTTP/1.1 client (kept-alive
  connections, httptools), and its errors.
- `repro.live.proxy.scrape`: `Scraper`, the poller's kept-alive ``GET /metrics?name[]=...`` (only
  the gauges it reads), `metrics_query`.
- `repro.live.proxy.app`: `create_app` (assembly), `hot_app` (the completions before FastAPI's
  router and middleware), `serve`, `main` (``python -m repro.live.proxy --config FILE [--parent-pid N]``).
"""
