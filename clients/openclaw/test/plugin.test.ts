// The plugin without a worker: its config schema, the hooks it registers, what each kind
// of decision does to a call run through OpenClaw's own hook runner (scripted decisions),
// and the fail policy when Kafka cannot be reached.
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { test } from "node:test";
import { GatewayClient, type Decision } from "../src/client.ts";
import { ConfigError, createHooks, resolveConfig } from "../src/plugin.ts";
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

test("register: the seven hooks and the tool-result middleware, on OpenClaw's plugin api", () => {
  const { typedHooks, middlewares, logs } = loadPlugin({ bootstrap: "127.0.0.1:1", gatewayId: "gw-reg" });
  assert.deepEqual(typedHooks.map((h) => h.hookName).sort(),
    ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_start", "gateway_stop",
      "tool_result_persist"]);
  assert.equal(middlewares.length, 1);
  assert.match(logs[0].message, /gateway gw-reg on 127\.0\.0\.1:1 .*fail-open, timeout 2000 ms, privacy on/);
});

/** A client that answers from a script and records what the hooks sent. */
function scripted(actions: Decision["action"][]) {
  const client = new GatewayClient({ bootstrap: "127.0.0.1:1", gatewayId: "gw-s" });
  const sent: string[] = [];
  let n = 0;
  Object.assign(client, {
    start: async () => client,
    close: async () => undefined,
    check: async (runId: string, tool: string) => {
      const action = actions[n++];
      sent.push(`call ${tool}`);
      return { ...client.fallback({ type: "tool_call", run_id: runId, seq: n, gateway_id: "gw-s", tool_name: tool }),
        action, degraded: false, message: `${action} #${n} from loopwarden` };
    },
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
