/**
 * The OpenClaw hooks that make a gateway a loopwarden gateway.
 *
 * - before_tool_call: the call is sent and the hook waits for its decision. `block` and
 *   `abort` stop the call with loopwarden's message as `blockReason` (the model sees it as
 *   the tool's error); `warn` lets it run, and the message is appended to the tool's
 *   result: by the agent tool-result middleware (what the model sees), else by
 *   tool_result_persist (the session transcript); it is logged too. The result sent to
 *   the worker is the tool's own, without the appended warning, so a warning does not
 *   look like progress.
 *   A fleet block (`fleet_tool_breaker`) is shown to the model as any block. An abort
 *   (a loop, a spent budget, an operator's stop order) blocks the call, and every later
 *   call of the run is blocked with the same message at once: the client remembers the
 *   abort until the run ends (OpenClaw's tool hook result can block a call, not end a
 *   run; its own loop detection blocks calls in the same way).
 *   A fleet spend cap's pause (an abort with detector `fleet_spend_cap`, semantics.md
 *   section 11) is no end of the run: the call is blocked with the pause's message, and
 *   the current turn is stopped where OpenClaw can (`stopTurn`: index.ts hands in the
 *   host's own abort of the session's active run, the one `/stop` takes), before the
 *   hook answers (OpenClaw's tool wrapper still returns a blocked call's result, and its
 *   agent loop records it, then ends the attempt); nothing is remembered, so a later call
 *   (the rest of the turn where it could not be stopped, or a later turn) is judged again
 *   by the worker: paused while the cap is in force, judged as before once its window
 *   ended or it was lifted.
 *   A decision with `enforced: false` (shadow mode, holdout) is executed as `allow` and
 *   logged at debug level with its `shadow_action`.
 *   When no worker answers in `timeoutMs`, or the broker cannot be reached, the fail
 *   policy decides (fail-open: run the call; fail-closed: block it). The hook never throws:
 *   OpenClaw would block a call whose hook throws, whatever the policy says.
 * - after_tool_call: the result (or error) is sent; calls this plugin blocked are not,
 *   since a blocked call is not part of the run's history.
 * - llm_output: a `usage` event with the token counts (and cost, when OpenClaw priced
 *   the model) it carries, for the run's budgets. OpenClaw runs it once per attempt, with
 *   the attempt's totals: every model call of the attempt, summed. It is the only plugin
 *   hook that carries usage (model_call_ended has timing only), and a conversation hook:
 *   OpenClaw registers it for a non-bundled plugin only with
 *   `plugins.entries.loopwarden.hooks.allowConversationAccess: true` (so is agent_end).
 * - after_compaction: a compaction_retry (arms the post-compaction guard).
 * - agent_end: a run_end (the worker drops the run).
 * - gateway_start: connects (else the first call does); gateway_stop: disconnects.
 *
 * Run id: the hook event's `runId`, else the context's, else the session's id or key.
 */
import Ajv from "ajv";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import {
  FAIL_CLOSED, GatewayClient, MAX_COST_USD, isPause, remember, type Decision, type FailPolicy, type Usage,
} from "./client.ts";

const manifest = JSON.parse(readFileSync(new URL("../openclaw.plugin.json", import.meta.url), "utf8"));

export interface LoopwardenConfig {
  bootstrap: string;
  gatewayId: string;
  topicPrefix: string;
  timeoutMs: number;
  failPolicy: FailPolicy;
  privacy: boolean;
  securityProtocol: "PLAINTEXT" | "SSL" | "SASL_PLAINTEXT" | "SASL_SSL";
  saslMechanism: "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512";
  saslUsername?: string;
  saslPassword?: string;
  sslCaFile?: string;
  maxEventBytes: number;
}

export class ConfigError extends Error {}

const validate = new Ajv.default({ useDefaults: true, allErrors: true }).compile(manifest.configSchema);

/** The plugin's config (plugins.entries.loopwarden.config) checked against the manifest's
 * configSchema, with its defaults filled in; throws ConfigError naming each problem. */
export function resolveConfig(raw: unknown): LoopwardenConfig {
  const cfg = structuredClone(raw ?? {}) as Record<string, unknown>;
  if (!validate(cfg)) {
    const problems = (validate.errors ?? []).map((e) => `${e.instancePath || "config"} ${e.message}`);
    throw new ConfigError(`loopwarden plugin config: ${problems.join("; ")}`);
  }
  const c = cfg as unknown as LoopwardenConfig;
  if (c.securityProtocol.startsWith("SASL") && (!c.saslUsername || !c.saslPassword)) {
    throw new ConfigError(`loopwarden plugin config: securityProtocol ${c.securityProtocol} needs saslUsername and saslPassword`);
  }
  c.gatewayId ||= hostname();
  return c;
}

export function clientFor(c: LoopwardenConfig): GatewayClient {
  const tls = c.securityProtocol === "SSL" || c.securityProtocol === "SASL_SSL";
  return new GatewayClient({
    bootstrap: c.bootstrap,
    gatewayId: c.gatewayId,
    topicPrefix: c.topicPrefix,
    timeoutMs: c.timeoutMs,
    failPolicy: c.failPolicy,
    privacy: c.privacy,
    maxEventBytes: c.maxEventBytes,
    ...(tls ? { tls: c.sslCaFile ? { ca: readFileSync(c.sslCaFile, "utf8") } : {} } : {}),
    ...(c.securityProtocol.startsWith("SASL")
      ? { sasl: { mechanism: c.saslMechanism, username: c.saslUsername, password: c.saslPassword } }
      : {}),
  });
}

export interface Logger {
  debug?: (message: string) => void;
  info: (message: string) => void;
  warn: (message: string) => void;
  error: (message: string) => void;
}

// The parts of OpenClaw's hook events and contexts read here (src/plugins/hook-types.ts);
// index.ts registers the handlers on OpenClaw's own types, so tsc checks they fit.
export interface ToolContext {
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  runId?: string;
  toolName: string;
  toolCallId?: string;
}
export interface BeforeToolCallEvent {
  toolName: string;
  params: Record<string, unknown>;
  runId?: string;
  toolCallId?: string;
}
export interface AfterToolCallEvent extends BeforeToolCallEvent {
  result?: unknown;
  error?: string;
}
export interface AgentContext {
  runId?: string;
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
}
export interface LlmOutputEvent {
  runId?: string;
  sessionId?: string;
  provider?: string;
  model?: string;
  resolvedRef?: string;
  usage?: { input?: number; output?: number; cacheRead?: number; cacheWrite?: number; total?: number };
}

const count = (v: unknown): number =>
  typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.min(Math.trunc(v), Number.MAX_SAFE_INTEGER) : 0;

/** The usage event of one llm_output, or undefined when it reports nothing: input tokens
 * are OpenClaw's `input` plus `cacheRead` and `cacheWrite` (the wire counts cached prompt
 * tokens as input), output tokens its `output`; a usage with only a `total` counts it as
 * input. The cost is `usage.cost.total` (US dollars), which OpenClaw adds when the model
 * has a price in its config (its event type does not declare it); else 0. */
export function usageOf(event: LlmOutputEvent): Usage | undefined {
  const u = event.usage;
  if (!u) return undefined;
  let inputTokens = Math.min(count(u.input) + count(u.cacheRead) + count(u.cacheWrite), Number.MAX_SAFE_INTEGER);
  const outputTokens = count(u.output);
  if (inputTokens + outputTokens === 0) inputTokens = count(u.total);
  const cost = (u as { cost?: { total?: unknown } }).cost?.total;
  const costUsd = typeof cost === "number" && Number.isFinite(cost) && cost > 0 && cost <= MAX_COST_USD ? cost : 0;
  if (inputTokens + outputTokens === 0 && costUsd === 0) return undefined;
  return { inputTokens, outputTokens, costUsd, model: event.resolvedRef ?? event.model ?? null };
}

/** Stops the current turn of an OpenClaw session (its active run's attempt), as OpenClaw's
 * `/stop` does; true when one was stopped. Given the call's ids; index.ts's `hostStopTurn`
 * is the host's. */
export type StopTurn = (target: { runId: string; sessionId?: string; sessionKey?: string }) => boolean | Promise<boolean>;

const RETRY_CONNECT_MS = 5000;
const PENDING_LIMIT = 10_000;

/** The hook handlers, bound to one client (started on first use, retried after failures);
 * `stopTurn` stops a session's current turn on a spend cap's pause (none: the pause blocks
 * each call on its own). */
export function createHooks(
  config: LoopwardenConfig, logger: Logger, client: GatewayClient = clientFor(config), stopTurn?: StopTurn,
) {
  let started: Promise<GatewayClient> | undefined;
  let failedAt = 0;
  const warnings = new Map<string, string>(); // toolCallId -> the warning for its result
  const appended = new Map<string, string>(); // toolCallId -> the text appended to its result
  const blocked = new Set<string>(); // toolCallIds this plugin blocked

  function ready(): Promise<GatewayClient> {
    if (!started) {
      if (Date.now() - failedAt < RETRY_CONNECT_MS) {
        return Promise.reject(new Error("loopwarden is not connected (retrying shortly)"));
      }
      started = client.start().catch((err) => {
        started = undefined;
        failedAt = Date.now();
        logger.error(`loopwarden: ${err instanceof Error ? err.message : String(err)}`);
        throw err;
      });
    }
    return started;
  }

  /** The result with the pending warning of this call appended, once; undefined if none. */
  function withWarning<R extends object>(id: string | undefined, result: R): R | undefined {
    const warning = id ? warnings.get(id) : undefined;
    if (!id || warning === undefined) return undefined;
    warnings.delete(id);
    const text = `[loopwarden] ${warning}`;
    remember(appended, id, text, PENDING_LIMIT);
    const old = (result as { content?: unknown }).content;
    const content = Array.isArray(old) ? old : typeof old === "string" ? [{ type: "text", text: old }] : [];
    return { ...result, content: [...content, { type: "text", text }] } as R;
  }

  /** The tool's own result: without the warning this plugin appended to it. */
  function ownResult(id: string | undefined, result: unknown): unknown {
    const text = id ? appended.get(id) : undefined;
    if (!id || text === undefined) return result;
    appended.delete(id);
    const content = (result as { content?: unknown } | null)?.content;
    if (!Array.isArray(content) || content.length === 0) return result;
    const last = content[content.length - 1] as { type?: unknown; text?: unknown };
    if (last?.type !== "text" || last.text !== text) return result;
    return { ...(result as object), content: content.slice(0, -1) };
  }

  const runOf = (ev: { runId?: string }, ctx: AgentContext) => ev.runId ?? ctx.runId ?? ctx.sessionId ?? ctx.sessionKey;

  async function decide(event: BeforeToolCallEvent, ctx: ToolContext): Promise<Decision | undefined> {
    const runId = runOf(event, ctx);
    if (!runId) return undefined;
    const aborted = client.aborted.get(runId); // holds even when Kafka is out of reach now
    if (aborted) return aborted;
    const toolCallId = event.toolCallId ?? ctx.toolCallId ?? null;
    try {
      const c = await withTimeout(ready(), config.timeoutMs);
      return await c.check(runId, event.toolName, event.params, {
        toolCallId, agentId: ctx.agentId ?? null, sessionId: ctx.sessionId ?? ctx.sessionKey ?? null,
      });
    } catch (err) {
      client.degraded += 1;
      const why = err instanceof Error ? err.message : String(err);
      return client.fallback(
        { type: "tool_call", run_id: runId, seq: 0, gateway_id: config.gatewayId, tool_name: event.toolName, tool_call_id: toolCallId },
        why,
      );
    }
  }

  /** Stops the turn a paused call belongs to, if OpenClaw lets the plugin; says what came
   * of it, for the log. Never throws: the call is blocked either way. */
  async function stopCurrentTurn(runId: string, ctx: ToolContext): Promise<string> {
    if (!stopTurn) return "the turn goes on: no way to stop it here";
    try {
      const stopped = await stopTurn({ runId, sessionId: ctx.sessionId, sessionKey: ctx.sessionKey });
      return stopped ? "the current turn is stopped" : "the turn goes on: OpenClaw had no active run to stop";
    } catch (err) {
      return `the turn goes on: stopping it failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  }

  return {
    client,

    async before_tool_call(event: BeforeToolCallEvent, ctx: ToolContext) {
      const d = await decide(event, ctx);
      if (!d) return undefined;
      const tool = event.toolName;
      const detector = d.detector ?? "no detector";
      if (d.enforced === false) {
        logger.debug?.(`loopwarden shadow ${d.shadow_action ?? d.action} ${tool} in run ${d.run_id} (${detector}, ` +
          `not enforced; allowed)${d.message ? `: ${d.message}` : ""}`);
        return undefined;
      }
      const toolCallId = event.toolCallId ?? ctx.toolCallId;
      if (isPause(d)) {
        if (toolCallId) remember(blocked, toolCallId, undefined, PENDING_LIMIT);
        const reason = d.message ?? `loopwarden: paused by a fleet spend cap (${d.fleet_signal ?? detector})`;
        const turn = await stopCurrentTurn(d.run_id, ctx);
        logger.warn(`loopwarden pause ${tool} in run ${d.run_id} (${detector}; ${turn}): ${reason}`);
        return { block: true, blockReason: reason };
      }
      if (d.action === "block" || d.action === "abort") {
        if (toolCallId) remember(blocked, toolCallId, undefined, PENDING_LIMIT);
        const reason = d.message ?? `loopwarden: ${d.action} (${detector})`;
        logger.warn(`loopwarden ${d.action} ${tool} in run ${d.run_id} (${detector}): ${reason}`);
        return { block: true, blockReason: reason };
      }
      if (d.action === "warn" && d.message) {
        logger.warn(`loopwarden warning for ${tool} in run ${d.run_id} (${detector}): ${d.message}`);
        if (toolCallId) remember(warnings, toolCallId, d.message, PENDING_LIMIT);
      }
      return undefined;
    },

    async after_tool_call(event: AfterToolCallEvent, ctx: ToolContext) {
      const runId = runOf(event, ctx);
      const toolCallId = event.toolCallId ?? ctx.toolCallId;
      if (!runId || (toolCallId && blocked.delete(toolCallId))) return;
      try {
        const c = await withTimeout(ready(), config.timeoutMs);
        const outcome = event.error !== undefined ? { error: event.error } : { result: ownResult(toolCallId, event.result) };
        await c.result(runId, event.toolName, event.params, outcome, {
          toolCallId: toolCallId ?? null, agentId: ctx.agentId ?? null, sessionId: ctx.sessionId ?? ctx.sessionKey ?? null,
        });
      } catch (err) {
        logger.warn(`loopwarden: the result of ${event.toolName} was not sent: ${err instanceof Error ? err.message : err}`);
      }
    },

    /** Appends a pending warning to the result the model sees (OpenClaw's agent tool-result
     * middleware, registered when the host offers it). */
    tool_result_middleware<R extends object>(event: { toolCallId: string; result: R }, _ctx: unknown) {
      const result = withWarning(event.toolCallId, event.result);
      return result ? { result } : undefined;
    },

    /** Appends a warning the middleware did not deliver to the result message written to the
     * session transcript (synchronous, as OpenClaw requires). */
    tool_result_persist<M extends object>(event: { toolCallId?: string; message: M }, ctx: { toolCallId?: string }) {
      const message = withWarning(event.toolCallId ?? ctx.toolCallId, event.message);
      return message ? { message } : undefined;
    },

    /** Reports an attempt's usage (see the module docstring); a budget it spends aborts the
     * run, and the run's next tool call is blocked. */
    async llm_output(event: LlmOutputEvent, ctx: AgentContext) {
      const runId = runOf(event, ctx);
      const usage = usageOf(event);
      if (!runId || !usage) return;
      try {
        await (await withTimeout(ready(), config.timeoutMs)).usage(runId, {
          ...usage, agentId: ctx.agentId ?? null, sessionId: ctx.sessionId ?? event.sessionId ?? ctx.sessionKey ?? null,
        });
      } catch (err) {
        logger.warn(`loopwarden: usage of run ${runId} not sent: ${err instanceof Error ? err.message : err}`);
      }
    },

    async after_compaction(_event: unknown, ctx: AgentContext) {
      const runId = runOf({}, ctx);
      if (!runId) return;
      try {
        await (await withTimeout(ready(), config.timeoutMs)).compactionRetry(runId, { agentId: ctx.agentId ?? null });
      } catch (err) {
        logger.warn(`loopwarden: compaction of run ${runId} not sent: ${err instanceof Error ? err.message : err}`);
      }
    },

    async agent_end(event: { runId?: string }, ctx: AgentContext) {
      const runId = runOf(event, ctx);
      if (!runId) return;
      try {
        await (await withTimeout(ready(), config.timeoutMs)).endRun(runId, { agentId: ctx.agentId ?? null });
      } catch (err) {
        logger.warn(`loopwarden: end of run ${runId} not sent: ${err instanceof Error ? err.message : err}`);
      }
    },

    /** Connects when the gateway starts, so the first tool call does not wait for it. */
    async gateway_start() {
      await ready().catch(() => undefined); // logged by ready(); the calls retry
    },

    async gateway_stop() {
      await client.close();
      started = undefined;
    },
  };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no connection to Kafka within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export { FAIL_CLOSED };
