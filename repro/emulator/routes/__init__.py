"""The emulated engine's routes, one module per concern (assembled by `repro.emulator.app.create_app`).

- `repro.emulator.routes.state`: `EmulatorState`, what every route shares (``app.state.emulator``).
- `repro.emulator.routes.errors`: vLLM's error bodies (`ApiError`, `error_response`).
- `repro.emulator.routes.params`: validation of completion and chat bodies (`ParsedRequest`).
- `repro.emulator.routes.completions`: ``/v1/completions`` and ``/v1/chat/completions`` (SSE and not).
- `repro.emulator.routes.kv_transfer`: the P/D KV read (``/_emulator/nixl/read``) and ``kv_transfer_params``.
- `repro.emulator.routes.service`: ``/health``, ``/ping``, ``/version``, ``/v1/models``, ``/metrics``,
  ``/tokenize``, ``/detokenize``.
- `repro.emulator.routes.admin`: ``/_emulator/state`` and ``/info``; dev mode: ``/reset_prefix_cache``,
  ``/is_sleeping``, ``/_emulator/faults``.

Each route module has module-level handlers and a ``register(app)`` that adds them to the app
(``app.get(path)(handler)``, as the decorator would); a handler finds its engine, configuration and
faults through `repro.emulator.routes.state.emulator_state` (``app.state.emulator``).
"""
