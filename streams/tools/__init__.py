"""Tools around the worker: the local broker, the simulator, the demo, the live table."""
