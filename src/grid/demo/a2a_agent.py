"""The demo's A2A agent ``planner``, built with the official ``a2a-sdk`` server (§16).

`planner_app` is a Starlette app made of the SDK's own routes: the agent card at
the SDK's well-known path (``/.well-known/agent-card.json``) and JSON-RPC at ``/``
(``SendMessage`` and the streaming ``SendStreamingMessage``, answered over Server-Sent
Events). The agent answers every message with one message: a short plan for the
text it was sent, the same plan for the same text (`plan_text`).
``python -m grid.demo.a2a_agent --site S --port P`` serves it at
``http://127.0.0.1:P/`` until interrupted.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from starlette.applications import Starlette

AGENT_NAME = "planner"
"""The demo agent's name: its AgentToAgentProvider and its ``a2a_agent`` candidates."""
RPC_PATH = "/"
"""Where the agent serves JSON-RPC (the SDK's ``DEFAULT_RPC_URL``)."""
GOAL_CHARS_MAX = 200
"""Longest part of a goal echoed back in the plan."""


def plan_text(goal: str, site: str) -> str:
    """The plan for ``goal``: three numbered steps, deterministic."""
    subject = " ".join(goal.split())[:GOAL_CHARS_MAX] or "nothing in particular"
    return (
        f"plan for {subject!r} (planner at {site}): "
        f"1. gather what is known about {subject}; "
        f"2. list the options and their costs; "
        f"3. pick one and write down the next step"
    )


class PlannerExecutor(AgentExecutor):
    """Answers a message with one agent message holding `plan_text`."""

    def __init__(self, site: str) -> None:
        self.site = site

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """One message in, one plan out."""
        text = plan_text(context.get_user_input(), self.site)
        await event_queue.enqueue_event(
            new_text_message(text, context_id=context.context_id, task_id=context.task_id)
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Nothing runs long enough to cancel."""


def planner_card(site: str, url: str) -> AgentCard:
    """The planner's agent card; ``url`` is its JSON-RPC endpoint."""
    return AgentCard(
        name=AGENT_NAME,
        description=f"Plans a goal in three steps (site {site}).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="plan",
                name="plan",
                description="A three-step plan for a goal.",
                tags=["planning"],
                examples=["plan a launch"],
            )
        ],
    )


def planner_app(site: str, url: str) -> Any:
    """The planner as an ASGI app: the SDK's card and JSON-RPC routes."""
    card = planner_card(site, url)
    handler = DefaultRequestHandler(
        agent_executor=PlannerExecutor(site),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH)]
    return Starlette(routes=routes)


def run_planner(site: str, port: int) -> None:
    """Serve `planner_app` at ``http://127.0.0.1:port/`` until interrupted."""
    app = planner_app(site, f"http://127.0.0.1:{port}{RPC_PATH}")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    """``--site`` and ``--port``, then `run_planner`."""
    parser = argparse.ArgumentParser(description="The demo's A2A agent.")
    parser.add_argument("--site", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    run_planner(args.site, args.port)


if __name__ == "__main__":
    main()
