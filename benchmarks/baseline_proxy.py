"""Baseline for the proxy benchmark: a minimal round-robin P/D proxy (FastAPI + httpx).

The design of vLLM's reference disaggregated-serving proxy: round-robin over the prefill and the
decode engines, the two-step flow, the decode answer relayed back. No ledger, no policy, no journal,
no metrics poller. Run: ``python benchmarks/baseline_proxy.py --port P --prefill URL --decode URL ...``
"""

from __future__ import annotations

import argparse
import itertools
import uuid

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from repro.live.pd_protocol import decode_body, headers_for, prefill_body


def create_app(prefills: list[str], decodes: list[str]) -> FastAPI:
    app = FastAPI()
    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=4096), timeout=60)
    p_cycle, d_cycle = itertools.cycle(prefills), itertools.cycle(decodes)

    async def handle(path: str, request: Request) -> Response:
        body = await request.json()
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        headers = headers_for(rid)
        r = await client.post(next(p_cycle) + path, json=prefill_body(body), headers=headers)
        kv = r.json().get("kv_transfer_params")
        target = next(d_cycle) + path
        if not body.get("stream"):
            r2 = await client.post(target, json=decode_body(body, kv), headers=headers)
            return Response(r2.content, status_code=r2.status_code, media_type="application/json")
        up = await client.send(
            client.build_request("POST", target, json=decode_body(body, kv), headers=headers), stream=True
        )

        async def relay():
            try:
                async for chunk in up.aiter_raw():
                    yield chunk
            finally:
                await up.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle("/v1/completions", request)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefill", action="append", required=True)
    ap.add_argument("--decode", action="append", required=True)
    a = ap.parse_args()
    uvicorn.run(create_app(a.prefill, a.decode), host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
