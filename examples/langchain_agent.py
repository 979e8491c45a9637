"""A LangChain agent guarded by loopwarden.

Needs `pip install -e '.[langchain]' langchain-openai`, a broker and a worker
(README, "On Kafka"), and OPENAI_API_KEY to run; importing it needs neither.

    python examples/langchain_agent.py 127.0.0.1:9092
"""

import asyncio
import subprocess
import sys

from langchain.agents import create_agent
from langchain_core.tools import tool

from streams.gateway import GatewayClient
from streams.gateway.adapters.langchain import LoopwardenMiddleware


@tool
def run(command: str) -> str:
    """Run a shell command and return its output."""
    p = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return f"exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"


async def main(bootstrap: str) -> None:
    async with GatewayClient(bootstrap, gateway_id="example-langchain") as client:  # privacy mode, fail-open
        agent = create_agent("openai:gpt-4o-mini", [run], middleware=[LoopwardenMiddleware(client)], name="builder")
        out = await agent.ainvoke({"messages": [{"role": "user", "content": "Build this project with make."}]})
        print(out["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"))
