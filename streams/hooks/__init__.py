"""loopwarden for agent runtimes that call hooks around each tool call: Claude Code,
Codex and Gemini CLI. Nothing in the runtimes changes; their hook configs point at
loopwarden.

    runtimes.py   each runtime's hook events, its hook JSON read into one shape, and the
                  answers it understands (standard library only)
    hook.py       `loopwarden-hook RUNTIME EVENT`, the command hook: stdin to the
                  sidecar, its answer to stdout (standard library only, starts fast)
    fast_hook.c   the same hook as a C program, with no interpreter to start; the
                  default of `hooks install`, which builds it (fast.py)
    sidecar.py    `loopwarden hooks serve`: one GatewayClient behind a local HTTP
                  endpoint per runtime and hook event
    transcripts.py  model usage read from a runtime's transcript, for run budgets
    install.py    `loopwarden hooks install`: the runtime's hook config written or merged

This package imports nothing at import time: `hook.py` must start without the
client, msgspec or aiokafka (a test checks it with `python -X importtime`).
"""
