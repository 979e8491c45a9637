"""loopwarden's shell: the Faust app, topics, the gateway client and the CLI."""
