/**
 * The OpenClaw plugin entry: `plugins.entries.loopwarden.config` (validated by the
 * configSchema of openclaw.plugin.json) -> one GatewayClient per gateway and the hooks of
 * plugin.ts. Only types come from the `openclaw` package, so the plugin runs with no
 * dependency on it besides the host that loads it.
 */
import type { OpenClawPluginApi, OpenClawPluginDefinition } from "openclaw/plugin-sdk/plugin-entry";
import { createHooks, resolveConfig } from "./plugin.ts";

const plugin = {
  id: "loopwarden",
  name: "loopwarden",
  description: "Fleet-wide guard against runaway tool loops: every tool call is checked by a loopwarden worker over Kafka.",
  register(api: OpenClawPluginApi) {
    const config = resolveConfig(api.pluginConfig);
    const hooks = createHooks(config, api.logger);
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
