"""An OpenAI Agents SDK agent guarded by loopwarden.

Needs `pip install -e '.[openai-agents]'`, a broker and a worker (README, "On Kafka"),
and OPENAI_API_KEY to run; importing it needs neither.

    python examples/openai_agents_agent.py 127.0.0.1:9092
"""

import asyncio
import subprocess
import sys

from agents import Agent, function_tool

from streams.gateway import GatewayClient
from streams.gateway.adapters.openai_agents import LoopwardenGuard


@function_tool
def run(command: str) -> str:
    """Run a shell command and return its output."""
    p = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return f"exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"


async def main(bootstrap: str) -> None:
    async with GatewayClient(bootstrap, gateway_id="example-openai-agents") as client:  # privacy mode, fail-open
        guard = LoopwardenGuard(client)
        agent = Agent(name="builder", instructions="You build software projects.", tools=guard.protect([run]))
        result = await guard.run(agent, "Build this project with make.")
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"))
