"""calibrate-then-route: reproduction harness for 'Calibrate, Then Route'.

Routing in prefill/decode-disaggregated LLM serving, on three interchangeable backends:
``sim`` (discrete-event simulator), ``emulated`` (real HTTP against emulated vLLM engines) and
``vllm`` (real engines).
"""

__version__ = "0.1.0"

from repro import native as _native  # noqa: E402

_native.install_guard()  # the compiled hot modules, or their sources (see repro.native)
