"""The benchmarks' temporary folder (benchmarks.kafka.scratch): gone after a run, kept
after a failure or with --keep, and named on stderr when kept."""

from __future__ import annotations

import pytest

from benchmarks.kafka import scratch


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
