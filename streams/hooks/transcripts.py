"""Model usage read from a runtime's transcript (the hook input's `transcript_path`), so
hook-guarded runs have run budgets too (semantics.md section 8). Each read takes the
lines appended since the last one; a model response counted once is never counted
again, and a line that is not what is looked for is skipped.

- Claude Code: the session's JSONL transcript; an `assistant` entry's `message.usage`
  (the Messages API's `input_tokens`, `cache_creation_input_tokens`,
  `cache_read_input_tokens`, `output_tokens`), once per `message.id` (one response is
  written as several entries).
- Codex: the session's rollout JSONL; an `event_msg` of type `token_count` gives the
  last model call's `info.last_token_usage` (`input_tokens`, cached ones included, and
  `output_tokens`), counted once per `info.total_token_usage` (it is cumulative, so a
  repeated event repeats it); the model is the latest `turn_context`'s.
- Gemini CLI: the session's JSONL record; a `gemini` message's `tokens` (`input`;
  `output` plus `thoughts`), once per message `id` (a message is appended again when
  it changes). A legacy single-document `.json` transcript gives none.

Input tokens count cached ones, as the usage event's `input_tokens` does (wire-format.md).
Costs are not in transcripts: usage is reported at cost 0, so only token budgets apply.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

MAX_READ = 8 << 20  # bytes read from a transcript per hook, at most (the rest on later hooks)
_KEYS = 4096  # responses remembered per transcript, against counting one twice


@dataclass(frozen=True)
class ModelCall:
    input_tokens: int
    output_tokens: int
    model: str | None


class Tail:
    """One transcript, read incrementally: `read()` returns the model calls written to it
    since the previous read."""

    def __init__(self, runtime: str, path: str) -> None:
        self.runtime = runtime
        self.path = path
        self.offset = 0
        self.model: str | None = None  # Codex: the model of the latest turn_context
        self._seen: dict[Any, None] = {}

    def read(self) -> list[ModelCall]:
        try:
            size = os.stat(self.path).st_size
            if size < self.offset:  # rewritten from the start
                self.offset = 0
            if size == self.offset:
                return []
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(MAX_READ)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []  # a line still being written
        self.offset += end + 1
        calls = []
        for line in data[: end + 1].splitlines():
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue
            call = self._call(entry) if isinstance(entry, dict) else None
            if call is not None:
                calls.append(call)
        return calls

    def _once(self, key: Any) -> bool:
        """Whether `key` is new (and remember it)."""
        if key is None or key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > _KEYS:
            del self._seen[next(iter(self._seen))]
        return True

    def _call(self, e: dict[str, Any]) -> ModelCall | None:
        if self.runtime == "claude-code":
            msg = e.get("message")
            if e.get("type") != "assistant" or not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict):
                return None
            u = msg["usage"]
            tokens_in = _count(u, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            tokens_out = _count(u, "output_tokens")
            key = msg.get("id") or e.get("requestId") or e.get("uuid")
            return _made(tokens_in, tokens_out, _str(msg.get("model"))) if self._once(key) else None
        if self.runtime == "codex":
            p = e.get("payload")
            if not isinstance(p, dict):
                return None
            if e.get("type") == "turn_context":
                self.model = _str(p.get("model")) or self.model
                return None
            info = p.get("info")
            if e.get("type") != "event_msg" or p.get("type") != "token_count" or not isinstance(info, dict):
                return None
            last, total = info.get("last_token_usage"), info.get("total_token_usage")
            if not isinstance(last, dict) or not self._once(json.dumps(total, sort_keys=True)):
                return None
            return _made(_count(last, "input_tokens"), _count(last, "output_tokens"), self.model)
        if self.runtime == "gemini-cli":
            t = e.get("tokens")
            if e.get("type") != "gemini" or not isinstance(t, dict) or not self._once(e.get("id")):
                return None
            return _made(_count(t, "input"), _count(t, "output", "thoughts"), _str(e.get("model")))
        return None


def _count(d: dict[str, Any], *names: str) -> int | None:
    """The sum of the named counts; None when one is there but not a whole number >= 0."""
    total = 0
    for n in names:
        v = d.get(n, 0)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None
        total += v
    return total


def _made(tokens_in: int | None, tokens_out: int | None, model: str | None) -> ModelCall | None:
    if tokens_in is None or tokens_out is None or tokens_in + tokens_out == 0:
        return None
    return ModelCall(tokens_in, tokens_out, model)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None
