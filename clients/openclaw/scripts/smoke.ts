// One looping run through the plugin's hooks, built from a plugin config as OpenClaw hands
// it over (resolveConfig, then SASL, TLS and the CA file as the plugin sets them up).
// Prints the action each call got ("degraded-..." when the fail policy answered) as JSON.
// Used by tests/integration/test_openclaw_tls.py.
//
//   node scripts/smoke.ts '{"bootstrap": "...", "securityProtocol": "SASL_SSL", ...}' CALLS
import { createHooks, resolveConfig } from "../src/plugin.ts";

const config = resolveConfig(JSON.parse(process.argv[2]));
const calls = Number(process.argv[3] ?? "6");
const logs: string[] = [];
const log = (m: string) => void logs.push(m);
const hooks = createHooks(config, { info: log, warn: log, error: log });
const runId = `smoke-${Date.now()}`;
const ctx = { agentId: "main", sessionKey: `agent:main:${runId}`, runId, toolName: "read" };
const actions: string[] = [];
try {
  for (let i = 0; i < calls; i++) {
    const event = { toolName: "read", params: { path: "a" }, runId, toolCallId: `c${i}` };
    const degraded = hooks.client.degraded;
    const seen = logs.length;
    const r = await hooks.before_tool_call(event, { ...ctx, toolCallId: event.toolCallId });
    const warned = logs.slice(seen).some((l) => l.startsWith("loopwarden warning"));
    const action = r?.block ? "block" : warned ? "warn" : "allow";
    actions.push(hooks.client.degraded > degraded ? `degraded-${action}` : action);
    if (!r?.block) {
      await hooks.after_tool_call({ ...event, result: { content: [{ type: "text", text: "same" }] } }, { ...ctx, toolCallId: event.toolCallId });
    }
  }
} finally {
  await hooks.gateway_stop();
}
process.stdout.write(JSON.stringify({ actions, logs }) + "\n");
