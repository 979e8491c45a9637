"""Deprecated: the LangChain adapter is `streams.gateway.adapters.langchain` now. This
module hands its names on, for one release."""

import warnings

from streams.gateway.adapters.langchain import RUN_KEY, LoopwardenMiddleware, LoopwardenState, RunStopped

warnings.warn(
    "streams.frameworks.langchain is deprecated: import from streams.gateway.adapters.langchain instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["RUN_KEY", "LoopwardenMiddleware", "LoopwardenState", "RunStopped"]
