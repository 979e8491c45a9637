// Publishes conformance scenarios through the TypeScript client and prints, as one JSON
// object, the decisions each gateway's client read back. Driven by
// tests/integration/test_openclaw_conformance.py, which starts the broker and the worker
// and compares the decisions with the expected ones.
//
//   node scripts/conformance.ts --bootstrap HOST:PORT --prefix P. --mode privacy|raw \
//     (--tag TAG | --as-written) [--cuts I,J --signals N --metrics URL] SCENARIO.json...
//
// Every run id and gateway id is prefixed with TAG + the scenario's index, so several
// scenarios and both modes can share one worker. With --as-written, ids are sent as the
// scenario writes them: holdout hashes the run id (semantics.md section 10), and stop
// orders name run, gateway and agent ids (section 9), so such a scenario gets topics and a
// worker of its own instead. Every event, usage events included, is sent with `publish`,
// with the seq the scenario gives it.
//
// The fleet is eventually consistent: a call reaching the worker before the breaker its
// failures open is judged without it. So with --cuts (indexes of the events as sent, all
// scenarios in order, whose failure opens a breaker offline), the script stops after
// sending the event at the k-th cut until the worker's /metrics at URL shows at least N + k
// `loopwarden_fleet_signals` (N: the fleet signals it held before the first event), and
// exits with an error if it does not within --signals-timeout seconds.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { GatewayClient, type Decision } from "../src/client.ts";
import type { WireEvent } from "../src/fingerprint.ts";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    bootstrap: { type: "string" },
    prefix: { type: "string" },
    mode: { type: "string", default: "privacy" },
    tag: { type: "string", default: "" },
    "as-written": { type: "boolean", default: false },
    timeout: { type: "string", default: "60" },
    cuts: { type: "string", default: "" },
    signals: { type: "string", default: "0" },
    metrics: { type: "string" },
    "signals-timeout": { type: "string", default: "60" },
  },
});
const cuts = values.cuts ? values.cuts.split(",").map(Number) : [];
if (cuts.length && !values.metrics) throw new Error("--cuts needs --metrics, the worker's metrics URL");

/** The worker's `loopwarden_fleet_signals` (stop orders and breakers it holds). */
async function fleetSignals(url: string): Promise<number> {
  const text = await (await fetch(url, { signal: AbortSignal.timeout(2000) })).text();
  const line = text.split("\n").find((l) => l.startsWith("loopwarden_fleet_signals "));
  return line ? Number(line.split(/\s+/)[1]) : 0;
}

/** Wait until the worker holds `want` fleet signals; fail loudly after the timeout. */
async function waitForSignals(url: string, want: number, after: number): Promise<void> {
  const deadline = Date.now() + Number(values["signals-timeout"]) * 1000;
  let held = await fleetSignals(url);
  while (held < want) {
    if (Date.now() > deadline) {
      process.stderr.write(`after event ${after}, the worker holds ${held} fleet signals, not ${want} (${url})\n`);
      process.exit(3);
    }
    await new Promise((r) => setTimeout(r, 50));
    held = await fleetSignals(url);
  }
}

const scenarios = positionals.map((f) => JSON.parse(readFileSync(f, "utf8")) as { name: string; events: WireEvent[]; decisions: unknown[] });
const clients = new Map<string, GatewayClient>();
const got: Decision[] = [];
let want = 0;
const events: WireEvent[] = [];
scenarios.forEach((sc, i) => {
  want += sc.decisions.length;
  const tag = `${values.tag}${i}-`;
  for (const e of sc.events) {
    events.push(values["as-written"] ? e : { ...e, run_id: tag + e.run_id, gateway_id: tag + e.gateway_id });
  }
});

for (const e of events) {
  if (!clients.has(e.gateway_id)) {
    const c = new GatewayClient({
      bootstrap: values.bootstrap!,
      gatewayId: e.gateway_id,
      topicPrefix: values.prefix,
      privacy: values.mode === "privacy",
    });
    c.onDecision = (d) => got.push(d);
    clients.set(e.gateway_id, await c.start());
  }
}
const sent: WireEvent[] = [];
for (const [i, e] of events.entries()) {
  sent.push(await clients.get(e.gateway_id)!.publish(e));
  const k = cuts.indexOf(i);
  if (k >= 0) await waitForSignals(values.metrics!, Number(values.signals) + k + 1, i);
}
const deadline = Date.now() + Number(values.timeout) * 1000;
while (got.length < want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
await new Promise((r) => setTimeout(r, 500)); // anything beyond the expected count shows too
await Promise.all([...clients.values()].map((c) => c.close()));
process.stdout.write(JSON.stringify({ decisions: got, sent }) + "\n");
