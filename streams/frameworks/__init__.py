"""Deprecated: the framework adapters are `streams.gateway.adapters` now. This package
hands their names on, for one release."""

import warnings

from streams.gateway.adapters import Prices, RunStopped, as_result, params_of, stops_run, text_of, with_warning

warnings.warn(
    "streams.frameworks is deprecated: import from streams.gateway.adapters instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["Prices", "RunStopped", "as_result", "params_of", "stops_run", "text_of", "with_warning"]
