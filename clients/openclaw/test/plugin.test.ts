// The plugin without a worker: its config schema, the hooks it registers, what each kind
// of decision does to a call run through OpenClaw's own hook runner (scripted decisions),
// and the fail policy when Kafka cannot be reached.
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { test } from "node:test";
import { GatewayClient, type Decision } from "../src/client.ts";
import { hostStopTurn } from "../src/index.ts";
import { ConfigError, createHooks, resolveConfig, usageOf, type StopTurn } from "../src/plugin.ts";
import { AgentRun, install, loadPlugin } from "./host.ts";

const output = (text: string) => ({ content: [{ type: "text", text }], details: { bytes: text.length } });

test("config: defaults from the manifest's schema, every mistake named", () => {
  const c = resolveConfig({ bootstrap: "k1:9092,k2:9092" });
  assert.deepEqual(
    { ...c },
    {
      bootstrap: "k1:9092,k2:9092", gatewayId: hostname(), topicPrefix: "loopwarden.", timeoutMs: 2000,
      failPolicy: "fail-open", privacy: true, securityProtocol: "PLAINTEXT", saslMechanism: "PLAIN", maxEventBytes: 1048576,
    },
  );
  assert.throws(() => resolveConfig({}), (e: Error) => e instanceof ConfigError && /bootstrap/.test(e.message));
  assert.throws(() => resolveConfig({ bootstrap: "k:1", failPolicy: "maybe" }), /failPolicy must be equal to one of/);
  assert.throws(() => resolveConfig({ bootstrap: "k:1", timeoutMs: 0 }), /timeoutMs must be >= 1/);
  assert.throws(() => resolveConfig({ bootstrap: "k:1", bootstrapServers: "x" }), /additional properties/);
  assert.throws(() => resolveConfig({ bootstrap: "k:1", securityProtocol: "SASL_SSL" }), /needs saslUsername and saslPassword/);
  const sasl = resolveConfig({ bootstrap: "k:1", securityProtocol: "SASL_SSL", saslMechanism: "SCRAM-SHA-512",
    saslUsername: "u", saslPassword: "p", gatewayId: "gw-7", privacy: false, failPolicy: "fail-closed" });
  assert.equal(sasl.gatewayId, "gw-7");
  assert.equal(sasl.privacy, false);
});

test("register: the eight hooks and the tool-result middleware, on OpenClaw's plugin api", () => {
  const { typedHooks, middlewares, logs } = loadPlugin({ bootstrap: "127.0.0.1:1", gatewayId: "gw-reg" });
  assert.deepEqual(typedHooks.map((h) => h.hookName).sort(),
    ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_start", "gateway_stop",
      "llm_output", "tool_result_persist"]);
  assert.equal(middlewares.length, 1);
  assert.match(logs[0].message, /gateway gw-reg on 127\.0\.0\.1:1 .*fail-open, timeout 2000 ms, privacy on/);
});

/** A client that answers from a script (an action, or the decision's fields) and records
 * what the hooks sent; each decision is also read by the client as one from the decisions
 * topic (so an abort is remembered as the real client remembers it). */
function scripted(script: (Decision["action"] | Partial<Decision>)[]) {
  const client = new GatewayClient({ bootstrap: "127.0.0.1:1", gatewayId: "gw-s" });
  const sent: string[] = [];
  let n = 0;
  const check = client.check.bind(client);
  Object.assign(client, {
    start: async () => client,
    close: async () => undefined,
    check: async (runId: string, tool: string) => {
      const held = client.aborted.get(runId);
      if (held) return check(runId, tool); // the real client's answer, nothing sent
      const step = script[n++];
      const fields = typeof step === "string" ? { action: step } : step;
      sent.push(`call ${tool}`);
      const d: Decision = { ...client.fallback({ type: "tool_call", run_id: runId, seq: n, gateway_id: "gw-s", tool_name: tool }),
        degraded: undefined, message: `${fields.action} #${n} from loopwarden`, ...fields };
      client.deliver(Buffer.from(JSON.stringify(d)));
      return d;
    },
    usage: async (runId: string, u: Record<string, unknown>) => void sent.push(`usage ${runId} ${JSON.stringify(u)}`),
    result: async (_r: string, tool: string, _p: unknown, o: { result?: unknown; error?: unknown }) => {
      sent.push(`result ${tool} ${"error" in o ? "error" : JSON.stringify((o.result as { content: unknown }).content)}`);
    },
    compactionRetry: async () => void sent.push("compaction"),
    endRun: async () => void sent.push("end"),
  });
  return { client, sent };
}

for (const middleware of [true, false]) {
  test(`decisions: allow runs, warn runs and shows the message, block and abort stop the call (${middleware ? "tool-result middleware" : "transcript only"})`, async () => {
    const { client, sent } = scripted(["allow", "warn", "block", "abort"]);
    const logs: string[] = [];
    const log = (m: string) => logs.push(m);
    const hooks = createHooks(resolveConfig({ bootstrap: "127.0.0.1:1", gatewayId: "gw-s" }), { info: log, warn: log, error: log }, client);
    const { client: _c, tool_result_middleware, ...handlers } = hooks;
    const runner = install(Object.entries(handlers).map(([hookName, handler]) => ({ pluginId: "loopwarden", hookName, handler, source: "test" })));
    const run = new AgentRun(runner, "run-s", middleware ? [tool_result_middleware as never] : []);

    const a = await run.call("read", { path: "a" }, () => output("same"));
    assert.deepEqual([a.ran, a.text, a.persistedText], [true, "same", "same"]);
    const w = await run.call("read", { path: "a" }, () => output("same"));
    const warned = "same\n[loopwarden] warn #2 from loopwarden";
    assert.deepEqual([w.ran, w.text, w.persistedText], [true, middleware ? warned : "same", warned]);
    const b = await run.call("read", { path: "a" }, () => output("same"));
    assert.deepEqual([b.ran, b.text, b.persistedText], [false, "block #3 from loopwarden", "block #3 from loopwarden"]);
    const x = await run.call("exec", { command: "make" }, () => output("never"));
    assert.deepEqual([x.ran, x.text], [false, "abort #4 from loopwarden"]);
    await run.compacted();
    await run.end();
    // The tool's own results are sent (not the warning appended to one); the blocked calls
    // are not part of the history.
    const same = `result read ${JSON.stringify(output("same").content)}`;
    assert.deepEqual(sent, ["call read", same, "call read", same, "call read", "call exec", "compaction", "end"]);
  });
}

/** The hooks on a scripted client, run by OpenClaw's hook runner. */
function scriptedRun(script: Parameters<typeof scripted>[0], runId = "run-s", stopTurn?: StopTurn) {
  const { client, sent } = scripted(script);
  const logs: { level: string; message: string }[] = [];
  const at = (level: string) => (message: string) => void logs.push({ level, message });
  const hooks = createHooks(resolveConfig({ bootstrap: "127.0.0.1:1", gatewayId: "gw-s" }),
    { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") }, client, stopTurn);
  const { client: _c, tool_result_middleware, ...handlers } = hooks;
  const runner = install(Object.entries(handlers).map(([hookName, handler]) => ({ pluginId: "loopwarden", hookName, handler, source: "test" })));
  return { run: new AgentRun(runner, runId, [tool_result_middleware as never]), runner, sent, logs, client };
}

test("shadow: a decision not enforced runs the call as allow, shows the model nothing, logs its shadow_action at debug", async () => {
  const shadow = (shadow_action: Decision["shadow_action"], level: Decision["level"], detector: string | null) =>
    ({ action: "allow" as const, enforced: false, shadow_action, level, detector, message: detector && `${detector} says ${shadow_action}` });
  const { run, sent, logs } = scriptedRun([
    shadow("allow", "none", null), shadow("warn", "warning", "generic_repeat"), shadow("block", "critical", "generic_repeat"),
    shadow("abort", "critical", "run_budget"),
    { action: "block", enforced: false, shadow_action: "block" }, // not enforced wins, whatever the action says
  ]);
  for (let i = 0; i < 5; i++) {
    const r = await run.call("read", { path: "a" }, () => output("same"));
    assert.deepEqual([r.ran, r.text, r.persistedText], [true, "same", "same"], `call ${i + 1}`);
  }
  assert.equal(sent.filter((s) => s.startsWith("result read")).length, 5); // every call is part of the history
  const debug = logs.filter((l) => l.level === "debug").map((l) => l.message);
  assert.equal(debug.length, 5);
  assert.match(debug[0], /^loopwarden shadow allow read in run run-s \(no detector, not enforced; allowed\)$/);
  assert.match(debug[1], /^loopwarden shadow warn read in run run-s \(generic_repeat, not enforced; allowed\): generic_repeat says warn$/);
  assert.match(debug[2], /^loopwarden shadow block read /);
  assert.match(debug[3], /^loopwarden shadow abort read .*\(run_budget, /);
  assert.deepEqual(logs.filter((l) => l.level !== "debug"), []);
});

test("a fleet block is shown to the model like any block; an operator's stop aborts like any abort", async () => {
  const fleet = { action: "block" as const, level: "critical" as const, detector: "fleet_tool_breaker", fleet_signal: "web_fetch:error:x:1",
    message: "Blocked: web_fetch is failing across the fleet (24 runs on 5 gateways hit the same error within 300 s)" };
  const stop = { action: "abort" as const, level: "critical" as const, detector: "operator_stop", fleet_signal: "stop-1",
    message: "incident 42: stop every run of this agent" };
  const { run, sent, logs } = scriptedRun([fleet, stop]);
  const b = await run.call("web_fetch", { url: "https://example.test" }, () => output("never"));
  assert.deepEqual([b.ran, b.text, b.result.details?.status], [false, fleet.message, "blocked"]);
  const s = await run.call("read", { path: "a" }, () => output("never"));
  assert.deepEqual([s.ran, s.text, s.result.details?.status], [false, stop.message, "blocked"]);
  assert.deepEqual(sent, ["call web_fetch", "call read"]); // blocked calls are no part of the history
  assert.match(logs[0].message, /^loopwarden block web_fetch in run run-s \(fleet_tool_breaker\): Blocked: web_fetch is failing/);
  assert.match(logs[1].message, /^loopwarden abort read in run run-s \(operator_stop\): incident 42/);
});

const PAUSE = { action: "abort" as const, level: "critical" as const, detector: "fleet_spend_cap", count: 3,
  warning_key: "spend:calls:calls", fleet_signal: "calls:main:1796860800000",
  message: "Paused: the fleet spend cap calls is reached for agent main (calls: 3 used of 3 in its window); tool calls " +
    "are paused until the window ends at 2026-12-04T00:00:00Z, unless an operator lifts the cap sooner. The run is not aborted." };

test("a spend cap's pause blocks the call with its message and stops the current turn; later calls are judged again", async () => {
  const stops: Parameters<StopTurn>[0][] = [];
  const stopTurn: StopTurn = (target) => (stops.push(target), true);
  const { run, sent, logs, client } = scriptedRun(["allow", PAUSE, PAUSE, "allow"], "run-p", stopTurn);
  const a = await run.call("read", { path: "a" }, () => output("contents"));
  assert.deepEqual([a.ran, stops.length], [true, 0]);
  const p = await run.call("exec", { command: "make" }, () => output("never"));
  assert.deepEqual([p.ran, p.text, p.persistedText, p.result.details?.status], [false, PAUSE.message, PAUSE.message, "blocked"]);
  assert.deepEqual(stops, [{ runId: "run-p", sessionId: "session-run-p", sessionKey: "agent:main:run-p" }]);
  assert.equal(client.aborted.has("run-p"), false); // paused, not ended
  // Where the turn went on (or a later turn of the run): each call is sent and judged again,
  // paused while the cap is in force, run once it is lifted.
  const again = await run.call("exec", { command: "make" }, () => output("never"));
  assert.deepEqual([again.ran, again.text], [false, PAUSE.message]);
  const lifted = await run.call("exec", { command: "make" }, () => output("built"));
  assert.deepEqual([lifted.ran, lifted.text], [true, "built"]);
  assert.equal(stops.length, 2);
  const result = (tool: string, text: string) => `result ${tool} ${JSON.stringify(output(text).content)}`;
  // every call was sent; the paused ones are no part of the run's history
  assert.deepEqual(sent, ["call read", result("read", "contents"), "call exec", "call exec", "call exec", result("exec", "built")]);
  assert.match(logs[0].message,
    /^loopwarden pause exec in run run-p \(fleet_spend_cap; the current turn is stopped\): Paused: the fleet spend cap calls/);
  assert.equal(logs[0].level, "warn");
});

test("a pause where the turn cannot be stopped (no way to, no active run, a failure) still blocks the call", async () => {
  for (const [stopTurn, said] of [
    [undefined, "the turn goes on: no way to stop it here"],
    [() => false, "the turn goes on: OpenClaw had no active run to stop"],
    [() => { throw new Error("host gone"); }, "the turn goes on: stopping it failed: host gone"],
  ] as [StopTurn | undefined, string][]) {
    const { run, logs } = scriptedRun([PAUSE], "run-q", stopTurn);
    const p = await run.call("exec", { command: "make" }, () => output("never"));
    assert.deepEqual([p.ran, p.text], [false, PAUSE.message]);
    assert.equal(logs[0].message, `loopwarden pause exec in run run-q (fleet_spend_cap; ${said}): ${PAUSE.message}`);
  }
});

test("hostStopTurn: OpenClaw's own abort of the session's active run (what /stop takes), found by session id or key", async () => {
  const { setActiveEmbeddedRun, clearActiveEmbeddedRun } = await import("openclaw/plugin-sdk/agent-harness-runtime");
  const aborted: string[] = [];
  const handle = (sessionId: string) => ({
    runId: `run-of-${sessionId}`, queueMessage: async () => undefined, isStreaming: () => true, isCompacting: () => false,
    abort: () => void aborted.push(sessionId),
  });
  const h1 = handle("session-run-h");
  setActiveEmbeddedRun("session-run-h", h1 as never, "agent:main:run-h");
  const logs: string[] = [];
  const log = (m: string) => void logs.push(m);
  const stop = hostStopTurn({ info: log, warn: log, error: log });
  try {
    // Through the plugin, OpenClaw's hook runner and tool wrapper: the call is blocked with the
    // pause's message and the session's active run is aborted.
    const { run } = scriptedRun([PAUSE], "run-h", stop);
    const p = await run.call("exec", { command: "make" }, () => output("never"));
    assert.deepEqual([p.ran, p.text, aborted], [false, PAUSE.message, ["session-run-h"]]);
    assert.equal(await stop({ runId: "run-h", sessionKey: "agent:main:run-h" }), true); // by key
    assert.equal(await stop({ runId: "run-x", sessionId: "session-none" }), false); // no active run there
    assert.deepEqual(aborted, ["session-run-h", "session-run-h"]);
    assert.deepEqual(logs, []);
  } finally {
    clearActiveEmbeddedRun("session-run-h", h1 as never, "agent:main:run-h");
  }
});

test("section 12's blocks (failure_repeat, cycle) reach the model with their message, and the run goes on", async () => {
  const failing = { action: "block" as const, level: "critical" as const, detector: "failure_repeat", count: 3,
    message: "Blocked: edit failed 3 times in a row with identical arguments and the same error." };
  const cycle = { action: "block" as const, level: "critical" as const, detector: "cycle", count: 10,
    message: "Blocked: calling open now would start another round of a cycle of calls that kept getting the same outputs (10 calls)." };
  const { run, sent, logs } = scriptedRun([failing, cycle, "allow"]);
  const f = await run.call("edit", { path: "a.py", old: "x" }, () => output("never"));
  assert.deepEqual([f.ran, f.text, f.result.details?.status], [false, failing.message, "blocked"]);
  const c = await run.call("open", { path: "a.py" }, () => output("never"));
  assert.deepEqual([c.ran, c.text, c.result.details?.status], [false, cycle.message, "blocked"]);
  const r = await run.call("read", { path: "b.py" }, () => output("contents"));
  assert.deepEqual([r.ran, r.text], [true, "contents"]); // a block is no abort: the run goes on
  assert.match(logs[0].message, /^loopwarden block edit in run run-s \(failure_repeat\): Blocked: edit failed 3 times/);
  assert.match(logs[1].message, /^loopwarden block open in run run-s \(cycle\): Blocked: calling open/);
  assert.deepEqual(sent.slice(0, 3), ["call edit", "call open", "call read"]);
});

test("llm_output: the attempt's usage is reported, cached prompt tokens as input, the cost when OpenClaw priced it", async () => {
  const { run, sent } = scriptedRun([]);
  await run.llmOutput({ input: 700, cacheRead: 150, cacheWrite: 50, output: 100, total: 1000 });
  await run.llmOutput({ input: 0, output: 0 }); // nothing used: nothing sent
  await run.llmOutput({ total: 42 }, "other");
  await run.runner.runLlmOutput({ runId: "run-s", sessionId: "s", provider: "p", model: "m", assistantTexts: [],
    usage: { input: 10, output: 5, cost: { total: 0.0125 } } as never }, { ...run.ctx });
  await run.runner.runLlmOutput({ runId: "run-s", sessionId: "s", provider: "p", model: "m", assistantTexts: [] }, { ...run.ctx });
  const usage = (u: object) => `usage run-s ${JSON.stringify({ ...u, agentId: "main", sessionId: "session-run-s" })}`;
  assert.deepEqual(sent, [
    usage({ inputTokens: 900, outputTokens: 100, costUsd: 0, model: "test/scripted-1" }),
    usage({ inputTokens: 42, outputTokens: 0, costUsd: 0, model: "test/other" }),
    usage({ inputTokens: 10, outputTokens: 5, costUsd: 0.0125, model: "m" }),
  ]);
  // what OpenClaw may hand over that the wire cannot take is left out, never thrown
  assert.deepEqual(usageOf({ usage: { input: -3, output: 2.7, cacheRead: Number.NaN, cost: { total: -1 } } as never }),
    { inputTokens: 0, outputTokens: 2, costUsd: 0, model: null });
  assert.equal(usageOf({ usage: { cost: { total: Number.POSITIVE_INFINITY } } as never }), undefined);
  assert.equal(usageOf({}), undefined);
});

test("an abort the client holds (a usage event's) blocks the run's next calls at once, even with Kafka out of reach", async () => {
  const logs: string[] = [];
  const log = (m: string) => void logs.push(m);
  const hooks = createHooks(resolveConfig({ bootstrap: "127.0.0.1:1", gatewayId: "gw-held", timeoutMs: 2000 }),
    { info: log, warn: log, error: log });
  const abort = { ...hooks.client.fallback({ type: "usage", run_id: "run-held", seq: 5, gateway_id: "gw-held" }),
    tool_name: null, action: "abort", level: "critical", detector: "run_budget", count: 2000, warning_key: "budget:tokens",
    message: "Run aborted: its tokens budget is spent (2000 tokens used of 2000 tokens)", degraded: undefined };
  hooks.client.deliver(Buffer.from(JSON.stringify(abort)));
  const { client: _c, tool_result_middleware: _m, ...handlers } = hooks;
  const runner = install(Object.entries(handlers).map(([hookName, handler]) => ({ pluginId: "loopwarden", hookName, handler, source: "test" })));
  const run = new AgentRun(runner, "run-held");
  for (const tool of ["read", "exec"]) {
    const t0 = Date.now();
    const r = await run.call(tool, { path: "a" }, () => output("never"));
    assert.ok(Date.now() - t0 < 500, `took ${Date.now() - t0} ms`);
    assert.deepEqual([r.ran, r.text], [false, abort.message]);
  }
  assert.match(logs[0], /^loopwarden abort read in run run-held \(run_budget\): Run aborted/);
  const other = await new AgentRun(runner, "run-other").call("read", { path: "a" }, () => output("ran"));
  assert.deepEqual([other.ran, other.text], [true, "ran"]); // fail-open, after the connection attempt failed
  await runner.runGatewayStop({ reason: "test" }, {});
});

for (const failPolicy of ["fail-open", "fail-closed"] as const) {
  test(`no Kafka: ${failPolicy} decides within the timeout`, async () => {
    const { runner, logs } = loadPlugin({ bootstrap: "127.0.0.1:1", gatewayId: "gw-down", timeoutMs: 300, failPolicy });
    const run = new AgentRun(runner, `run-${failPolicy}`);
    const t0 = Date.now();
    const r = await run.call("read", { path: "a" }, () => output("contents"));
    assert.ok(Date.now() - t0 < 3000, `took ${Date.now() - t0} ms`);
    if (failPolicy === "fail-open") {
      assert.deepEqual([r.ran, r.text], [true, "contents"]);
    } else {
      assert.equal(r.ran, false);
      assert.match(r.text, /loopwarden gave no decision within 0\.3s .*blocked \(fail-closed\)/);
    }
    assert.ok(logs.some((l) => /no connection to Kafka within 300 ms/.test(l.message)), JSON.stringify(logs));
    await runner.runGatewayStop({ reason: "test" }, {});
  });
}
