import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def conformance_dir() -> Path:
    """The shared scenarios: ../shared/conformance beside the checkout, or $LOOPWARDEN_CONFORMANCE_DIR."""
    return Path(os.environ.get("LOOPWARDEN_CONFORMANCE_DIR", ROOT.parent / "shared" / "conformance"))


def scenario_files() -> list[Path]:
    d = conformance_dir()
    files = sorted(d.glob("*.json"))
    if not files:
        # A missing folder must fail the run, never shrink it to nothing.
        return [d / "MISSING-conformance-scenarios.json"]
    return files
