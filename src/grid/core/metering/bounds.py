"""How many tokens one answer can plausibly have used, and what is billed when it claims more.

A provider reports its own usage, so a hostile or broken one could put any
tenant over budget with one answer. The gateway bounds each answer by what the
request allows:

- **prompt**: at most the request body's length in bytes plus
  ``prompt_allowance`` (a token is at least one byte of text; the allowance
  covers chat-template tokens and images sent by reference);
- **total**: at most the prompt bound plus the completion the request allows,
  ``max_completion_tokens`` (else ``max_tokens``) times ``n``; a request that
  names no limit is bounded by ``ceiling`` alone, which also caps every answer.

An answer over its bound is implausible: it is billed at the bound (prompt
clamped first, the completion given what is left), never at the reported
counts, and the caller counts and logs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.core.metering.usage import Usage

TOKENS_CEILING = 1 << 20
"""Default most tokens one answer is billed (1,048,576): above any context window served
today, far below what would exhaust a budget at once."""

PROMPT_ALLOWANCE = 4096
"""Default tokens allowed beyond the body's bytes for the prompt (template, images by URL)."""

CHOICES_MAX = 128
"""Most choices (``n``) an answer is believed to carry."""


@dataclass(frozen=True, slots=True)
class UsageBound:
    """The most tokens one answer may be billed."""

    prompt_max: int
    total_max: int


def _limit(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_bound(
    request: object,
    body_bytes: int,
    ceiling: int = TOKENS_CEILING,
    prompt_allowance: int = PROMPT_ALLOWANCE,
) -> UsageBound:
    """The bound of the answer to ``request`` (its decoded JSON body of ``body_bytes``)."""
    prompt_max = min(ceiling, body_bytes + prompt_allowance)
    document = request if isinstance(request, dict) else {}
    completion = _limit(document.get("max_completion_tokens"))
    if completion is None:
        completion = _limit(document.get("max_tokens"))
    if completion is None:
        return UsageBound(prompt_max, ceiling)
    choices = _limit(document.get("n"))
    choices = 1 if not choices else min(choices, CHOICES_MAX)
    return UsageBound(prompt_max, min(ceiling, prompt_max + completion * choices))


def billable(usage: Usage, bound: UsageBound) -> tuple[Usage, bool]:
    """(what to bill, whether the answer was plausible)."""
    total = usage.prompt_tokens + usage.completion_tokens
    if usage.prompt_tokens <= bound.prompt_max and total <= bound.total_max:
        return usage, True
    prompt = min(usage.prompt_tokens, bound.prompt_max)
    completion = min(usage.completion_tokens, max(0, bound.total_max - prompt))
    return Usage(prompt, completion), False
