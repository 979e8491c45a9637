"""The harness tests and benchmarks share (streams/tools/harness.py), what needs no
broker: the scratch folder, a metric read from a /metrics page, percentiles."""

from __future__ import annotations

import pytest

from streams.tools.harness import metric_value, percentile, percentiles, scratch

PAGE = """# HELP loopwarden_events_total Events applied
# TYPE loopwarden_events_total counter
loopwarden_events_total 42.0
loopwarden_events_created 1.7e9
loopwarden_decisions_total{action="allow",detector="none"} 30.0
loopwarden_decisions_total{action="warn",detector="generic_repeat"} 2.0
loopwarden_decisions_total{action="block",detector="generic_repeat"} 1.0
loopwarden_active_runs 7.0
"""


def test_the_folder_goes_after_a_run_and_stays_after_a_failure_or_when_asked(capsys):
    with scratch("lw-test-scratch-") as tmp:
        (tmp / "broker.log").write_text("x")
    assert not tmp.exists() and capsys.readouterr().err == ""

    with pytest.raises(RuntimeError), scratch("lw-test-scratch-") as failed:
        (failed / "worker.log").write_text("why it failed")
        raise RuntimeError("the worker did not start")
    assert (failed / "worker.log").read_text() == "why it failed"
    assert f"kept {failed}" in capsys.readouterr().err

    with scratch("lw-test-scratch-", keep=True) as kept:
        pass
    assert kept.is_dir() and f"kept {kept}" in capsys.readouterr().err
    for d in (failed, kept):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def test_a_metric_is_the_sum_of_its_samples_whose_labels_match():
    assert metric_value(PAGE, "loopwarden_events") == metric_value(PAGE, "loopwarden_events_total") == 42.0
    assert metric_value(PAGE, "loopwarden_decisions") == 33.0
    assert metric_value(PAGE, "loopwarden_decisions", detector="generic_repeat") == 3.0
    assert metric_value(PAGE, "loopwarden_decisions", action="warn", detector="generic_repeat") == 2.0
    assert metric_value(PAGE, "loopwarden_active_runs") == 7.0
    assert metric_value(PAGE, "loopwarden_runs_evicted") == 0.0  # none: 0


def test_percentiles_are_by_nearest_rank():
    xs = [float(x) for x in range(100, 0, -1)]  # 100 .. 1, unsorted
    assert percentile(xs, 50) == 51.0 and percentile(xs, 99) == 100.0 and percentile(xs, 0) == 1.0
    assert percentile([], 50) is None
    assert percentiles([0.0012, 0.0034, 0.0101], (50, 99), scale=1000) == {"p50": 3.4, "p99": 10.1, "max": 10.1, "n": 3}
    assert percentiles([], (50,)) == {"p50": None, "max": None, "n": 0}


def test_a_sigterm_ends_a_benchmark_through_its_cleanup(tmp_path):
    """terminated_as_exit: a SIGTERM raises SystemExit(143) in the main thread, so the
    `finally` that stops a benchmark's broker and workers runs (by default the process
    would end at once and leave them running)."""
    import signal
    import subprocess
    import sys

    code = (
        "import time\n"
        "from streams.tools.harness import terminated_as_exit\n"
        "with terminated_as_exit():\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(30)\n"
        "    finally:\n"
        "        print('stopped what it started', flush=True)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    assert out == "stopped what it started\n"
    assert p.returncode == 143
