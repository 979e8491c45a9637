"""Write the golden vectors (tests/vectors/*.json) from the Python implementation, then
check them against independent implementations: Node's own JSON number and string
formatting plus its crypto module (canonical JSON and SHA-256), and Kafka's Java client
(murmur2 and the default partitioner). Run by hand from the repository root:

    .venv/bin/python tests/vectors/generate.py            # write and cross-check
    .venv/bin/python tests/vectors/generate.py --check    # cross-check the committed files only

A missing `node` or `java`, or a missing kafka-clients jar (`scripts/kafka fetch`), is an
error: vectors that were not cross-checked are not written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from detectors import decode_event, encode  # noqa: E402
from detectors.canonical import canon, canon_exact, js_float_literal  # noqa: E402
from detectors.fingerprint import fingerprint  # noqa: E402
from streams.gateway.client import partition_for  # noqa: E402

# --- inputs: every value is JSON text, so each language parses it with its own parser ----

CANONICAL = [
    # numbers: JavaScript's Number#toString after the parse to a double
    ("zero", "0"),
    ("negative zero int", "-0"),
    ("negative zero float", "-0.0"),
    ("one point zero", "1.0"),
    ("one exponent form", "1.0e0"),
    ("hundred as exponent", "1e2"),
    ("upper-case exponent", "1E+2"),
    ("negative", "-42"),
    ("fraction", "1.5"),
    ("tenth", "0.1"),
    ("sum artefact", "0.30000000000000004"),
    ("1e-6 stays fixed", "0.000001"),
    ("1e-7 goes exponent", "0.0000001"),
    ("small exponent", "1.5e-7"),
    ("tiny exponent", "123e-20"),
    ("1e20 stays fixed", "1e20"),
    ("1e21 goes exponent", "1e21"),
    ("large negative exponent", "-1.5e+300"),
    ("max double", "1.7976931348623157e308"),
    ("min subnormal", "5e-324"),
    ("max safe integer", "9007199254740991"),
    ("2^53 + 1 rounds to 2^53", "9007199254740993"),
    ("-(2^53 + 1)", "-9007199254740993"),
    ("2^64", "18446744073709551616"),
    ("21-digit integer", "123456789012345678901"),
    ("30-digit integer", "123456789012345678901234567890"),
    ("exact 1e20 as integer", "100000000000000000000"),
    ("trailing zeros", "2.50000"),
    ("many digits", "3.141592653589793238462643383279"),
    ("numbers in an array", "[1, 1.0, -0, 0.5, 1e21, 1e-7, 9007199254740993]"),
    # literals
    ("null", "null"),
    ("true", "true"),
    ("false", "false"),
    # strings: JSON.stringify escaping, lone surrogates removed first
    ("empty string", '""'),
    ("plain string", '"plain"'),
    ("short escapes", r'"quote \" backslash \\ slash \/ b \b f \f n \n r \r t \t"'),
    ("control characters", r'"\u0000\u0001\u001f\u007f"'),
    ("line and paragraph separators", r'"\u2028\u2029"'),
    ("latin-1 and CJK", '"caf\u00e9 \u65e5\u672c\u8a9e"'),
    ("escaped non-ASCII", r'"caf\u00e9"'),
    ("emoji literal", '"\U0001f600"'),
    ("emoji as escaped pair", r'"\ud83d\ude00"'),
    ("lone high surrogate", r'"a\ud800b"'),
    ("lone low surrogate", r'"a\udc00b"'),
    ("reversed pair", r'"\ude00\ud83d"'),
    ("lone surrogate beside a pair", r'"x\ud800\ud83d\ude00\udfffy"'),
    ("only a lone surrogate", r'"\udbff"'),
    # objects: keys sorted by UTF-16 code units, no whitespace
    ("empty object", "{}"),
    ("empty array", "[]"),
    ("nested empties", '[[], {}, [{}], {"a": []}]'),
    ("ascii key order", '{"b": 1, "a": 2, "B": 3, "_": 4, "": 5, "aa": 6, "a ": 7}'),
    ("integer-like keys sort as strings", '{"10": 1, "9": 2, "1": 3, "a": 4, "-1": 5}'),
    ("UTF-16 order, not code point order", '{"\uffff": 1, "\U0001f600": 2, "\ue000": 3, "\u00e9": 4, "z": 5}'),
    ("astral keys", '{"\U0001f601": 1, "\U0001f600": 2, "\U00010000": 3, "\ud7ff": 4}'),
    ("keys with escapes", r'{"a\"b": 1, "a\nb": 2, "a\\b": 3, "a/b": 4}'),
    ("lone surrogate in a key", r'{"k\ud800": 1, "j": 2}'),
    ("nested objects and arrays", '{"z": {"y": [{"b": 1, "a": [true, null]}], "x": {}}, "a": {"c": 1.0, "b": -0}}'),
    ("deep nesting", "[" * 20 + '{"d": 1}' + "]" * 20),
    ("whitespace between tokens", ' { "b" : [ 1 , 2 ] ,\n\t"a" : "x" } '),
]

# (name, raw tool name, params JSON text or None when absent)
CALLS = [
    ("read", "read", '{"path": "/workspace/README.md"}'),
    ("params absent", "read", None),
    ("params null", "read", "null"),
    ("params empty object", "read", "{}"),
    ("params empty array", "read", "[]"),
    ("params a string", "read", '"README.md"'),
    ("same call, 1.0 written as 1", "read", '{"limit": 1.0, "path": "a"}'),
    ("same call, keys reordered", "read", '{"path": "a", "limit": 1}'),
    ("unicode params", "write", '{"path": "caf\u00e9.txt", "content": "\U0001f600 \u65e5\u672c"}'),
    ("lone surrogate in params", "write", r'{"content": "a\ud800b"}'),
    ("tool name trimmed and lower-cased", "  Read\t", '{"path": "a"}'),
    ("JavaScript white space trimmed", "\u00a0READ\u3000\ufeff", '{"path": "a"}'),
    ("alias bash -> exec", "bash", '{"command": "ls"}'),
    ("alias BASH -> exec", " BASH ", '{"command": "ls"}'),
    ("exec itself", "exec", '{"command": "ls"}'),
    ("alias apply-patch -> apply_patch", "apply-patch", '{"patch": "*** Begin Patch"}'),
    (
        "update_plan reduced to its shape",
        "update_plan",
        '{"plan": [{"step": "write tests", "status": "completed"}, {"step": "ship", "status": "in_progress"}],'
        ' "explanation": "first pass"}',
    ),
    (
        "update_plan reworded, same shape",
        "update_plan",
        '{"plan": [{"step": "add the tests", "status": "completed"}, {"step": "release", "status": "in_progress"}],'
        ' "explanation": "second pass"}',
    ),
    (
        "update_plan odd steps",
        "update_plan",
        '{"plan": [{"step": "  ", "status": 3}, "not an object", {"status": "pending"}, null], "explanation": " \\n "}',
    ),
    ("update_plan plan not an array", "update_plan", '{"plan": "do it", "explanation": 5}'),
    ("update_plan no params", "update_plan", None),
    ("update_plan params not an object", "update_plan", '"x"'),
    ("known poll: process poll", "process", '{"action": "poll", "sessionId": "s1"}'),
    ("known poll: process log", "process", '{"action": "log", "sessionId": "s1", "offset": 0}'),
    ("not a poll: process kill", "process", '{"action": "kill", "sessionId": "s1"}'),
    ("not a poll: process params an array", "process", '["poll"]'),
    ("known poll: command_status", "command_status", '{"id": 7}'),
    ("known poll: command_status without params", "Command_Status", None),
    ("not a poll: other tool with action poll", "message", '{"action": "poll"}'),
    ("big numbers in params", "calc", '{"a": 9007199254740993, "b": 1e21, "c": -0.0, "d": 0.1}'),
]

# (name, tool name, params text or None, result text or None, error text or None)
OUTCOMES = [
    ("error string", "read", '{"path": "a"}', None, '"ENOENT: no such file"'),
    ("error names an unknown tool", "foo_bar", "{}", None, '"Unknown tool: Foo_Bar"'),
    ("unknown tool, quoted", "x", "{}", None, "\"unknown tool 'web.search' requested\""),
    ("tool not found", "x", "{}", None, '"Tool \\"Deploy-Prod\\" not found"'),
    ("tool is not available", "x", "{}", None, '"tool browser is not available here"'),
    ("error null", "read", "{}", None, "null"),
    ("error object", "read", "{}", None, '{"code": 2, "msg": "bad"}'),
    ("error with result beside it", "read", "{}", '{"content": []}', '"boom"'),
    ("result absent", "read", "{}", None, None),
    ("result an array", "read", "{}", "[1, 2]", None),
    ("result null", "read", "{}", "null", None),
    ("result a string", "read", "{}", '"text"', None),
    ("result a number", "read", "{}", "1.0", None),
    (
        "plain result",
        "read",
        '{"path": "a"}',
        '{"content": [{"type": "text", "text": "  hello  "}, {"type": "image", "data": "x"},'
        ' {"type": "text", "text": "world\\n"}, {"text": "no type"}, {"type": 1, "text": "bad type"}],'
        ' "details": {"path": "a", "bytes": 5}}',
        None,
    ),
    (
        "text trimmed of JavaScript white space",
        "read",
        "{}",
        '{"content": [{"type": "text", "text": "\\u00a0\\u3000body\\u2028"}]}',
        None,
    ),
    ("details not an object", "read", "{}", '{"content": [], "details": [1]}', None),
    ("content not a list", "read", "{}", '{"content": "x", "details": {}}', None),
    (
        "the guard's own veto echoed back",
        "read",
        "{}",
        '{"content": [{"type": "text", "text": "blocked"}],'
        ' "details": {"status": "blocked", "deniedReason": "tool-loop"}}',
        None,
    ),
    (
        "blocked for another reason",
        "read",
        "{}",
        '{"content": [], "details": {"status": "blocked", "deniedReason": "policy"}}',
        None,
    ),
    (
        "exec running",
        "exec",
        '{"command": "make"}',
        '{"content": [], "details": {"status": "running", "tail": "building...", "pid": 42, "sessionId": "s"}}',
        None,
    ),
    ("exec running, no tail", "bash", '{"command": "make"}', '{"details": {"status": "running", "tail": 5}}', None),
    (
        "exec completed, aggregated output",
        "exec",
        '{"command": "ls"}',
        '{"content": [{"type": "text", "text": "ignored"}], "details": {"status": "completed", "exitCode": 0,'
        ' "aggregated": "  a\\nb  ", "durationMs": 12, "cwd": "/w"}}',
        None,
    ),
    (
        "exec failed, blank aggregated falls back to text",
        "exec",
        '{"command": "ls"}',
        '{"content": [{"type": "text", "text": "oops"}], "details": {"status": "failed", "exitCode": 1.0,'
        ' "aggregated": " \\n ", "timedOut": true}}',
        None,
    ),
    (
        "exec completed, odd types",
        "exec",
        "{}",
        '{"details": {"status": "completed", "exitCode": "0", "timedOut": "true"}}',
        None,
    ),
    (
        "exec approval pending",
        "exec",
        "{}",
        '{"details": {"status": "approval-pending", "reason": "sudo", "host": 3, "command": "rm -rf /",'
        ' "warningText": null, "requestId": "r1"}}',
        None,
    ),
    ("exec approval unavailable", "exec", "{}", '{"details": {"status": "approval-unavailable"}}', None),
    ("exec other status", "exec", "{}", '{"details": {"status": "queued"}, "content": []}', None),
    (
        "process poll",
        "process",
        '{"action": "poll", "sessionId": "s"}',
        '{"content": [{"type": "text", "text": "still running"}], "details": {"status": "running", "exitCode": null,'
        ' "aggregated": "out", "pid": 9}}',
        None,
    ),
    ("process poll, missing fields", "process", '{"action": "poll"}', '{"details": {}}', None),
    (
        "process log",
        "process",
        '{"action": "log", "sessionId": "s"}',
        '{"details": {"status": "exited", "totalLines": 10, "totalChars": 200, "truncated": false, "exitCode": 0,'
        ' "exitSignal": null}}',
        None,
    ),
    ("process other action", "process", '{"action": "kill"}', '{"details": {"status": "killed"}}', None),
    (
        "sessions_send, volatile ids removed",
        "sessions_send",
        '{"to": "s2"}',
        '{"details": {"ok": true, "messageId": "m1", "runId": "r9", "nested": [{"ts": 1, "timestamp": 2, "keep": 3,'
        ' "createdAt": "x", "receipt": {"a": 1}}], "sentAt": 5}}',
        None,
    ),
    (
        "message send, delivered message id removed",
        "message",
        '{"action": "send", "text": "hi"}',
        '{"details": {"message": {"id": "abc", "text": "hi", "direction": "outbound", "senderId": "u1"},'
        ' "other": {"id": "kept", "text": "no marker"}, "platformMessageIds": ["p1"], "file_id": "f"}}',
        None,
    ),
    (
        "message read is not send-like",
        "message",
        '{"action": "read"}',
        '{"details": {"messageId": "m1", "text": "x"}}',
        None,
    ),
    (
        "update_plan result reduced to shape",
        "update_plan",
        "{}",
        '{"content": [{"type": "text", "text": "Plan updated"}], "details": {"plan": [{"step": "a", "status": "done"}],'
        ' "explanation": "why"}}',
        None,
    ),
    ("numbers in details", "read", "{}", '{"details": {"n": 1.0, "m": -0, "big": 9007199254740993}}', None),
]

_BASE = {"run_id": "run-1", "seq": 7, "gateway_id": "gw-1"}
# (name, the raw event as JSON text)
FINGERPRINTS = [
    (
        "call with params",
        '{"type": "tool_call", "run_id": "run-1", "seq": 7, "gateway_id": "gw-1", "agent_id": "main",'
        ' "session_id": "sess-1", "ts": 1767225600000, "tool_call_id": "call-1", "tool_name": "Read",'
        ' "params": {"path": "a", "limit": 1.0}}',
    ),
    (
        "call without params",
        '{"type": "tool_call", "run_id": "run-1", "seq": 8, "gateway_id": "gw-1", "tool_name": "command_status"}',
    ),
    (
        "known poll call",
        '{"type": "tool_call", "run_id": "run-2", "seq": 0, "gateway_id": "gw-1", "ts": 5,'
        ' "tool_call_id": null, "tool_name": "process", "params": {"action": "poll", "sessionId": "s"}}',
    ),
    (
        "update_plan call",
        '{"type": "tool_call", "run_id": "run-2", "seq": 1, "gateway_id": "gw-1",'
        ' "tool_name": "update_plan", "params": {"plan": [{"step": "x", "status": "pending"}]}}',
    ),
    (
        "result",
        '{"type": "tool_result", "run_id": "run-1", "seq": 9, "gateway_id": "gw-1", "agent_id": "main",'
        ' "ts": 1767225601000, "tool_call_id": "call-1", "tool_name": "read", "params": {"path": "a"},'
        ' "result": {"content": [{"type": "text", "text": "x"}], "details": {"bytes": 1}}}',
    ),
    (
        "error naming an unknown tool",
        '{"type": "tool_result", "run_id": "run-1", "seq": 10, "gateway_id": "gw-1",'
        ' "tool_name": "Web_Search", "params": {"q": "x"}, "error": "Unknown tool: Web_Search"}',
    ),
    (
        "the guard's veto: no result_hash",
        '{"type": "tool_result", "run_id": "run-1", "seq": 11,'
        ' "gateway_id": "gw-1", "tool_name": "read", "params": {}, "result": {"details": {"status": "blocked",'
        ' "deniedReason": "tool-loop"}}}',
    ),
    (
        "result absent",
        '{"type": "tool_result", "run_id": "run-1", "seq": 12, "gateway_id": "gw-1",'
        ' "tool_name": "read", "params": {}}',
    ),
    (
        "exec result",
        '{"type": "tool_result", "run_id": "run-3", "seq": 1, "gateway_id": "gw-\u00fc",'
        ' "tool_name": "bash", "params": {"command": "make"}, "result": {"details": {"status": "completed",'
        ' "exitCode": 2, "aggregated": "error: x"}}}',
    ),
    (
        "compaction retry is sent as it is",
        '{"type": "compaction_retry", "run_id": "run-1", "seq": 13, "gateway_id": "gw-1", "ts": 9}',
    ),
    ("run end is sent as it is", '{"type": "run_end", "run_id": "run-1", "seq": 14, "gateway_id": "gw-1"}'),
]

GATEWAYS = [
    "gw-1",
    "gw-2",
    "gw-3",
    "gw-4",
    "gw-5",
    "gw-6",
    "gw-7",
    "gw-8",
    "gw-9",
    "gw-10",
    "gw-11",
    "gw-12",
    "gateway",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "abcdef",
    "abcdefg",
    "GW-1",
    "prod-eu-west-1/gateway-07",
    "openclaw-host-3.example.internal",
    "x" * 100,
] + [
    "gw-\u00fc",
    "caf\u00e9",
    "\u03a9",
    "\u7f51\u5173-1",
    "\u30b2\u30fc\u30c8\u30a6\u30a7\u30a4",
    "\U0001f600-gw",
    "gw-\U0001f680\U0001f680",
    "\u00e9\u00e9\u00e9",
    "\u0627\u0644\u0628\u0648\u0627\u0628\u0629",
]
PARTITIONS = (8, 12)


def _value(text: str | None):
    """JSON text as the Python side reads it: a wire value, floats in their JavaScript spelling."""
    return json.loads(text, parse_float=js_float_literal)


def build() -> dict[str, dict]:
    canonical = []
    for name, text in CANONICAL:
        c = canon_exact(json.loads(text))
        assert canon(_value(text)) == c, name
        canonical.append(
            {"name": name, "input": text, "canonical": c.decode("utf-8"), "sha256": hashlib.sha256(c).hexdigest()}
        )

    calls = []
    for name, tool, params in CALLS:
        ev = '{"type":"tool_call","run_id":"r","seq":0,"gateway_id":"g","tool_name":' + json.dumps(tool)
        ev += ("," + '"params":' + params if params is not None else "") + "}"
        fp = fingerprint(decode_event(ev))
        v = {"name": name, "tool_name": tool}
        if params is not None:
            v["params"] = params
        v.update({"args_hash": fp.args_hash, "known_poll": fp.known_poll})
        calls.append(v)

    outcomes = []
    for name, tool, params, result, error in OUTCOMES:
        ev = '{"type":"tool_result","run_id":"r","seq":0,"gateway_id":"g","tool_name":' + json.dumps(tool)
        for k, t in (("params", params), ("result", result), ("error", error)):
            if t is not None:
                ev += f',"{k}":{t}'
        fp = fingerprint(decode_event(ev + "}"))
        v = {"name": name, "tool_name": tool}
        for k, t in (("params", params), ("result", result), ("error", error)):
            if t is not None:
                v[k] = t
        v["result_hash"] = fp.result_hash if isinstance(fp.result_hash, str) else None
        v["unknown_tool_name"] = fp.unknown_tool_name if isinstance(fp.unknown_tool_name, str) else None
        outcomes.append(v)

    fingerprints = [
        {"name": name, "event": text, "privacy_event": json.loads(encode(fingerprint(decode_event(text))))}
        for name, text in FINGERPRINTS
    ]

    partitions = [
        {"gateway_id": g, "utf8_hex": g.encode().hex(), **{f"partition_{n}": partition_for(g, n) for n in PARTITIONS}}
        for g in GATEWAYS
    ]

    return {
        "canonical.json": {
            "about": "canon(JSON.parse(input)) == canonical; sha256 = SHA-256 hex of the UTF-8 bytes of canonical "
            "(digest in semantics.md section 2). Inputs are JSON text, to be parsed by the language's "
            "own JSON parser (numbers to IEEE-754 doubles).",
            "vectors": canonical,
        },
        "calls.json": {
            "about": "Call signatures: args_hash = normalized tool name + ':' + digest(normalized params), and "
            "known_poll. params is JSON text; when absent the call has no params (digested as the bare "
            "word undefined). tool_name is the raw name the gateway saw.",
            "vectors": calls,
        },
        "outcomes.json": {
            "about": "Outcome digests: result_hash (null: no outcome digest) and unknown_tool_name (null: none) "
            "of a tool_result with the given tool_name and, where present, params, result and error "
            "(each JSON text; an absent key is an absent value, JSON null is null).",
            "vectors": outcomes,
        },
        "fingerprints.json": {
            "about": "Privacy mode: event is a raw event as JSON text; privacy_event is exactly what a client in "
            "privacy mode sends for it (compare as JSON objects, key order free): params, result and "
            "error replaced by args_hash, known_poll (calls), result_hash and unknown_tool_name "
            "(results, each only when there is one); every other field as given, null defaults "
            "included; compaction_retry and run_end unchanged.",
            "vectors": fingerprints,
        },
        "partitions.json": {
            "about": "Decisions partition of a gateway id: Kafka's default partitioner for a keyed record, "
            "(murmur2(UTF-8 bytes of the id) & 0x7fffffff) % partitions, with murmur2 as Kafka's "
            "Java client computes it (signed 32-bit, seed 0x9747b28c).",
            "partitions": list(PARTITIONS),
            "vectors": partitions,
        },
    }


# --- independent cross-checks ------------------------------------------------------------

_NODE_CHECK = r"""
const fs = require('fs'), crypto = require('crypto');
// A second canonical JSON, in JavaScript: JSON.stringify formats numbers and strings,
// keys sorted with the default sort (UTF-16 code units), lone surrogates removed first.
const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
function canon(v) {
  if (v === null || typeof v !== 'object') {
    return JSON.stringify(typeof v === 'string' ? v.replace(lone, '') : v);
  }
  if (Array.isArray(v)) return '[' + v.map(canon).join(',') + ']';
  return '{' + Object.keys(v).sort().map(k => JSON.stringify(k.replace(lone, '')) + ':' + canon(v[k])).join(',') + '}';
}
const vectors = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')).vectors;
let bad = 0;
for (const t of vectors) {
  const c = canon(JSON.parse(t.input));
  const h = crypto.createHash('sha256').update(c, 'utf8').digest('hex');
  if (c !== t.canonical || h !== t.sha256) { bad++; console.log('MISMATCH', t.name, c, h); }
}
console.log(JSON.stringify({checked: vectors.length, mismatches: bad}));
process.exit(bad ? 1 : 0);
"""


def check_with_node(canonical_file: Path) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".js", delete=False) as f:
        f.write(_NODE_CHECK)
    try:
        out = subprocess.run(["node", f.name, str(canonical_file)], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        raise SystemExit(f"node disagrees on canonical JSON or SHA-256:\n{out.stdout}{out.stderr}")
    return out.stdout.strip()


def _kafka_clients_jar() -> Path:
    jars = sorted(Path.home().glob(".cache/loopwarden/kafka-*/libs/kafka-clients-*.jar"))
    if not jars:
        raise SystemExit("no kafka-clients jar under ~/.cache/loopwarden: run scripts/kafka fetch")
    return jars[-1]


def check_with_java(vectors: dict) -> str:
    jar = _kafka_clients_jar()
    cp = os.pathsep.join([str(jar)] + [str(p) for p in jar.parent.glob("slf4j-api-*.jar")])
    stdin = "".join(f"{v['utf8_hex']}\n" for v in vectors["vectors"])
    out = subprocess.run(
        ["java", "-cp", cp, str(HERE / "KafkaPartitions.java"), *map(str, vectors["partitions"])],
        input=stdin,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"java failed:\n{out.stderr}")
    lines = out.stdout.splitlines()
    assert len(lines) == len(vectors["vectors"]), out.stdout
    for v, line in zip(vectors["vectors"], lines, strict=True):
        hex_key, m, *parts = line.split()
        assert hex_key == v["utf8_hex"], (hex_key, v)
        v["murmur2"] = int(m)
        for n, p in zip(vectors["partitions"], parts, strict=True):
            if int(p) != v[f"partition_{n}"]:
                raise SystemExit(
                    f"Kafka's partitioner puts {v['gateway_id']!r} on {p} of {n}, Python on {v[f'partition_{n}']}"
                )
    return f"{len(lines)} gateway ids x {len(vectors['partitions'])} partition counts agree with {jar.name}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="cross-check the committed files; write nothing")
    args = ap.parse_args()
    if args.check:
        files = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in HERE.glob("*.json")}
        committed = [v["murmur2"] for v in files["partitions.json"]["vectors"]]
        print("node:", check_with_node(HERE / "canonical.json"))
        print("java:", check_with_java(files["partitions.json"]))
        if committed != [v["murmur2"] for v in files["partitions.json"]["vectors"]]:
            raise SystemExit("committed murmur2 values differ from Kafka's")
        return
    files = build()
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "canonical.json"
        p.write_text(json.dumps(files["canonical.json"], ensure_ascii=False), encoding="utf-8")
        print("node:", check_with_node(p))
    print("java:", check_with_java(files["partitions.json"]))
    for name, content in files.items():
        (HERE / name).write_text(json.dumps(content, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print("wrote", HERE.relative_to(ROOT) / name, len(content["vectors"]), "vectors")


if __name__ == "__main__":
    main()
