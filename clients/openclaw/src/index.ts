/**
 * The OpenClaw plugin entry: `plugins.entries.loopwarden.config` (validated by the
 * configSchema of openclaw.plugin.json) -> one GatewayClient per gateway and the hooks of
 * plugin.ts. Besides types, the one thing taken from the `openclaw` package is the host's
 * abort of a session's active run, imported from the host that loads the plugin at the
 * first spend cap pause (`hostStopTurn`); the plugin has no dependency on the package
 * besides that host.
 */
import type { OpenClawPluginApi, OpenClawPluginDefinition } from "openclaw/plugin-sdk/plugin-entry";
import { createHooks, resolveConfig, type Logger, type StopTurn } from "./plugin.ts";

/**
 * How the plugin stops the current turn on a spend cap's pause. OpenClaw's tool hook can
 * block a call but not end its turn; the plugin SDK's `agent-harness` subpath (an
 * experimental surface) exports the host's abort of a session's active run
 * (`abortAgentHarnessRun`, the abort OpenClaw's `/stop` takes), which stops the attempt
 * after the blocked call's result is recorded; the session's next message starts a new
 * turn. Loaded from the host on first use; a host without it is named once in the log
 * and the pause then blocks each call on its own.
 */
export function hostStopTurn(logger: Logger): StopTurn {
  type Host = { abort: (sessionId: string) => boolean; sessionOf: (sessionKey: string) => string | undefined };
  let host: Promise<Host | undefined> | undefined;
  return async ({ sessionId, sessionKey }) => {
    host ??= import("openclaw/plugin-sdk/agent-harness").then(
      (m): Host => ({ abort: (id) => m.abortAgentHarnessRun(id), sessionOf: m.resolveActiveEmbeddedRunSessionId }),
      (err: unknown) => {
        logger.warn(`loopwarden: this OpenClaw offers no abort of a run to plugins (${err instanceof Error ? err.message : err}); ` +
          "a spend cap's pause blocks each call on its own");
        return undefined;
      },
    );
    const h = await host;
    const id = sessionId ?? (sessionKey ? h?.sessionOf(sessionKey) : undefined);
    return h !== undefined && id !== undefined && h.abort(id);
  };
}

const plugin = {
  id: "loopwarden",
  name: "loopwarden",
  description: "Fleet-wide guard against runaway tool loops: every tool call is checked by a loopwarden worker over Kafka.",
  register(api: OpenClawPluginApi) {
    const config = resolveConfig(api.pluginConfig);
    const hooks = createHooks(config, api.logger, undefined, hostStopTurn(api.logger));
    api.on("before_tool_call", hooks.before_tool_call);
    api.on("after_tool_call", hooks.after_tool_call);
    api.on("tool_result_persist", hooks.tool_result_persist);
    // What the model sees of a warned call's result (needs contracts.agentToolResultMiddleware
    // in openclaw.plugin.json and an explicitly enabled plugin; else the transcript only).
    if (typeof api.registerAgentToolResultMiddleware === "function") {
      api.registerAgentToolResultMiddleware(hooks.tool_result_middleware, { runtimes: ["openclaw", "codex"] });
    }
    // A conversation hook: registered by OpenClaw only with hooks.allowConversationAccess (README).
    api.on("llm_output", hooks.llm_output);
    api.on("after_compaction", hooks.after_compaction);
    api.on("agent_end", hooks.agent_end);
    api.on("gateway_start", hooks.gateway_start);
    api.on("gateway_stop", hooks.gateway_stop);
    api.logger.info(
      `loopwarden: gateway ${config.gatewayId} on ${config.bootstrap} (${config.topicPrefix}*), ` +
        `${config.failPolicy}, timeout ${config.timeoutMs} ms, privacy ${config.privacy ? "on" : "off"}`,
    );
  },
} satisfies OpenClawPluginDefinition;

export default plugin;
