// The golden vectors of tests/vectors (the Python implementation's, cross-checked by
// Node and Kafka's Java client) hold for the TypeScript client.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { canon, digest, sha256Hex } from "../src/canonical.ts";
import { fingerprint, withDefaults, type WireEvent } from "../src/fingerprint.ts";
import { murmur2, partitionFor } from "../src/partition.ts";

const dir = new URL("../../../tests/vectors/", import.meta.url);
const load = (name: string) => JSON.parse(readFileSync(new URL(name, dir), "utf8")).vectors as Record<string, any>[];

function event(type: "tool_call" | "tool_result", v: Record<string, any>): WireEvent {
  const ev: WireEvent = { type, run_id: "r", seq: 0, gateway_id: "g", tool_name: v.tool_name };
  for (const k of ["params", "result", "error"] as const) if (k in v) ev[k] = JSON.parse(v[k]);
  return ev;
}

test("canonical JSON and SHA-256", () => {
  const vs = load("canonical.json");
  assert.ok(vs.length >= 50);
  for (const v of vs) {
    const value = JSON.parse(v.input);
    assert.equal(canon(value), v.canonical, v.name);
    assert.equal(digest(value), v.sha256, v.name);
    assert.equal(sha256Hex(v.canonical), v.sha256, v.name);
  }
});

test("call signatures and known polls", () => {
  const vs = load("calls.json");
  assert.ok(vs.length >= 20);
  for (const v of vs) {
    const sent = fingerprint(event("tool_call", v));
    assert.equal(sent.args_hash, v.args_hash, v.name);
    assert.equal(sent.known_poll, v.known_poll, v.name);
    assert.ok(!("params" in sent), v.name);
  }
});

test("outcome digests and unknown tools", () => {
  const vs = load("outcomes.json");
  assert.ok(vs.length >= 30);
  for (const v of vs) {
    const sent = fingerprint(event("tool_result", v));
    assert.equal(sent.result_hash ?? null, v.result_hash, v.name);
    assert.equal(sent.unknown_tool_name ?? null, v.unknown_tool_name, v.name);
    for (const k of ["params", "result", "error"]) assert.ok(!(k in sent), `${v.name}: ${k} sent`);
  }
});

test("privacy-mode events are exactly what the Python client sends", () => {
  for (const v of load("fingerprints.json")) {
    assert.deepEqual(fingerprint(withDefaults(JSON.parse(v.event))), v.privacy_event, v.name);
  }
});

test("decisions partitions are Kafka's", () => {
  const vs = load("partitions.json");
  assert.ok(vs.some((v) => /[^\x00-\x7f]/.test(v.gateway_id)));
  for (const v of vs) {
    assert.equal(Buffer.from(v.gateway_id, "utf8").toString("hex"), v.utf8_hex);
    assert.equal(murmur2(Buffer.from(v.utf8_hex, "hex")), v.murmur2, v.gateway_id);
    assert.equal(partitionFor(v.gateway_id, 8), v.partition_8, v.gateway_id);
    assert.equal(partitionFor(v.gateway_id, 12), v.partition_12, v.gateway_id);
  }
});
