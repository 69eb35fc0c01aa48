"""``python -m repro.live.proxy --config FILE``: the router proxy as its own process."""

from repro.live.proxy.app import main

main()
