"""Deprecated: the OpenAI Agents SDK adapter is `streams.gateway.adapters.openai_agents`
now. This module hands its names on, for one release."""

import warnings

from streams.gateway.adapters.openai_agents import LoopwardenGuard, RunStopped

warnings.warn(
    "streams.frameworks.openai_agents is deprecated: import from streams.gateway.adapters.openai_agents instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["LoopwardenGuard", "RunStopped"]
