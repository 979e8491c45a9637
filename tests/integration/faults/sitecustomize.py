"""Fault injection for one worker process (tests/integration/test_lost_fetch.py puts this
folder on the worker's PYTHONPATH): the first LOOPWARDEN_TEST_LOSE_FETCHED records of
the events topic that Faust's consumer fetches are dropped on their way to the agent,
as faust-streaming was seen to do after a start (streams/kafka/delivery.py): every
event fetched, and nothing after them. With LOOPWARDEN_TEST_LOSE_AFTER=K, the first K records go through
and the LOOPWARDEN_TEST_LOSE_FETCHED after them are lost: a hole in the middle of what
reaches the agent. The consumer's position has moved past them; nothing else is changed."""

import os

_LOSE = int(os.environ.get("LOOPWARDEN_TEST_LOSE_FETCHED", "0"))
_AFTER = int(os.environ.get("LOOPWARDEN_TEST_LOSE_AFTER", "0"))

if _LOSE:
    from faust.transport import consumer as _consumer

    _getmany = _consumer.Consumer.getmany
    _lost = 0
    _passed = 0

    async def _losing_getmany(self, timeout):
        global _lost, _passed
        async for tp, message in _getmany(self, timeout):
            if _lost < _LOSE and tp.topic.endswith(".events"):
                if _passed < _AFTER:
                    _passed += 1
                else:
                    _lost += 1
                    continue
            yield tp, message

    _consumer.Consumer.getmany = _losing_getmany
