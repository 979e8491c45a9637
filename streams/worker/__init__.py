"""The worker: the Faust app that folds the events topic and publishes decisions.

Needs the `worker` extra (faust-streaming, prometheus-client): `pip install loopwarden[worker]`.
"""
