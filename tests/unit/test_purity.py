"""detectors/ is the pure core: no Kafka, no event loop, no clock, randomness or environment."""

import ast
from pathlib import Path

FORBIDDEN = {"faust", "aiokafka", "asyncio", "time", "random", "os", "datetime", "socket", "uuid", "secrets", "mode"}
CORE = Path(__file__).resolve().parents[2] / "detectors"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_nothing_impure():
    files = sorted(CORE.rglob("*.py"))  # detectors/rules/ too
    assert len(files) >= 5
    bad = {str(f.relative_to(CORE)): imported_roots(f) & FORBIDDEN for f in files}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_check_itself_sees_a_forbidden_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\nfrom asyncio import sleep\nfrom .sibling import y\n")
    assert imported_roots(f) == {"os", "asyncio"}
