"""Fleet administration: what an operator sets up and changes for the whole fleet,
through Kafka, while the workers run.

    topics.py        the topics a deployment needs, with their keys and policies (`loopwarden topics`)
    config_topic.py  the detection configs on the config topic, and the current one (`loopwarden config`)

It builds on the gateway library's settings and connection (`streams.gateway`); the
commands are in `streams/cli.py`.
"""
