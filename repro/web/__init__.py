"""The HTTP serving layer the emulated engines (`repro.emulator`) and the router proxy (`repro.live.proxy`) share:
`repro.web.hot_routes.HotRoutes`, the ASGI middleware that answers their hot routes without the framework's router
(docs/HTTP.md says which HTTP library serves which purpose)."""
