"""Usage bounds: an answer is billed at most what its request allows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from grid.core.metering.bounds import (
    PROMPT_ALLOWANCE,
    TOKENS_CEILING,
    UsageBound,
    billable,
    usage_bound,
)
from grid.core.metering.usage import TOKENS_MAX, Usage


def test_the_bound_follows_max_tokens_n_and_the_body() -> None:
    assert usage_bound({"max_tokens": 50}, 100) == UsageBound(100 + PROMPT_ALLOWANCE, 4246)
    both = {"max_tokens": 50, "max_completion_tokens": 10, "n": 3}
    assert usage_bound(both, 0).total_max == PROMPT_ALLOWANCE + 30
    assert usage_bound({}, 10) == UsageBound(10 + PROMPT_ALLOWANCE, TOKENS_CEILING)
    assert usage_bound({"max_tokens": True}, 0).total_max == TOKENS_CEILING
    assert usage_bound({"max_tokens": 10**12}, 0).total_max == TOKENS_CEILING
    assert usage_bound("not a dict", 5, ceiling=100).total_max == 100


COUNT = st.integers(0, TOKENS_MAX)


@given(COUNT, COUNT, st.integers(0, 10**6), st.integers(0, 10**7))
def test_what_is_billed_never_exceeds_the_bound_and_a_plausible_answer_is_billed_as_is(
    prompt: int, completion: int, prompt_max: int, extra: int
) -> None:
    bound = UsageBound(prompt_max, prompt_max + extra)
    billed, plausible = billable(Usage(prompt, completion), bound)
    assert billed.prompt_tokens <= bound.prompt_max
    assert billed.prompt_tokens + billed.completion_tokens <= bound.total_max
    assert billed.prompt_tokens <= prompt and billed.completion_tokens <= completion
    assert plausible == (billed == Usage(prompt, completion))
