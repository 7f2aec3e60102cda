"""One LiteLLM Router replaying arrivals, run with the bench virtualenv's Python.

bench/routing.py starts one worker per gateway, as LiteLLM's proxy would run
one Router per replica, each seeing only its own traffic. The worker imports
nothing of Grid (it runs in ``.bench/litellm``): it reads one JSON command a
line on stdin and answers each with one ``RESULT {json}`` line on stdout (latencies,
the end time and
the failures counted by exception class).

A command is ``{"strategy", "model", "deployments": [{"api_base", "weight"}],
"arrivals": [seconds, ...], "start_at": epoch seconds, "timeout_s"}``. A fresh
Router (no state carried over from the previous run) sends each arrival at
``start_at`` plus its offset, open loop, and the answer lists each request's
latency from its scheduled arrival (``null`` for a failure).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import Router

litellm.suppress_debug_info = True
litellm.telemetry = False


def router(command: dict[str, Any]) -> Router:
    """A Router over the command's deployments with its routing strategy."""
    model = command["model"]
    deployments = [
        {
            "model_name": model,
            "litellm_params": {
                "model": f"openai/{model}",
                "api_base": d["api_base"],
                "api_key": "sk-bench-token",
                "weight": d.get("weight", 1),
            },
            "model_info": {"id": f"deployment-{i}"},
        }
        for i, d in enumerate(command["deployments"])
    ]
    return Router(
        model_list=deployments,
        routing_strategy=command["strategy"],
        num_retries=0,
        timeout=command.get("timeout_s", 60),
        disable_cooldowns=True,
    )


async def replay(command: dict[str, Any]) -> dict[str, Any]:
    """Send every arrival at its time; latencies from the scheduled arrival."""
    routing = router(command)
    model = command["model"]
    messages = [{"role": "user", "content": "route this request"}]
    # The schedule in this process's perf_counter, from the shared wall-clock start.
    start = time.perf_counter() + (float(command["start_at"]) - time.time())

    failures: dict[str, int] = {}

    async def one(due: float) -> float | None:
        try:
            await routing.acompletion(model=model, messages=messages)
        except Exception as exc:  # any failure of the request counts as an error
            kind = type(exc).__name__
            failures[kind] = failures.get(kind, 0) + 1
            return None
        return time.perf_counter() - due

    tasks = []
    for offset in command["arrivals"]:
        due = start + float(offset)
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    latencies = await asyncio.gather(*tasks)
    return {"latencies": latencies, "ended_at": time.time(), "failures": failures}


async def serve() -> None:
    loop = asyncio.get_running_loop()
    print("READY", flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        result = await replay(json.loads(line))
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(serve())
