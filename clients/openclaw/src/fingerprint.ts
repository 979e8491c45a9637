/**
 * Call signatures, outcome digests and privacy mode (semantics.md section 2 and 7).
 * A gateway in privacy mode sends the values computed here instead of params, results and
 * errors; they must equal what the worker computes from the raw event, so every rule
 * follows the Python worker exactly (tests/vectors holds the cases both are checked on).
 * Inputs are wire values (see toWire): `undefined` means absent, `null` is JSON null.
 */
import { canon, digest, isObject } from "./canonical.ts";

const ALIASES: Record<string, string> = { bash: "exec", "apply-patch": "apply_patch" };
// The worker's patterns use ASCII white space for \s and ASCII letters only.
const UNKNOWN_TOOL = [
  /unknown tool[:\t\n\v\f\r ]+["']?([a-z0-9_.-]+)/i,
  /tool[\t\n\v\f\r ]+["']?([a-z0-9_.-]+)["']?[\t\n\v\f\r ]+(?:not found|is not available)/i,
];
const POLL_ACTIONS = new Set(["poll", "log"]);
const SEND_ACTIONS = new Set([
  "send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment", "upload-file", "sticker", "poll",
]);
const VOLATILE_KEYS = new Set([
  "messageId", "message_id", "messageIds", "platformMessageId", "platformMessageIds", "fileId", "file_id",
  "fileKey", "pollId", "poll_id", "receipt", "runId", "idempotencyKey", "ts", "timestamp", "sentAt",
  "deliveredAt", "createdAt",
]);

/** Trimmed (JavaScript's trim), lower-cased, aliases applied. */
export function normalizeToolName(name: string): string {
  const n = name.trim().toLowerCase();
  return ALIASES[n] ?? n;
}

const strOrNull = (v: unknown): string | null => (typeof v === "string" ? v : null);
const filled = (v: unknown): boolean => typeof v === "string" && v.trim() !== "";

/** update_plan params (or result details) reduced to their shape. */
export function planShape(value: unknown): unknown {
  if (!isObject(value)) return value;
  const plan = Array.isArray(value.plan) ? value.plan : [];
  return {
    planLength: plan.length,
    statuses: plan.map((step) => (isObject(step) ? strOrNull(step.status) : null)),
    stepPresence: plan.map((step) => isObject(step) && filled(step.step)),
    hasExplanation: filled(value.explanation),
  };
}

/** args_hash of a call; `tool` must be normalized. */
export function callSignature(tool: string, params: unknown): string {
  return `${tool}:${digest(tool === "update_plan" ? planShape(params) : params)}`;
}

export function isKnownPoll(tool: string, params: unknown): boolean {
  if (tool === "command_status") return true;
  return tool === "process" && isObject(params) && POLL_ACTIONS.has(params.action as string);
}

export function unknownToolIn(message: string): string | null {
  const m = message.trim();
  for (const rx of UNKNOWN_TOOL) {
    const hit = rx.exec(m);
    if (hit) return hit[1].toLowerCase();
  }
  return null;
}

function textOf(result: Record<string, unknown>): string {
  const content = result.content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((e) => isObject(e) && typeof e.type === "string" && typeof e.text === "string")
    .map((e) => (e as { text: string }).text)
    .join("\n")
    .trim();
}

function execOutcome(d: Record<string, unknown>, text: string): string | null {
  const status = d.status;
  if (status === "running") {
    return digest({ status, tail: strOrNull(d.tail) ?? "" });
  }
  if (status === "completed" || status === "failed") {
    const agg = typeof d.aggregated === "string" ? d.aggregated.trim() : "";
    return digest({
      status,
      exitCode: typeof d.exitCode === "number" ? d.exitCode : null,
      timedOut: d.timedOut === true,
      output: agg || text,
    });
  }
  if (status === "approval-pending" || status === "approval-unavailable") {
    return digest({
      status,
      reason: strOrNull(d.reason),
      host: strOrNull(d.host),
      command: strOrNull(d.command) ?? "",
      warningText: strOrNull(d.warningText) ?? "",
    });
  }
  return null;
}

function processOutcome(action: string, d: Record<string, unknown>, text: string): string {
  // A missing status is written as `undefined`; every other missing field is null.
  const status = "status" in d ? d.status : undefined;
  const f = (k: string): unknown => d[k] ?? null;
  if (action === "poll") {
    return digest({ action, status, exitCode: f("exitCode"), exitSignal: f("exitSignal"),
      aggregated: f("aggregated"), text });
  }
  return digest({ action, status, totalLines: f("totalLines"), totalChars: f("totalChars"),
    truncated: f("truncated"), exitCode: f("exitCode"), exitSignal: f("exitSignal"), text });
}

function stripVolatile(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stripVolatile);
  if (!isObject(v)) return v;
  const dropId =
    typeof v.id === "string" &&
    typeof v.text === "string" &&
    (typeof v.direction === "string" || typeof v.senderId === "string" || typeof v.accountId === "string" ||
      isObject(v.conversation));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    if (VOLATILE_KEYS.has(k) || (dropId && k === "id")) continue;
    out[k] = stripVolatile(x);
  }
  return out;
}

function isSendLike(tool: string, params: unknown): boolean {
  if (tool === "sessions_send") return true;
  return tool === "message" && isObject(params) && SEND_ACTIONS.has(params.action as string);
}

export interface Outcome {
  resultHash: string | null;
  unknownToolName: string | null;
}

/** The outcome digest of a raw result (null: none) and the unknown tool its error names. */
export function outcome(tool: string, params: unknown, result: unknown, error: unknown): Outcome {
  if (error !== undefined) {
    const m = typeof error === "string" ? error : canon(error);
    return { resultHash: `error:${digest(m)}`, unknownToolName: unknownToolIn(m) };
  }
  if (result === undefined) return { resultHash: null, unknownToolName: null };
  if (!isObject(result)) return { resultHash: digest(result), unknownToolName: null };
  const details = isObject(result.details) ? result.details : {};
  const text = textOf(result);
  const none = { resultHash: null, unknownToolName: null };
  if (details.status === "blocked" && details.deniedReason === "tool-loop") return none;
  let h: string | null = null;
  if (tool === "exec") h = execOutcome(details, text);
  if (h === null && tool === "process" && isObject(params) && POLL_ACTIONS.has(params.action as string)) {
    h = processOutcome(params.action as string, details, text);
  }
  if (h === null && isSendLike(tool, params)) h = digest(stripVolatile(details));
  if (h === null && tool === "update_plan") h = digest({ details: planShape(details), text: "" });
  if (h === null) h = digest({ details, text });
  return { resultHash: h, unknownToolName: null };
}

/** Wire event fields (wire-format.md); free-form values are wire values. */
export interface WireEvent {
  type: "tool_call" | "tool_result" | "usage" | "compaction_retry" | "run_end";
  run_id: string;
  seq: number;
  gateway_id: string;
  agent_id?: string | null;
  session_id?: string | null;
  ts?: number | null;
  tool_name?: string;
  tool_call_id?: string | null;
  params?: unknown;
  args_hash?: string;
  known_poll?: boolean;
  result?: unknown;
  error?: unknown;
  result_hash?: string;
  unknown_tool_name?: string;
  /** privacy mode: the tool failed (set by the client, not by fingerprint) */
  failed?: boolean;
  input_tokens?: number;
  output_tokens?: number;
  cost_usd?: number;
  model?: string | null;
}

/** The privacy form of an event: hashes instead of params, results and errors. */
export function fingerprint(ev: WireEvent): WireEvent {
  if (ev.type !== "tool_call" && ev.type !== "tool_result") return ev;
  const tool = normalizeToolName(ev.tool_name ?? "");
  const { params, result, error, ...rest } = ev;
  const argsHash = ev.args_hash ?? callSignature(tool, params);
  if (ev.type === "tool_call") {
    const knownPoll = params === undefined && ev.known_poll !== undefined ? ev.known_poll : isKnownPoll(tool, params ?? null);
    return { ...rest, args_hash: argsHash, known_poll: knownPoll };
  }
  const out: WireEvent = { ...rest, args_hash: argsHash };
  let { resultHash, unknownToolName } = ev.result_hash !== undefined
    ? { resultHash: ev.result_hash || null, unknownToolName: null as string | null }
    : outcome(tool, params, result, error);
  if (ev.unknown_tool_name !== undefined) unknownToolName = ev.unknown_tool_name.toLowerCase() || null;
  delete out.result_hash;
  delete out.unknown_tool_name;
  if (resultHash !== null) out.result_hash = resultHash;
  if (unknownToolName !== null) out.unknown_tool_name = unknownToolName;
  return out;
}

/** An event with every optional common field present (null when not given), as the Python
 * client writes it; tool events also get `tool_call_id`. */
export function withDefaults(ev: WireEvent): WireEvent {
  const out: WireEvent = { ...ev, agent_id: ev.agent_id ?? null, session_id: ev.session_id ?? null, ts: ev.ts ?? null };
  if (ev.type === "tool_call" || ev.type === "tool_result") out.tool_call_id = ev.tool_call_id ?? null;
  return out;
}
