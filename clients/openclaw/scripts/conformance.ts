// Publishes conformance scenarios through the TypeScript client and prints, as one JSON
// object, the decisions each gateway's client read back. Driven by
// tests/integration/test_openclaw_conformance.py, which starts the broker and the worker
// and compares the decisions with the expected ones.
//
//   node scripts/conformance.ts --bootstrap HOST:PORT --prefix P. --mode privacy|raw \
//     (--tag TAG | --as-written) SCENARIO.json...
//
// Every run id and gateway id is prefixed with TAG + the scenario's index, so several
// scenarios and both modes can share one worker. With --as-written, ids are sent as the
// scenario writes them: holdout hashes the run id (semantics.md section 10), so a
// scenario that sets loopwarden.holdoutPercent gets topics and a worker of its own
// instead. Every event, usage events included, is sent with `publish`, with the seq the
// scenario gives it.
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
  },
});

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
for (const e of events) sent.push(await clients.get(e.gateway_id)!.publish(e));
const deadline = Date.now() + Number(values.timeout) * 1000;
while (got.length < want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
await new Promise((r) => setTimeout(r, 500)); // anything beyond the expected count shows too
await Promise.all([...clients.values()].map((c) => c.close()));
process.stdout.write(JSON.stringify({ decisions: got, sent }) + "\n");
