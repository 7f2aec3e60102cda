"""The operator's live view: gathers SWIM, replica and ranking state into `site_view`.

The SWIM events loop calls `on_swim_event`, the render loop `on_render`; both
wake the ``/ui/events`` streams through the `ChangeSignal`. The ranking is
`grid.core.live.view.explain_all` over the very inputs and signals document the
last render round used (its stabilized-admission holds included), so the page
shows what ``grid explain`` would for them; under poll, what ``grid explain
--as-gateway`` would, the gateway's scores and order.

The traffic panel shows the requests this site's gateways sent to each
cluster, as the last scrape of their admin ``/metrics`` counted them
(`grid.operator.gateway_scrape`); it stays empty without a gateway to read
(``--gateway-metrics`` or ``gatewayRefs[].adminUrl``).
The same scrapes give the scoring panel each candidate's share of the last
minute's selections (``grid_gateway_selections_total{cluster, group}``): the
gateways select, so the counts are theirs, read where the operator already
reads their tokens and traffic.

The routes are mounted on the metrics listener. The view is unauthenticated,
so unless the listener binds a loopback address (or ``--ui-public`` opts in)
it answers only clients connecting from loopback, such as ``kubectl
port-forward``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping

from grid.adapters.health_server import HealthServer
from grid.adapters.live_view import ChangeSignal, LiveViewRoutes, is_loopback
from grid.adapters.swim_node import SwimEvent, SwimNode
from grid.core.address import parse_address
from grid.core.crdt.replica import GridState
from grid.core.live.activity import ActivityLog
from grid.core.live.selections import SelectionKey
from grid.core.live.view import SiteInputs, View, explain_all, site_view
from grid.core.overlay import format_timestamp
from grid.core.resources import GridNetwork
from grid.core.routing.explain import Explanation
from grid.core.routing.render import RenderInputs
from grid.core.routing.signals import SignalsDocument
from grid.core.swim.effects import Deliver, Notify
from grid.errors import GridError

log = logging.getLogger(__name__)


def _now() -> str:
    return format_timestamp(dt.datetime.now(dt.UTC))


class OperatorLiveView:
    """One site's live view over its SWIM node, replica and last render."""

    def __init__(
        self,
        site: str,
        replica: GridState,
        swim: Callable[[], SwimNode | None],
        network: Callable[[], GridNetwork | None] = lambda: None,
        traffic: Callable[[], Mapping[str, int]] = dict,
        selections: Callable[[], Mapping[SelectionKey, int]] = dict,
    ) -> None:
        self.site = site
        self.replica = replica
        self._swim = swim
        self._network = network
        self._traffic = traffic
        self._selections = selections
        self.changes = ChangeSignal()
        self.activity = ActivityLog(site)
        self._explained: list[Explanation] = []
        self.modes: tuple[str, tuple[tuple[str, str], ...]] = ("", ())
        """This site's signal mode and the peers gossiping another (`on_modes`)."""
        self._pending: (
            tuple[RenderInputs, SignalsDocument | None, frozenset[tuple[str, str]] | None] | None
        ) = None
        """The last round's inputs, explained only once a client reads the view."""

    def mount(self, health: HealthServer, metrics_bind: str, public: bool) -> LiveViewRoutes:
        """Serve ``/ui/`` on the metrics listener under the listener's bind policy.

        On a loopback bind, or with ``--ui-public``, every client that reaches the
        listener sees the view. On any other bind only clients on this machine do
        (``kubectl port-forward`` arrives over the pod's loopback); others get 404.
        """
        host, _ = parse_address(metrics_bind)
        routes = LiveViewRoutes(
            self.view, self.changes, loopback_only=not (public or is_loopback(host))
        )
        health.mounts.append(routes.add_to)
        return routes

    def on_swim_event(self, event: SwimEvent) -> None:
        """Note a membership change (or a delivered item: lanes moved)."""
        if isinstance(event, Notify):
            self.activity.record(event.kind.value, event.member, event.incarnation, _now())
        if isinstance(event, Notify | Deliver):
            self.changes.notify()

    def on_modes(self, mode: str, mismatched: tuple[tuple[str, str], ...]) -> None:
        """The round's mode agreement; wakes the streams when it moved."""
        if (mode, mismatched) != self.modes:
            self.modes = (mode, mismatched)
            self.changes.notify()

    def on_render(
        self,
        inputs: RenderInputs | None,
        signals: SignalsDocument | None,
        held: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        """Keep the inputs the render round used; `explanations` explains them when read.

        Explaining every candidate costs about as much as the render itself, so it
        is done only when a client reads the view, once per round. ``held`` is the
        round's stabilized-admission hold set.
        """
        if inputs is None:
            return
        self._pending = (inputs, signals, held)
        self.changes.notify()

    @property
    def explanations(self) -> list[Explanation]:
        """Every model explained from the last round's inputs, as gateways rank it.

        Under poll mode the operator does not score; ``as_gateway`` shows the
        scores and order the poll-mode gateway computes from the same signals.
        A round whose ranking fails keeps the previous explanations.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            inputs, signals, held = pending
            try:
                self._explained = explain_all(
                    inputs, self.site, signals, as_gateway=True, held=held
                )
            except GridError as exc:
                log.warning("live view ranking failed", extra={"code": exc.code})
        return self._explained

    def view(self) -> View:
        """The current `site_view`."""
        swim = self._swim()
        lanes = {}
        for origin in self.replica.origins():
            snapshot = self.replica.snapshot(origin)
            if snapshot is not None and self.replica.trusted(origin):
                lanes[origin] = {lane.value: rev for lane, rev in snapshot.revisions.items()}
        transport: dict[str, int] = {}
        if swim is not None:
            c = swim.counters
            transport = {
                "datagrams_sent": c.datagrams_sent,
                "datagrams_received": c.datagrams_received,
                "push_pulls_completed": c.push_pulls_completed,
                "push_pulls_served": c.push_pulls_served,
            }
        return site_view(
            SiteInputs(
                observer=self.site,
                generated_at=_now(),
                incarnation=swim.machine.incarnation if swim is not None else 0,
                members=swim.members() if swim is not None else (),
                activity=self.activity.entries(),
                transport=transport,
                lanes=lanes,
                explanations=self.explanations,
                traffic=self._traffic(),
                selections=self._selections(),
                budgets=self._budgets(),
                mode=self.modes[0],
                mismatched=self.modes[1],
            )
        )

    def _budgets(self) -> list[dict[str, object]] | None:
        """The served network's ``status.budgetStatus``, when it has any."""
        network = self._network()
        if network is None or network.status is None or not network.status.budget_status:
            return None
        return [b.model_dump(by_alias=True) for b in network.status.budget_status]
