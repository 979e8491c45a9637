// The client without a broker: the usage event and its checks (the worker's limits), the
// failed flag of privacy mode, remembered aborts and shadow runs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { GatewayClient, LoopwardenError, type Decision } from "../src/client.ts";
import type { WireEvent } from "../src/fingerprint.ts";

const GW = "gw-c";

/** A client that is never started: what it would send is caught at encode(). */
function offline(opts: { privacy?: boolean; failPolicy?: "fail-open" | "fail-closed" } = {}) {
  const client = new GatewayClient({ bootstrap: "127.0.0.1:1", gatewayId: GW, agentId: "main", timeoutMs: 50, ...opts });
  const encoded: WireEvent[] = [];
  const encode = client.encode.bind(client);
  client.encode = (ev) => {
    const out = encode(ev);
    encoded.push(JSON.parse(out.value.toString("utf8")));
    return out;
  };
  return { client, encoded };
}

function decision(fields: Partial<Decision>): Decision {
  return {
    run_id: "r", seq: 1, gateway_id: GW, agent_id: null, tool_call_id: null, tool_name: "read", ts: null,
    event_id: `${fields.run_id ?? "r"}:${fields.seq ?? 1}`, action: "allow", level: "none", detector: null, count: null,
    message: null, warning_key: null, paired_tool_name: null, args_hash: null, config_hash: "h", fleet_signal: null,
    enforced: true, shadow_action: null, ...fields,
  };
}

const deliver = (c: GatewayClient, d: Decision) => c.deliver(Buffer.from(JSON.stringify(d)));

test("usage: the event as the wire has it, amounts defaulting to 0", async () => {
  const { client, encoded } = offline();
  await assert.rejects(client.usage("run-1", { inputTokens: 1200, outputTokens: 300, costUsd: 0.0125, model: "m-1" }),
    /not started/);
  await assert.rejects(client.usage("run-1", { agentId: "trial", sessionId: "s-1" }), /not started/);
  await assert.rejects(client.usage("run-1", { inputTokens: Number.MAX_SAFE_INTEGER, costUsd: 1e9 }), /not started/);
  const [a, b, c] = encoded;
  assert.equal(a.type, "usage");
  assert.deepEqual(
    { ...a, seq: 0, ts: 0 },
    { type: "usage", run_id: "run-1", seq: 0, gateway_id: GW, agent_id: "main", session_id: null, ts: 0,
      input_tokens: 1200, output_tokens: 300, cost_usd: 0.0125, model: "m-1" },
  );
  assert.ok(Number.isSafeInteger(a.seq) && b.seq > a.seq && typeof a.ts === "number");
  assert.deepEqual([b.input_tokens, b.output_tokens, b.cost_usd, b.model, b.agent_id, b.session_id],
    [0, 0, 0, null, "trial", "s-1"]);
  assert.deepEqual([c.input_tokens, c.cost_usd], [Number.MAX_SAFE_INTEGER, 1e9]);
  // privacy mode leaves a usage event as it is
  const raw = offline({ privacy: false });
  await assert.rejects(raw.client.usage("run-1", { inputTokens: 5, costUsd: 2 }), /not started/);
  assert.deepEqual({ ...raw.encoded[0], seq: 0, ts: 0 }, { ...a, seq: 0, ts: 0, input_tokens: 5, output_tokens: 0, cost_usd: 2,
    model: null });
});

test("usage: amounts the worker would dead-letter are refused before sending", async () => {
  const { client, encoded } = offline();
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ inputTokens: -1 }, /inputTokens must be an integer from 0 to 2\^53 - 1, got -1/],
    [{ inputTokens: 1.5 }, /inputTokens .* got 1\.5/],
    [{ outputTokens: 2 ** 53 }, /outputTokens .* got 9007199254740992/],
    [{ outputTokens: Number.NaN }, /outputTokens .* got NaN/],
    [{ inputTokens: "12" }, /inputTokens .* got "12"/],
    [{ inputTokens: 12n }, /inputTokens .* got 12n/],
    [{ inputTokens: null }, /inputTokens .* got null/],
    [{ costUsd: -0.01 }, /costUsd must be a finite number from 0 to 1e9, got -0\.01/],
    [{ costUsd: 1e9 + 1 }, /costUsd .* got 1000000001/],
    [{ costUsd: Number.POSITIVE_INFINITY }, /costUsd .* got Infinity/],
    [{ costUsd: Number.NaN }, /costUsd .* got NaN/],
    [{ costUsd: "0.1" }, /costUsd .* got "0\.1"/],
    [{ model: 7 }, /model must be a string or null, got 7/],
  ];
  for (const [usage, message] of bad) {
    await assert.rejects(client.usage("run-1", usage as never), (e: Error) => e instanceof LoopwardenError && message.test(e.message),
      JSON.stringify(usage, (_k, v) => (typeof v === "bigint" ? `${v}n` : v)));
  }
  assert.equal(encoded.length, 0); // nothing was even encoded
  await assert.rejects(client.usage("run-1", { costUsd: -0 }), /not started/); // -0 is 0
  assert.equal(encoded[0].cost_usd, 0);
  assert.equal(Object.is(encoded[0].cost_usd, -0), false);
});

test("privacy mode sends failed: true on the result of a tool that failed, raw mode the error", async () => {
  for (const privacy of [true, false]) {
    const { client, encoded } = offline({ privacy });
    const failures: { result?: unknown; error?: unknown }[] = [{ error: "ENOENT: no such file" }, { error: null },
      { error: { code: 503 } }];
    for (const outcome of failures) await assert.rejects(client.result("r", "read", { path: "a" }, outcome), /not started/);
    await assert.rejects(client.result("r", "read", { path: "a" }, { result: { content: [] } }), /not started/);
    assert.equal((await client.check("r", "read", { path: "a" })).degraded, true); // encoded, not sent
    const [e1, e2, e3, ok, call] = encoded;
    if (privacy) {
      for (const e of [e1, e2, e3]) {
        assert.equal(e.failed, true);
        assert.ok(e.result_hash?.startsWith("error:"));
        assert.ok(!("error" in e) && !("params" in e));
      }
    } else {
      assert.deepEqual([e1.error, e2.error, e3.error], ["ENOENT: no such file", null, { code: 503 }]);
      for (const e of [e1, e2, e3]) assert.ok(!("failed" in e));
    }
    assert.ok(!("failed" in ok) && !("failed" in call), "only a failed result says failed");
  }
  // An event published as given keeps its own flag (an already hashed result, say).
  const { client, encoded } = offline();
  client.encode({ type: "tool_result", run_id: "r", seq: 3, gateway_id: GW, tool_name: "read", args_hash: "read:x",
    result_hash: "error:y", failed: true });
  assert.equal(encoded[0].failed, true);
});

test("an abort received for a run is remembered: the next check returns it at once, nothing sent", async () => {
  const { client, encoded } = offline();
  const abort = decision({ run_id: "r-abort", seq: 7, tool_name: null, action: "abort", level: "critical",
    detector: "run_budget", count: 2000, warning_key: "budget:tokens", message: "Run aborted: its tokens budget is spent" });
  deliver(client, abort);
  deliver(client, decision({ run_id: "r-abort", seq: 8, action: "abort", detector: "operator_stop" })); // the first stays
  const t0 = Date.now();
  assert.deepEqual(await client.check("r-abort", "read", { path: "a" }), abort);
  assert.ok(Date.now() - t0 < 40, "answered without waiting");
  assert.equal(encoded.length, 0);
  const other = await client.check("r-other", "read", { path: "a" }); // not started: the policy answers
  assert.deepEqual([other.action, other.degraded, other.enforced, other.fleet_signal, other.shadow_action],
    ["allow", true, true, null, null]);
  // A decision for another gateway (sharing the partition) is skipped.
  deliver(client, decision({ run_id: "r-foreign", gateway_id: "gw-else", action: "abort" }));
  assert.equal(client.aborted.has("r-foreign"), false);
  assert.equal(client.foreign, 1);
});

test("a spend cap's pause (fleet_spend_cap) is no abort of the run: not remembered, the next check asks again", async () => {
  const { client, encoded } = offline();
  const pause = decision({ run_id: "r-pause", seq: 3, action: "abort", level: "critical", detector: "fleet_spend_cap",
    count: 3, warning_key: "spend:calls:calls", fleet_signal: "calls:main:0",
    message: "Paused: the fleet spend cap calls is reached for agent main (calls: 3 used of 3 in its window); ..." });
  deliver(client, pause);
  assert.equal(client.aborted.has("r-pause"), false);
  const next = await client.check("r-pause", "read", { path: "a" }); // asked again: not started, the policy answers
  assert.deepEqual([next.action, next.degraded, next.detector], ["allow", true, null]);
  assert.deepEqual(encoded.map((e) => [e.type, e.run_id]), [["tool_call", "r-pause"]]);
  // A run budget's abort of the same run is still its end.
  deliver(client, decision({ run_id: "r-pause", seq: 4, action: "abort", detector: "run_budget", message: "Run aborted" }));
  assert.equal(client.aborted.get("r-pause")?.detector, "run_budget");
});

test("shadow: a decision not enforced is no abort, and a shadow run is not blocked by fail-closed", async () => {
  const { client } = offline({ failPolicy: "fail-closed" });
  deliver(client, decision({ run_id: "r-shadow", action: "allow", level: "critical", detector: "generic_repeat",
    enforced: false, shadow_action: "abort" }));
  assert.equal(client.aborted.has("r-shadow"), false);
  assert.ok(client.shadow.has("r-shadow"));
  const d = await client.check("r-shadow", "read", { path: "a" });
  assert.deepEqual([d.action, d.enforced, d.shadow_action, d.degraded], ["allow", false, "block", true]);
  assert.match(d.message!, /blocked \(fail-closed\); not enforced \(shadow run\)$/);
  const e = await client.check("r-enforced", "read", { path: "a" });
  assert.deepEqual([e.action, e.enforced, e.shadow_action], ["block", true, null]);
  // A stop order on a shadow run comes enforced, and is remembered.
  deliver(client, decision({ run_id: "r-shadow", seq: 9, action: "abort", detector: "operator_stop", fleet_signal: "o-1" }));
  assert.equal(client.aborted.get("r-shadow")?.fleet_signal, "o-1");
});

test("publish passes a usage event through as given (conformance scenarios use it)", () => {
  const { client, encoded } = offline();
  const ev: WireEvent = { type: "usage", run_id: "bud-a", seq: 6, gateway_id: GW, model: "m-1", input_tokens: 0,
    output_tokens: 100 };
  client.encode(ev);
  assert.deepEqual(encoded[0], { ...ev, agent_id: null, session_id: null, ts: null });
});
