// A looping OpenClaw agent against a real broker and a real worker, run by
// tests/integration/test_openclaw_plugin.py, which starts the worker (warningThreshold 3,
// criticalThreshold 5), runs phase "worker", stops the worker and runs phase "stopped";
// and, with a worker whose config adds loopwarden.budgets.runTokens 2000 and a shadow
// agent "trial" (loopwarden.enforce false), phase "budget", whose events and decisions it
// then compares with an offline replay.
// LW_BOOTSTRAP, LW_PREFIX and LW_PHASE come from there; without them this fails.
import assert from "node:assert/strict";
import { test } from "node:test";
import { GatewayClient } from "../src/client.ts";
import { AgentRun, loadPlugin } from "./host.ts";

const bootstrap = process.env.LW_BOOTSTRAP;
const prefix = process.env.LW_PREFIX;
const phase = process.env.LW_PHASE;
const output = (text: string) => ({ content: [{ type: "text", text }], details: { bytes: text.length } });

test("the environment names a broker, topics and a phase", () => {
  assert.ok(bootstrap && prefix && ["worker", "stopped", "budget"].includes(phase!), "run me from test_openclaw_plugin.py");
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

if (phase === "budget") {
  const stamp = Date.now();

  test("usage from llm_output under runTokens 2000: warned at 80 and 95 percent, stopped at 100 percent", async () => {
    const { runner, logs, middlewares } = loadPlugin({ bootstrap, topicPrefix: prefix, gatewayId: "oc-gw-budget", timeoutMs: 15000 });
    await runner.runGatewayStart({ port: 0 }, {});
    const run = new AgentRun(runner, `oc-budget-${stamp}`, middlewares);
    let n = 0;
    const read = () => {
      n += 1;
      return run.call("read", { path: `/workspace/src/file_${n}.py` }, () => output(`contents of file ${n}`));
    };
    // attempt 1: two calls, then OpenClaw reports the attempt's usage: 700 + 200 cached + 100 = 1000 tokens
    const [first, second] = [await read(), await read()];
    assert.deepEqual([first.ran, first.text, second.ran, second.text], [true, "contents of file 1", true, "contents of file 2"]);
    await run.llmOutput({ input: 700, cacheRead: 200, output: 100, total: 1000 });
    const third = await read();
    assert.deepEqual([third.ran, third.text], [true, "contents of file 3"]);
    await run.llmOutput({ input: 500, output: 100 }); // 1600: 80 percent
    const fourth = await read();
    assert.equal(fourth.ran, true);
    assert.match(fourth.text, /^contents of file 4\n\[loopwarden\] Warning: this run has used 80% of its tokens budget \(1600 tokens of 2000 tokens\)/);
    await run.llmOutput({ input: 250, output: 50 }); // 1900: 95 percent
    const fifth = await read();
    assert.equal(fifth.ran, true);
    assert.match(fifth.text, /^contents of file 5\n\[loopwarden\] Warning: this run has used 95% of its tokens budget \(1900 tokens/);
    await run.llmOutput({ input: 60, output: 40 }); // 2000: spent, the usage event's own abort
    for (const tool of ["read", "exec"]) {
      const r = await run.call(tool, { path: "after" }, () => output("never"));
      assert.equal(r.ran, false, tool);
      // the usage event's abort, or the worker's answer to a call of an aborted run
      assert.match(r.text, /^Run aborted: (its tokens budget is spent \(2000 tokens used of 2000 tokens\)|\w+ was called after the run's budget was spent)/, tool);
      assert.equal(r.result.details?.status, "blocked");
    }
    assert.ok(logs.some((l) => l.level === "warn" && /^loopwarden warning for read in run oc-budget-\d+ \(run_budget\)/.test(l.message)));
    assert.ok(logs.some((l) => l.level === "warn" && /^loopwarden abort exec in run oc-budget-\d+ \(run_budget\)/.test(l.message)));
    await run.end();
    await runner.runGatewayStop({ reason: "test" }, {});
  });

  test("a usage abort received is remembered: the run's next check returns it, nothing sent", async () => {
    const client = await new GatewayClient({ bootstrap: bootstrap!, gatewayId: "oc-gw-client", topicPrefix: prefix, timeoutMs: 15000 }).start();
    try {
      const runId = `oc-usage-client-${stamp}`;
      assert.equal((await client.check(runId, "read", { path: "a" })).action, "allow");
      assert.equal(await client.usage(runId, { inputTokens: 1500, outputTokens: 499, model: "m" }), undefined);
      const warned = await client.check(runId, "read", { path: "b" });
      assert.deepEqual([warned.action, warned.warning_key, warned.count], ["warn", "budget:tokens:95", 99]);
      await client.usage(runId, { outputTokens: 1, costUsd: 0.01 }); // 2000
      for (let i = 0; i < 300 && !client.aborted.has(runId); i++) await new Promise((r) => setTimeout(r, 50));
      const abort = client.aborted.get(runId)!;
      assert.deepEqual([abort.action, abort.tool_name, abort.detector, abort.count, abort.warning_key, abort.enforced],
        ["abort", null, "run_budget", 2000, "budget:tokens", true]);
      const sent: string[] = [];
      const encode = client.encode.bind(client);
      client.encode = (ev) => (sent.push(ev.type), encode(ev));
      assert.equal(await client.check(runId, "read", { path: "c" }), abort);
      assert.equal(await client.usage(runId, { outputTokens: 5 }), abort); // still reported, for audits
      assert.deepEqual(sent, ["usage"], "the call was not sent");
      await client.endRun(runId);
      assert.equal(client.aborted.has(runId), false);
    } finally {
      await client.close();
    }
  });

  test("a shadow agent's looping run executes every call; the decisions say what would have been done", async () => {
    const { runner, logs, middlewares } = loadPlugin({ bootstrap, topicPrefix: prefix, gatewayId: "oc-gw-shadow", timeoutMs: 15000 });
    await runner.runGatewayStart({ port: 0 }, {});
    const run = new AgentRun(runner, `oc-shadow-${stamp}`, middlewares, "trial");
    for (let i = 1; i <= 7; i++) {
      const r = await run.call("read", { path: "/workspace/README.md" }, () => output("# Same content every time"));
      assert.deepEqual([r.ran, r.text, r.persistedText], [true, "# Same content every time", "# Same content every time"], `call ${i}`);
    }
    const shadow = logs.filter((l) => l.level === "debug" && l.message.startsWith("loopwarden shadow")).map((l) => l.message.split(" ")[2]);
    assert.deepEqual(shadow, ["allow", "allow", "allow", "warn", "allow", "block", "block"]);
    assert.deepEqual(logs.filter((l) => l.level === "warn"), []);
    await run.end();
    await runner.runGatewayStop({ reason: "test" }, {});
  });
}
