// The plugin as OpenClaw runs it: its entry's register() is given an api whose `on`
// collects the handlers into a registry for OpenClaw's own global hook runner; tools are
// wrapped with OpenClaw's before_tool_call wrapper, and after_tool_call and
// tool_result_persist are run by OpenClaw's hook runner, as its agent runner does.
import { initializeGlobalHookRunner, resetGlobalHookRunner } from "openclaw/plugin-sdk/hook-runtime";
import {
  createAgentToolResultMiddlewareRunner,
  wrapToolWithBeforeToolCallHook,
  type AgentToolResultMiddleware,
} from "openclaw/plugin-sdk/agent-harness-runtime";
import { getGlobalHookRunner, type OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-runtime";
import plugin from "../src/index.ts";

export interface Logged {
  level: string;
  message: string;
}

type Registration = { pluginId: string; hookName: string; handler: unknown; source: string };

/** Hand handlers to OpenClaw's global hook runner, as its loader does after register(). */
export function install(typedHooks: Registration[]) {
  resetGlobalHookRunner();
  initializeGlobalHookRunner({ plugins: [{ id: "loopwarden", status: "loaded" }], hooks: [], typedHooks } as never);
  return getGlobalHookRunner()!;
}

export function loadPlugin(pluginConfig: Record<string, unknown>) {
  const typedHooks: Registration[] = [];
  const middlewares: AgentToolResultMiddleware[] = [];
  const logs: Logged[] = [];
  const api = {
    id: "loopwarden",
    name: "loopwarden",
    pluginConfig,
    logger: {
      debug: (message: string) => logs.push({ level: "debug", message }),
      info: (message: string) => logs.push({ level: "info", message }),
      warn: (message: string) => logs.push({ level: "warn", message }),
      error: (message: string) => logs.push({ level: "error", message }),
    },
    on(hookName: string, handler: unknown) {
      typedHooks.push({ pluginId: "loopwarden", hookName, handler, source: "test" });
    },
    registerAgentToolResultMiddleware(handler: AgentToolResultMiddleware, options: { runtimes?: string[] }) {
      if (options.runtimes?.includes("openclaw")) middlewares.push(handler);
    },
  } as unknown as OpenClawPluginApi;
  plugin.register(api);
  return { typedHooks, middlewares, logs, runner: install(typedHooks) };
}

export interface ToolOutput {
  content: { type: string; text?: string }[];
  details?: Record<string, unknown>;
}

/** One agent run calling tools through OpenClaw's wrapper and hook runner. */
export class AgentRun {
  readonly ctx: { agentId: string; sessionKey: string; sessionId: string; runId: string };
  #calls = 0;
  readonly runner: NonNullable<ReturnType<typeof getGlobalHookRunner>>;
  readonly middlewares: AgentToolResultMiddleware[];
  constructor(runner: NonNullable<ReturnType<typeof getGlobalHookRunner>>, runId: string,
    middlewares: AgentToolResultMiddleware[] = [], agentId = "main") {
    this.runner = runner;
    this.middlewares = middlewares;
    this.ctx = { agentId, sessionKey: `agent:${agentId}:${runId}`, sessionId: `session-${runId}`, runId };
  }

  /** Call a tool the way the runner does; returns what the model sees and the persisted message. */
  async call(name: string, params: Record<string, unknown>, execute: () => ToolOutput) {
    this.#calls += 1;
    const toolCallId = `${this.ctx.runId}-call-${this.#calls}`;
    let ran = false;
    const tool = {
      name, label: name, description: name, parameters: { type: "object", properties: {} },
      execute: async () => {
        ran = true;
        return execute();
      },
    };
    const wrapped = wrapToolWithBeforeToolCallHook(tool as never, this.ctx);
    const raw = await wrapped.execute(toolCallId, params, undefined as never, undefined as never);
    // What the model gets: the tool's result through OpenClaw's tool-result middleware runner.
    const result = (await createAgentToolResultMiddlewareRunner({ runtime: "openclaw", ...this.ctx }, this.middlewares)
      .applyToolResultMiddleware({ toolCallId, toolName: name, args: params, result: raw as never })) as unknown as ToolOutput;
    await this.runner.runAfterToolCall(
      { toolName: name, params, runId: this.ctx.runId, toolCallId, result }, // as the runner reports it
      { ...this.ctx, toolName: name, toolCallId },
    );
    const message = { role: "toolResult", toolCallId, toolName: name, content: result.content, isError: false, timestamp: 0 };
    const persisted = this.runner.runToolResultPersist(
      { toolName: name, toolCallId, message: message as never },
      { agentId: this.ctx.agentId, sessionKey: this.ctx.sessionKey, toolName: name, toolCallId },
    )?.message ?? message;
    const text = result.content.map((c) => c.text ?? "").join("\n");
    const persistedText = ((persisted as { content: { text?: string }[] }).content).map((c) => c.text ?? "").join("\n");
    return { ran, result, text, persistedText };
  }

  /** The end of a model attempt as OpenClaw's embedded runner reports it: llm_output with
   * the attempt's usage (every model call of the attempt, summed). */
  async llmOutput(usage: { input?: number; output?: number; cacheRead?: number; cacheWrite?: number; total?: number },
    model = "scripted-1"): Promise<void> {
    await this.runner.runLlmOutput(
      { runId: this.ctx.runId, sessionId: this.ctx.sessionId, provider: "test", model, resolvedRef: `test/${model}`,
        assistantTexts: [], usage },
      { ...this.ctx, trigger: "user" },
    );
  }

  async end(): Promise<void> {
    await this.runner.runAgentEnd({ runId: this.ctx.runId, messages: [], success: true }, this.ctx);
  }

  async compacted(): Promise<void> {
    await this.runner.runAfterCompaction({ messageCount: 3, compactedCount: 10 }, this.ctx);
  }
}
