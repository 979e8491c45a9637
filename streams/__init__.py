"""loopwarden's shell, by audience: the gateway library (`gateway/`), fleet
administration (`admin/`), the worker (`worker/`), audits (`audit/`), the tools
(`tools/`) and the `loopwarden` command with its helpers (`cli.py`, `replay.py`,
`times.py`, `progress.py`)."""
