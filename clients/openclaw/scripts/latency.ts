// Check latency through the TypeScript client, for benchmarks/openclaw_latency.py: an open
// loop starting one `check` every 1/rate s (each awaiting its own decision), the same
// calls and pacing as the Python side; prints {"latencies_ms": [...]} for the calls
// started after the warm-up.
//
//   node scripts/latency.ts --bootstrap HOST:PORT --prefix P. --rate 200 --seconds 20 --warmup 3
import { parseArgs } from "node:util";
import { GatewayClient } from "../src/client.ts";

const { values } = parseArgs({
  options: {
    bootstrap: { type: "string" },
    prefix: { type: "string" },
    gateway: { type: "string", default: "bench-ts-gw" },
    rate: { type: "string", default: "200" },
    seconds: { type: "string", default: "20" },
    warmup: { type: "string", default: "3" },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);

const paramsOf = (i: number) => ({
  path: `/workspace/src/module_${i % 97}/file_${i}.py`,
  query: "def handler(request): " + "x".repeat(120),
  options: { limit: i % 200, recursive: true },
});

const client = await new GatewayClient({
  bootstrap: values.bootstrap!, gatewayId: values.gateway!, topicPrefix: values.prefix, timeoutMs: 10_000,
}).start();
const latencies: number[] = [];
const pending: Promise<void>[] = [];
let degraded = 0;
const t0 = performance.now();
for (let i = 0; ; i++) {
  const due = t0 + (i * 1000) / rate;
  if (due - t0 > (warmup + seconds) * 1000) break;
  const wait = due - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  const measured = due - t0 >= warmup * 1000;
  pending.push((async () => {
    const s = performance.now();
    const d = await client.check(`run-${i % 400}`, "read", paramsOf(i));
    if (d.degraded) degraded += 1;
    if (measured) latencies.push(performance.now() - s);
  })());
}
await Promise.all(pending);
await client.close();
process.stdout.write(JSON.stringify({ latencies_ms: latencies, degraded }) + "\n");
