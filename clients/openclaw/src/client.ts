/**
 * The gateway side of loopwarden in TypeScript: one `await client.check(...)` before each
 * tool call, the same contract as the Python `GatewayClient` (wire-format.md).
 *
 * - Events go to `<prefix>events`, keyed by run_id, through an idempotent producer
 *   (acks=all), on the partition Kafka's Java producer would pick for the run id, so a
 *   run's events land where any other loopwarden client would put them.
 * - Decisions are read from one partition of `<prefix>decisions`: the partition of this
 *   gateway's id under Kafka's default partitioner, from its end at start-up, without a
 *   consumer group. A decision resolves the waiting check by (run_id, seq); decisions
 *   already seen are dropped by event_id, other gateways' decisions are skipped.
 * - `seq` is max(previous seq + 1, the clock in microseconds): unique and increasing for
 *   every event this client issues, so a restarted gateway carries on a run it had begun.
 * - No decision within `timeoutMs`: the fail policy answers (fail-open: allow,
 *   fail-closed: block), marked `degraded`.
 * - Privacy mode (the default) sends args_hash, known_poll, result_hash and
 *   unknown_tool_name instead of params, results and errors, and `failed: true` on the
 *   result of a tool that failed (an error given, null included): the hashes alone do not
 *   say so, and the fleet's tool breaker counts failures (semantics.md section 9).
 * - `usage(runId, {...})` reports what one model call used (semantics.md section 8). A
 *   usage event yields a decision only when it spends a budget, so `usage` does not wait
 *   for one (that would add the whole timeout to every model call, for an answer that
 *   almost never comes): it returns the abort already received for the run, if any. The
 *   worker folds the usage event before the run's next event (one partition, in order),
 *   so the next `check` is answered abort either way.
 * - Every abort received for a run (the answer to a call, to a result or to a usage event)
 *   is remembered in `aborted`; the next `check` of that run returns it at once, without
 *   publishing anything (the worker answers every later call of an aborted run with abort,
 *   semantics.md section 8 "Aborted runs"); `endRun` forgets it. A fleet spend cap's pause
 *   (`fleet_spend_cap`, semantics.md section 11; `isPause`) is an abort that ends no run:
 *   the call is not run, but nothing is remembered, so the run's next call is judged
 *   again by the worker (paused while the cap is in force, as before once it is not).
 * - Shadow mode (semantics.md section 10): a decision with `enforced: false` says `allow`
 *   (what enforcement would have done is its `shadow_action`) and is handed on as it is,
 *   never remembered as an abort. A run known to be in shadow is not blocked by the
 *   fail-closed policy either: its degraded decision is `allow`, `enforced: false`, with
 *   the policy's action as `shadow_action` (a stop order, the one thing a worker enforces
 *   on such a run, comes as an enforced abort, which is then remembered).
 */
import { Consumer, Producer, type SASLOptions } from "@platformatic/kafka";
import type { ConnectionOptions } from "node:tls";
import { toWire } from "./canonical.ts";
import { fingerprint, withDefaults, type WireEvent } from "./fingerprint.ts";
import { partitionFor } from "./partition.ts";

export const FAIL_OPEN = "fail-open";
export const FAIL_CLOSED = "fail-closed";
export type FailPolicy = typeof FAIL_OPEN | typeof FAIL_CLOSED;
export const MAX_SAFE_SEQ = Number.MAX_SAFE_INTEGER;
/** The detector of a fleet spend cap's pause (semantics.md section 11). */
export const FLEET_SPEND_CAP = "fleet_spend_cap";
/** A usage event's cost_usd, from 0 to this (wire-format.md "Bad input"). */
export const MAX_COST_USD = 1e9;

export interface Decision {
  run_id: string;
  seq: number;
  gateway_id: string;
  agent_id: string | null;
  tool_call_id: string | null;
  /** null on the decision of a `usage` event */
  tool_name: string | null;
  ts: number | null;
  event_id: string;
  action: "allow" | "warn" | "block" | "abort";
  level: "none" | "warning" | "critical";
  detector: string | null;
  count: number | null;
  message: string | null;
  warning_key: string | null;
  paired_tool_name: string | null;
  args_hash: string | null;
  config_hash: string;
  /** the id of the fleet breaker or stop order applied to this call */
  fleet_signal: string | null;
  /** false: a run in shadow mode or held out; `action` is then allow */
  enforced: boolean;
  /** when not enforced: the action enforcement would have taken */
  shadow_action: string | null;
  degraded?: boolean;
}

/** What one model call of a run used (the `usage` event's fields). */
export interface Usage {
  /** prompt tokens, cached ones included: an integer from 0 to 2^53 - 1 (default 0) */
  inputTokens?: number;
  /** an integer from 0 to 2^53 - 1 (default 0) */
  outputTokens?: number;
  /** what the call cost in US dollars, a finite number from 0 to 10^9 (default 0) */
  costUsd?: number;
  model?: string | null;
  agentId?: string | null;
  sessionId?: string | null;
}

export interface ClientOptions {
  bootstrap: string | string[];
  gatewayId: string;
  topicPrefix?: string;
  timeoutMs?: number;
  failPolicy?: FailPolicy;
  privacy?: boolean;
  agentId?: string | null;
  /** The worker's max event size: larger events are refused before sending. */
  maxEventBytes?: number;
  sasl?: SASLOptions;
  tls?: ConnectionOptions;
  clientId?: string;
}

export class LoopwardenError extends Error {}

/** An event larger than the worker accepts; nothing was sent. */
export class EventTooLarge extends LoopwardenError {
  readonly size: number;
  readonly limit: number;
  constructor(message: string, size: number, limit: number) {
    super(message);
    this.size = size;
    this.limit = limit;
  }
}

interface Waiter {
  resolve: (d: Decision) => void;
}

const SEEN_LIMIT = 100_000;
const REMEMBERED_RUNS = 100_000; // runs whose abort or shadow mode is kept (those never ended)

function nowMicros(): number {
  return Math.floor((performance.timeOrigin + performance.now()) * 1000);
}

export class GatewayClient {
  readonly gatewayId: string;
  readonly topicPrefix: string;
  readonly timeoutMs: number;
  readonly failPolicy: FailPolicy;
  readonly privacy: boolean;
  readonly agentId: string | null;
  readonly maxEventBytes: number;
  /** The decisions partition this client reads (set by start). */
  partition = -1;
  eventsPartitions = 0;
  degraded = 0;
  duplicates = 0;
  received = 0;
  foreign = 0;
  /** The first abort received for each run (until `endRun`); never a spend cap's pause. */
  readonly aborted = new Map<string, Decision>();
  /** Runs a decision said are not enforced (shadow mode or held out). */
  readonly shadow = new Set<string>();
  /** Called with every decision of this gateway as it is read, repeats included. */
  onDecision: ((d: Decision) => void) | undefined;

  #options: ClientOptions;
  #producer: Producer | undefined;
  #consumer: Consumer | undefined;
  #waiting = new Map<string, Waiter>();
  #seen = new Set<string>();
  #lastSeq = -1;
  #running = false;
  #reader: Promise<void> | undefined;
  #offset = 0n;
  #outbox: { message: { topic: string; key: Buffer; value: Buffer; partition: number }; resolve: () => void; reject: (e: unknown) => void }[] = [];
  #flushing = false;
  readonly #encoder = new TextEncoder();

  constructor(options: ClientOptions) {
    if (!options.gatewayId) throw new LoopwardenError("gatewayId must not be empty");
    const policy = options.failPolicy ?? FAIL_OPEN;
    if (policy !== FAIL_OPEN && policy !== FAIL_CLOSED) {
      throw new LoopwardenError(`failPolicy must be "${FAIL_OPEN}" or "${FAIL_CLOSED}", got ${JSON.stringify(policy)}`);
    }
    this.#options = options;
    this.gatewayId = options.gatewayId;
    this.topicPrefix = options.topicPrefix ?? "loopwarden.";
    this.timeoutMs = options.timeoutMs ?? 2000;
    this.failPolicy = policy;
    this.privacy = options.privacy ?? true;
    this.agentId = options.agentId ?? null;
    this.maxEventBytes = options.maxEventBytes ?? 1 << 20;
  }

  get eventsTopic(): string {
    return `${this.topicPrefix}events`;
  }

  get decisionsTopic(): string {
    return `${this.topicPrefix}decisions`;
  }

  /** Connect, find this gateway's decisions partition and start reading it from its end. */
  async start(): Promise<this> {
    const o = this.#options;
    const brokers = Array.isArray(o.bootstrap) ? o.bootstrap : o.bootstrap.split(",").map((s) => s.trim());
    const base = {
      clientId: o.clientId ?? `loopwarden-${this.gatewayId}`,
      bootstrapBrokers: brokers,
      ...(o.sasl ? { sasl: o.sasl } : {}),
      ...(o.tls ? { tls: o.tls } : {}),
      retries: 3,
      retryDelay: 200,
      connectTimeout: 5000,
    };
    this.#producer = new Producer({ ...base, idempotent: true, acks: -1, autocreateTopics: false });
    // A consumer needs a group id to exist; it never joins the group: it fetches one partition.
    this.#consumer = new Consumer({ ...base, groupId: `loopwarden-gateway-${this.gatewayId}`, autocommit: false });
    try {
      const meta = await this.#consumer.metadata({ topics: [this.decisionsTopic, this.eventsTopic] });
      const decisions = meta.topics.get(this.decisionsTopic);
      const events = meta.topics.get(this.eventsTopic);
      if (!decisions || !events) {
        throw new LoopwardenError(
          `topic ${decisions ? this.eventsTopic : this.decisionsTopic} does not exist; run \`loopwarden topics create\` first`,
        );
      }
      this.partition = partitionFor(this.gatewayId, decisions.partitionsCount);
      this.eventsPartitions = events.partitionsCount;
      const offsets = await this.#consumer.listOffsets({
        topics: [this.decisionsTopic],
        partitions: { [this.decisionsTopic]: [this.partition] },
        timestamp: -1n,
      });
      this.#offset = offsets.get(this.decisionsTopic)![this.partition];
      await this.#producer.initIdempotentProducer({ acks: -1 });
    } catch (err) {
      await this.close();
      throw err instanceof LoopwardenError ? err : new LoopwardenError(`cannot reach Kafka at ${brokers.join(",")}: ${describe(err)}`);
    }
    this.#running = true;
    this.#reader = this.#read();
    return this;
  }

  async #read(): Promise<void> {
    const consumer = this.#consumer!;
    let failures = 0;
    while (this.#running) {
      try {
        const meta = await consumer.metadata({ topics: [this.decisionsTopic] });
        const topic = meta.topics.get(this.decisionsTopic)!;
        const part = topic.partitions[this.partition];
        const res = await consumer.fetch({
          node: part.leader,
          maxWaitTime: 200,
          minBytes: 1,
          maxBytes: 8 << 20,
          topics: [{
            topicId: topic.id,
            partitions: [{
              partition: this.partition,
              currentLeaderEpoch: part.leaderEpoch,
              fetchOffset: this.#offset,
              lastFetchedEpoch: -1,
              partitionMaxBytes: 8 << 20,
            }],
          }],
        });
        failures = 0;
        for (const t of res.responses) {
          for (const p of t.partitions) {
            if (p.errorCode !== 0) throw new LoopwardenError(`fetch error code ${p.errorCode}`);
            for (const batch of p.records ?? []) {
              for (const r of batch.records) {
                const offset = batch.firstOffset + BigInt(r.offsetDelta);
                if (offset < this.#offset) continue;
                this.#offset = offset + 1n;
                if (r.value) this.deliver(r.value);
              }
            }
          }
        }
      } catch (err) {
        if (!this.#running) return;
        failures += 1;
        consumer.clearMetadata();
        await sleep(Math.min(1000, 50 * failures));
      }
    }
  }

  /** Hand one decision (JSON bytes from the decisions topic) to whoever waits for it. */
  deliver(value: Uint8Array): void {
    let d: Decision;
    try {
      d = JSON.parse(Buffer.from(value).toString("utf8")) as Decision;
    } catch {
      return;
    }
    if (typeof d !== "object" || d === null || typeof d.event_id !== "string") return;
    if (d.gateway_id !== this.gatewayId) {
      this.foreign += 1; // another gateway sharing this partition
      return;
    }
    this.received += 1;
    this.onDecision?.(d);
    if (this.#seen.has(d.event_id)) {
      this.duplicates += 1;
      return;
    }
    this.#seen.add(d.event_id);
    if (this.#seen.size > SEEN_LIMIT) this.#seen.delete(this.#seen.values().next().value!);
    if (d.enforced === false) remember(this.shadow, d.run_id);
    else if (d.action === "abort" && !isPause(d) && !this.aborted.has(d.run_id)) remember(this.aborted, d.run_id, d);
    const key = waitKey(d.run_id, d.seq);
    const w = this.#waiting.get(key);
    if (w) {
      this.#waiting.delete(key);
      w.resolve(d);
    }
  }

  /** The seq of a new event, whatever its run (see the module docstring). */
  nextSeq(): number {
    const seq = Math.max(this.#lastSeq + 1, nowMicros());
    if (seq > MAX_SAFE_SEQ) throw new LoopwardenError(`seq ${seq} would exceed 2^53 - 1`);
    this.#lastSeq = seq;
    return seq;
  }

  /** The event as it is sent: defaults filled in, hashed in privacy mode; throws EventTooLarge. */
  encode(ev: WireEvent): { key: string; value: Buffer; sent: WireEvent } {
    const sent = this.privacy ? fingerprint(withDefaults(ev)) : withDefaults(ev);
    if (this.privacy && ev.type === "tool_result" && ev.error !== undefined) sent.failed = true;
    const value = Buffer.from(JSON.stringify(sent), "utf8");
    if (value.length > this.maxEventBytes) {
      const what = `${ev.type} event of run ${JSON.stringify(ev.run_id)}${ev.tool_name ? ` for tool ${JSON.stringify(ev.tool_name)}` : ""}`;
      throw new EventTooLarge(
        `${what} is ${value.length} bytes encoded, over the worker's limit of ${this.maxEventBytes} bytes; nothing was sent` +
          (this.privacy ? "; its ids are too long even in privacy mode" : "; privacy mode sends hashes instead"),
        value.length,
        this.maxEventBytes,
      );
    }
    return { key: ev.run_id, value, sent };
  }

  /** Queue one record; records queued while a produce request is in flight go together in
   * the next one (one request at a time keeps their order, as aiokafka's batches do). */
  #send(key: string, value: Buffer): Promise<void> {
    if (!this.#producer || !this.#running) return Promise.reject(new LoopwardenError("the client is not started (call start())"));
    const message = { topic: this.eventsTopic, key: Buffer.from(key, "utf8"), value, partition: partitionFor(key, this.eventsPartitions) };
    return new Promise((resolve, reject) => {
      this.#outbox.push({ message, resolve, reject });
      if (!this.#flushing) void this.#flush();
    });
  }

  async #flush(): Promise<void> {
    this.#flushing = true;
    while (this.#outbox.length && this.#producer) {
      const batch = this.#outbox.splice(0);
      try {
        await this.#producer.send({ messages: batch.map((b) => b.message) });
        for (const b of batch) b.resolve();
      } catch (err) {
        for (const b of batch) b.reject(err);
      }
    }
    this.#flushing = false;
  }

  /** Publish a prepared event as it is (its own seq and ts; hashed in privacy mode), without
   * waiting for a decision: for replaying recorded events through this client. */
  async publish(ev: WireEvent): Promise<WireEvent> {
    const { key, value, sent } = this.encode(ev);
    await this.#send(key, value);
    return sent;
  }

  #base(runId: string, agentId?: string | null, sessionId?: string | null) {
    return {
      run_id: runId,
      seq: this.nextSeq(),
      gateway_id: this.gatewayId,
      agent_id: agentId ?? this.agentId,
      session_id: sessionId ?? null,
      ts: Date.now(),
    };
  }

  /** Publish a tool_call and wait for its decision, or for the fail policy after timeoutMs.
   * A run this client knows to be aborted gets its abort back at once, nothing published
   * (a paused run is not known as aborted: its calls are sent and judged). */
  async check(
    runId: string,
    toolName: string,
    params?: unknown,
    opts: { toolCallId?: string | null; agentId?: string | null; sessionId?: string | null } = {},
  ): Promise<Decision> {
    const abort = this.aborted.get(runId);
    if (abort) return abort;
    const ev: WireEvent = {
      type: "tool_call",
      ...this.#base(runId, opts.agentId, opts.sessionId),
      tool_name: toolName,
      tool_call_id: opts.toolCallId ?? null,
      params: toWire(params),
    };
    if (ev.params === undefined) delete ev.params;
    const { key, value } = this.encode(ev);
    const k = waitKey(runId, ev.seq);
    let timer: NodeJS.Timeout | undefined;
    const answer = new Promise<Decision>((resolve) => {
      this.#waiting.set(k, { resolve });
      timer = setTimeout(() => {
        this.#waiting.delete(k);
        this.degraded += 1;
        resolve(this.fallback(ev));
      }, this.timeoutMs);
    });
    try {
      await Promise.race([this.#send(key, value), answer]);
    } catch (err) {
      // The broker did not take the event: the policy answers, as on a timeout.
      this.#waiting.delete(k);
      clearTimeout(timer);
      this.degraded += 1;
      return this.fallback(ev, `could not publish the call: ${describe(err)}`);
    }
    const d = await answer;
    clearTimeout(timer);
    return d;
  }

  /** The decision the fail policy gives when no worker answered (allow, not enforced, for a
   * run known to be in shadow). */
  fallback(ev: WireEvent, why?: string): Decision {
    const closed = this.failPolicy === FAIL_CLOSED;
    const action = closed ? "block" : "allow";
    const enforced = !this.shadow.has(ev.run_id);
    return {
      run_id: ev.run_id, seq: ev.seq, gateway_id: ev.gateway_id, agent_id: ev.agent_id ?? null,
      tool_call_id: ev.tool_call_id ?? null, tool_name: ev.tool_name ?? "", ts: ev.ts ?? null,
      event_id: `${ev.run_id}:${ev.seq}`, action: enforced ? action : "allow", level: "none", detector: null,
      count: null,
      message: `loopwarden gave no decision within ${this.timeoutMs / 1000}s${why ? ` (${why})` : ""}; ` +
        (closed ? "blocked (fail-closed)" : "allowed (fail-open)") + (enforced ? "" : "; not enforced (shadow run)"),
      warning_key: null, paired_tool_name: null, args_hash: null, config_hash: "",
      fleet_signal: null, enforced, shadow_action: enforced ? null : action, degraded: true,
    };
  }

  /** Publish a tool's outcome (`result` or `error`; absent is undefined). */
  async result(
    runId: string,
    toolName: string,
    params: unknown,
    outcome: { result?: unknown; error?: unknown },
    opts: { toolCallId?: string | null; agentId?: string | null; sessionId?: string | null } = {},
  ): Promise<void> {
    const ev: WireEvent = {
      type: "tool_result",
      ...this.#base(runId, opts.agentId, opts.sessionId),
      tool_name: toolName,
      tool_call_id: opts.toolCallId ?? null,
      params: toWire(params),
      result: toWire(outcome.result),
      error: "error" in outcome ? toWire(outcome.error) ?? null : undefined,
    };
    for (const k of ["params", "result", "error"] as const) if (ev[k] === undefined) delete ev[k];
    const { key, value } = this.encode(ev);
    await this.#send(key, value);
  }

  /** Publish what one model call of the run used, without waiting for a decision; returns
   * the abort already received for the run, if any (see the module docstring). Throws
   * LoopwardenError, before sending, for amounts the worker would refuse. */
  async usage(runId: string, usage: Usage = {}): Promise<Decision | undefined> {
    const ev: WireEvent = {
      type: "usage",
      ...this.#base(runId, usage.agentId, usage.sessionId),
      input_tokens: tokens("inputTokens", usage.inputTokens),
      output_tokens: tokens("outputTokens", usage.outputTokens),
      cost_usd: costUsd(usage.costUsd),
      model: modelName(usage.model),
    };
    const { key, value } = this.encode(ev);
    await this.#send(key, value);
    return this.aborted.get(runId);
  }

  async compactionRetry(runId: string, opts: { agentId?: string | null; sessionId?: string | null } = {}): Promise<void> {
    const { key, value } = this.encode({ type: "compaction_retry", ...this.#base(runId, opts.agentId, opts.sessionId) });
    await this.#send(key, value);
  }

  async endRun(runId: string, opts: { agentId?: string | null; sessionId?: string | null } = {}): Promise<void> {
    const { key, value } = this.encode({ type: "run_end", ...this.#base(runId, opts.agentId, opts.sessionId) });
    await this.#send(key, value);
    this.aborted.delete(runId);
    this.shadow.delete(runId);
  }

  async close(): Promise<void> {
    this.#running = false;
    this.#waiting.clear(); // their checks end by their timeouts, with the fail policy
    for (const b of this.#outbox.splice(0)) b.reject(new LoopwardenError("the client was closed"));
    await this.#reader?.catch(() => undefined);
    this.#reader = undefined;
    await Promise.allSettled([this.#producer?.close(), this.#consumer?.close()]);
    this.#producer = undefined;
    this.#consumer = undefined;
  }
}

function tokens(name: string, v: unknown): number {
  if (v === undefined) return 0;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw new LoopwardenError(`usage: ${name} must be an integer from 0 to 2^53 - 1, got ${show(v)}`);
  }
  return v;
}

function costUsd(v: unknown): number {
  if (v === undefined) return 0;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v > MAX_COST_USD) {
    throw new LoopwardenError(`usage: costUsd must be a finite number from 0 to 1e9, got ${show(v)}`);
  }
  return v === 0 ? 0 : v; // -0 is 0
}

function modelName(v: unknown): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "string") throw new LoopwardenError(`usage: model must be a string or null, got ${show(v)}`);
  return v;
}

function show(v: unknown): string {
  return typeof v === "string" ? JSON.stringify(v) : typeof v === "bigint" ? `${v}n` : String(v);
}

/** A fleet spend cap's pause: an abort of the call, not of its run (semantics.md section 11). */
export function isPause(d: Pick<Decision, "action" | "detector">): boolean {
  return d.action === "abort" && d.detector === FLEET_SPEND_CAP;
}

/** Add to a bounded map or set, dropping its oldest entry when full. */
export function remember<T>(m: Map<string, T> | Set<string>, key: string, value?: T, limit = REMEMBERED_RUNS): void {
  if (m.size >= limit) m.delete(m.keys().next().value!);
  if (m instanceof Map) m.set(key, value as T);
  else m.add(key);
}

function waitKey(runId: string, seq: number): string {
  return `${seq}\u0000${runId}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const errors = (err as { errors?: unknown[] }).errors;
    const inner = Array.isArray(errors) && errors.length ? `: ${errors.map(describe).join("; ")}` : "";
    return `${err.message}${inner}`;
  }
  return String(err);
}
