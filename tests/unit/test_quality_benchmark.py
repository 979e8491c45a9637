"""`python -m benchmarks.quality` on a small labelled corpus written here: what it counts
as flagged, blocked, saved and harmful (run as the command, as a user runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EDIT = {"path": "a.py", "old": "x", "new": "y"}


def text(t: str) -> dict:
    return {"content": [{"type": "text", "text": t}]}


class Runs:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.labels: dict[str, dict] = {}

    def run(self, run_id: str, system: str, resolved: bool, steps: list[tuple[str, dict, dict]]) -> None:
        """steps: (tool, params, result fields) per call."""
        self.labels[run_id] = {"system": system, "resolved": resolved, "steps": len(steps)}
        seq = 0
        for i, (tool, params, res) in enumerate(steps):
            common = {
                "run_id": run_id,
                "gateway_id": "gw",
                "tool_name": tool,
                "params": params,
                "tool_call_id": f"c{i}",
            }
            self.events.append({"type": "tool_call", "seq": seq, **common})
            self.events.append({"type": "tool_result", "seq": seq + 1, **common, **res})
            seq += 2
        self.events.append({"type": "run_end", "seq": seq, "run_id": run_id, "gateway_id": "gw"})

    def write(self, d: Path) -> Path:
        d.mkdir()
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in self.events))
        (d / "labels.json").write_text(json.dumps(self.labels))
        (d / "README.md").write_text("| `sys-a` | a test source | MIT |\n")
        return d


def quality(corpus: Path, config: dict, tmp: Path, *extra: str) -> dict:
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(config))
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.quality", "--corpus", str(corpus), "--config", str(cfg), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}},
    "loopwarden": {"rules": {"failureRepeat": {"enabled": True, "consecutive": 3}}},
}


def test_flags_saved_calls_and_harmful_blocks(tmp_path):
    r = Runs()
    fail = {"error": "old text not found"}
    # failed run: three identical failures, the 4th identical call is blocked; 3 calls from it on
    r.run(
        "f1",
        "sys-a",
        False,
        [("edit", EDIT, fail)] * 4
        + [("read", {"p": 1}, {"result": text("a")})] * 1
        + [("ls", {}, {"result": text("b")})],
    )
    # resolved run: a call blocked whose real outcome was the same as the previous time: not harmful
    r.run("ok1", "sys-a", True, [("status", {}, {"result": text("queued")})] * 4)
    # resolved run: blocked, but the 4th call really returned something new: harmful
    r.run(
        "ok2",
        "sys-b",
        True,
        [("status", {}, {"result": text("queued")})] * 3 + [("status", {}, {"result": text("done")})],
    )
    # resolved run, never flagged
    r.run("ok3", "sys-b", True, [("read", {"p": i}, {"result": text(str(i))}) for i in range(5)])
    out = quality(r.write(tmp_path / "corpus"), CONFIG, tmp_path)
    assert out["corpus"]["runs"] == 4 and out["corpus"]["attribution"] == ["| `sys-a` | a test source | MIT |"]
    (name,) = out["configs"]
    t = out["configs"][name]["overall"]
    assert (t["runs"], t["resolved"], t["failed"]) == (4, 3, 1)
    assert t["blocked"] == {"resolved": 2, "failed": 1}
    assert t["flagged"] == {"resolved": 2, "failed": 1}
    assert t["calls_saved"] == 3 and t["failed_run_calls"] == 6  # the blocked edit, the read and the ls
    assert t["harmful_blocks"] == 1 and t["runs_with_harmful_blocks"] == 1
    assert t["by_detector"]["failure_repeat"]["blocked"] == {"resolved": 0, "failed": 1}
    assert t["by_detector"]["failure_repeat"]["calls_saved"] == 3
    assert t["by_detector"]["generic_repeat"]["harmful_blocks"] == 1
    src = out["configs"][name]["sources"]
    assert src["sys-a"]["harmful_blocks"] == 0 and src["sys-b"]["harmful_blocks"] == 1
    assert src["sys-b"]["resolved_flagged_percent"] == 50.0


def test_against_and_examples(tmp_path):
    r = Runs()
    r.run("f1", "sys-a", False, [("edit", EDIT, {"error": "old text not found"})] * 5)
    corpus = r.write(tmp_path / "corpus")
    other = tmp_path / "openclaw.json5"
    other.write_text("{tools: {loopDetection: {enabled: true}}}")
    out = quality(corpus, CONFIG, tmp_path, "--against", str(other), "--examples", "1")
    assert list(out["configs"]) == ["config", "openclaw"]
    assert out["configs"]["openclaw"]["overall"]["blocked"]["failed"] == 0
    kinds = out["configs"]["config"]["examples"]
    assert set(kinds) == {"generic_repeat/failed", "failure_repeat/failed"}  # warned at 2, blocked at 3
    (ex,) = kinds["failure_repeat/failed"]
    flagged = [c for c in ex["calls"] if c["flag"]]
    assert [c["seq"] for c in flagged] == [6] and flagged[0]["failed"] and flagged[0]["outcome"].startswith("error:")
    assert flagged[0]["same_outcome_as_previous_identical_call"] is True
