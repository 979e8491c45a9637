import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def conformance_dir() -> Path:
    """The shared scenarios: ../shared/conformance beside the checkout, or $LOOPWARDEN_CONFORMANCE_DIR."""
    return Path(os.environ.get("LOOPWARDEN_CONFORMANCE_DIR", ROOT.parent / "shared" / "conformance"))


def scenario_files(v2: tuple[str, ...] = ()) -> list[Path]:
    """The spec v1 scenarios, and those of `v2/` whose names start with one of `v2`
    (e.g. ("210", "230")): the v2 sections a harness carries so far."""
    d = conformance_dir()
    files = sorted(d.glob("*.json"))
    if not files:
        # A missing folder must fail the run, never shrink it to nothing.
        return [d / "MISSING-conformance-scenarios.json"]
    if v2:
        more = sorted(p for p in (d / "v2").glob("*.json") if p.name.startswith(v2))
        if not more:
            return files + [d / "v2" / "MISSING-v2-conformance-scenarios.json"]
        files += more
    return files


V2_ALL = ("210", "220", "230", "240")  # budgets, the tool breaker, shadow mode, stop orders
V2_PER_RUN = ("210", "230")  # the v2 sections a worker decides without the fleet stage
