"""`loopwarden replay` as a user runs it: files, stdin, bad lines, stats, errors."""

import json
import subprocess

from streams.tools.launch import command


def call(seq, tool="read", **kw):
    return {
        "type": "tool_call",
        "run_id": "r1",
        "seq": seq,
        "gateway_id": "g1",
        "tool_name": tool,
        "params": {"p": 1},
        **kw,
    }


def run(args, stdin=b""):
    return subprocess.run(command(*args), input=stdin, capture_output=True, timeout=60)


def test_bad_lines_are_named_skipped_and_set_aside(tmp_path):
    lines = [
        json.dumps(call(0)),
        "{not json",
        "[1,2]",
        json.dumps({k: v for k, v in call(1).items() if k != "run_id"}),
        json.dumps(call(1, seq_bad=1) | {"seq": "x"}),
        "x" * 300,
        json.dumps(call(2)),
    ]
    src = tmp_path / "e.jsonl"
    src.write_text("\n".join(lines) + "\n")
    dead = tmp_path / "dead.jsonl"
    p = run(
        [
            "replay",
            "--input",
            str(src),
            "--output",
            "-",
            "--dead-letter",
            str(dead),
            "--max-event-bytes",
            "200",
            "--stats",
            "--json",
        ]
    )
    assert p.returncode == 3
    got = [json.loads(x) for x in p.stdout.splitlines()]
    assert [d["seq"] for d in got] == [0, 2]
    err = p.stderr.decode()
    for n in (2, 3, 4, 5, 6):
        assert f"line {n}:" in err
    assert "missing required field `run_id`" in err and "`$.seq`" in err and "oversize" in err
    rejected = [json.loads(x) for x in dead.read_text().splitlines()]
    assert [r["line"] for r in rejected] == [2, 3, 4, 5, 6]
    assert rejected[0]["value"] == "{not json"
    stats = json.loads([ln for ln in err.splitlines() if ln.startswith("{")][0])
    assert stats["decisions"] == 2 and stats["bad_lines"] == 5


def test_stdin_to_stdout_and_clean_exit():
    p = run(["replay"], stdin=(json.dumps(call(0)) + "\n").encode())
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["event_id"] == "r1:0" and d["action"] == "allow" and d["config_hash"]


def test_missing_config_is_an_error_that_names_the_file(tmp_path):
    p = run(["replay", "--config", str(tmp_path / "nope.json")])
    assert p.returncode == 1
    assert p.stderr.decode().startswith("Error: cannot read config") and "nope.json" in p.stderr.decode()


def test_config_warnings_are_printed_and_do_not_stop_the_replay(tmp_path):
    cfg = tmp_path / "c.json5"
    cfg.write_text("{tools: {loopDetection: {enabled: true, warningThreshold: 0}}}")
    p = run(["replay", "--config", str(cfg)], stdin=(json.dumps(call(0)) + "\n").encode())
    assert p.returncode == 0
    assert "warningThreshold: 0 is not a positive integer" in p.stderr.decode()


def test_unreachable_broker_is_a_named_error():
    from streams.tools.localkafka import free_port

    addr = f"127.0.0.1:{free_port()}"  # nothing listens there
    p = subprocess.run(command("topics", "create", "--bootstrap", addr), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert f"Error: cannot reach Kafka at {addr}" in p.stderr and "Traceback" not in p.stderr
