"""The old import paths of the gateway library (before streams/gateway/) keep working for
one release: each warns, naming the new path, and hands on the very same objects."""

import importlib
import sys
import warnings

import pytest

OLD_TO_NEW = {
    "streams.client": "streams.gateway.client",
    "streams.frameworks": "streams.gateway.adapters",
    "streams.frameworks.langchain": "streams.gateway.adapters.langchain",
    "streams.frameworks.openai_agents": "streams.gateway.adapters.openai_agents",
}
NEEDS = {"streams.frameworks.langchain": "langchain", "streams.frameworks.openai_agents": "agents"}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_path_warns_and_yields_the_same_objects(old, monkeypatch):
    if old in NEEDS:
        pytest.importorskip(NEEDS[old])
    new = importlib.import_module(OLD_TO_NEW[old])
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh, so it warns again
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert f"{old} is deprecated: import from {OLD_TO_NEW[old]} instead" in said, said
    assert mod.__all__
    for name in mod.__all__:
        assert getattr(mod, name) is getattr(new, name), name
    assert set(new.__all__) <= set(mod.__all__)
