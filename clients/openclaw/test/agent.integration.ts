// A looping OpenClaw agent against a real broker and a real worker, run by
// tests/integration/test_openclaw_plugin.py, which starts the worker (warningThreshold 3,
// criticalThreshold 5), runs phase "worker", stops the worker and runs phase "stopped".
// LW_BOOTSTRAP, LW_PREFIX and LW_PHASE come from there; without them this fails.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AgentRun, loadPlugin } from "./host.ts";

const bootstrap = process.env.LW_BOOTSTRAP;
const prefix = process.env.LW_PREFIX;
const phase = process.env.LW_PHASE;
const output = (text: string) => ({ content: [{ type: "text", text }], details: { bytes: text.length } });

test("the environment names a broker, topics and a phase", () => {
  assert.ok(bootstrap && prefix && (phase === "worker" || phase === "stopped"), "run me from test_openclaw_plugin.py");
});

if (phase === "worker") {
  for (const privacy of [true, false]) {
    test(`a looping agent is warned at 3, then blocked at 5 with loopwarden's message (privacy ${privacy})`, async () => {
      const { runner, logs, middlewares } = loadPlugin({ bootstrap, topicPrefix: prefix, gatewayId: `oc-gw-${privacy}`, timeoutMs: 15000, privacy });
      await runner.runGatewayStart({ port: 0 }, {}); // connects, as when OpenClaw's gateway starts
      const run = new AgentRun(runner, `loop-${privacy}-${Date.now()}`, middlewares);
      const seen = [];
      for (let i = 1; i <= 7; i++) {
        seen.push(await run.call("read", { path: "/workspace/README.md" }, () => output("# Same content every time")));
      }
      // calls 1-3: nothing; 4: runs, warning appended; 5: runs (same bucket, suppressed); 6, 7: blocked
      assert.deepEqual(seen.map((s) => s.ran), [true, true, true, true, true, false, false]);
      for (const i of [0, 1, 2, 4]) assert.equal(seen[i].persistedText, "# Same content every time", `call ${i + 1}`);
      // The model sees the warning after the tool's output, once, in the transcript too. The
      // worker got the tool's own output (else call 4's outcome would differ and call 6 not block).
      assert.match(seen[3].text, /^# Same content every time\n\[loopwarden\] .*\bread\b.*\b3\b/s);
      assert.equal(seen[3].persistedText, seen[3].text);
      for (const i of [5, 6]) {
        assert.match(seen[i].text, /^Blocked: .*\bread\b.*\b5\b/, `call ${i + 1}`);
        assert.equal(seen[i].result.details?.status, "blocked");
      }
      assert.ok(logs.some((l) => l.level === "warn" && /loopwarden block read/.test(l.message)));
      // The run ends; the same run id starts over.
      await run.end();
      const again = await run.call("read", { path: "/workspace/README.md" }, () => output("# Same content every time"));
      assert.equal(again.ran, true);
      await runner.runGatewayStop({ reason: "test" }, {});
    });
  }
}

if (phase === "stopped") {
  for (const failPolicy of ["fail-open", "fail-closed"] as const) {
    test(`worker stopped: ${failPolicy}`, async () => {
      const { runner } = loadPlugin({ bootstrap, topicPrefix: prefix, gatewayId: `oc-gw-${failPolicy}`, timeoutMs: 1000, failPolicy });
      await runner.runGatewayStart({ port: 0 }, {});
      const run = new AgentRun(runner, `stopped-${failPolicy}-${Date.now()}`);
      for (let i = 0; i < 2; i++) {
        const t0 = Date.now();
        const r = await run.call("read", { path: "a" }, () => output("contents"));
        const took = Date.now() - t0;
        assert.ok(took >= 900 && took < 5000, `call ${i + 1} took ${took} ms`);
        if (failPolicy === "fail-open") {
          assert.deepEqual([r.ran, r.text], [true, "contents"]);
        } else {
          assert.equal(r.ran, false);
          assert.match(r.text, /^loopwarden gave no decision within 1s( \(.*\))?; blocked \(fail-closed\)$/);
        }
      }
      await runner.runGatewayStop({ reason: "test" }, {});
    });
  }
}
