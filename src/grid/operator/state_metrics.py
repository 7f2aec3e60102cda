"""What the operator knows of the grid, as gauges on ``/metrics``, read at scrape time.

Alert rules and dashboards (``deploy/prometheus``, ``deploy/grafana``) need the
state the operator already holds, not only its counters:

* ``grid_site_phase{site, phase}``: each GridSite's phase as this site sees it,
  a state set like kube-state-metrics' ``kube_pod_status_phase`` (1 for the
  current phase, 0 for the other five), upstream Grid's name and shape;
* ``grid_network_phase{network, phase}``: the served GridNetwork's phase, the
  same way;
* ``grid_overlay_failed_rounds``: render rounds in a row in which a served
  gateway's overlay failed to render or to be written (0 after a clean round);
* ``grid_overlay_candidate_fresh{site, cluster}``: 1 while every candidate of
  that site's cluster in this site's last rendered overlays is fresh, 0 while
  one is not (its provider is Degraded or its signal sample is older than 60 s);
* ``grid_budget_spend_ratio{tenant}``: each budgetPolicy tenant's spend over
  its cap as this site sees it (§12), for the tenants the policy names only.

Label values are closed enums (phases) or names the resources define (sites,
clusters, the network, policy tenants), never anything a client sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from grid.core.resources import GridNetwork
from grid.core.resources.phases import NetworkPhase, SitePhase

if TYPE_CHECKING:
    from grid.operator.network import ServedNetwork
    from grid.operator.overlay_loop import OverlayLoop
    from grid.operator.sites import SiteController


@dataclass(frozen=True)
class OperatorState:
    """Where the collector reads each gauge from (callables: read at scrape time)."""

    site_phases: Callable[[], Mapping[str, SitePhase]]
    network: Callable[[], GridNetwork | None]
    failed_rounds: Callable[[], int]
    freshness: Callable[[], Mapping[tuple[str, str], bool]]
    budgets: Callable[[], Sequence[Mapping[str, Any]]]


class OperatorStateCollector(Collector):
    """Exports `OperatorState` as the gauges the module docstring lists."""

    def __init__(self, state: OperatorState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges as the operator holds them now."""
        sites = GaugeMetricFamily(
            "grid_site_phase",
            "GridSite phase as this site sees it: 1 for the current phase, 0 for the others.",
            labels=["site", "phase"],
        )
        for site, current in sorted(self._state.site_phases().items()):
            for phase in SitePhase:
                sites.add_metric([site, phase.value], float(phase is current))
        yield sites
        networks = GaugeMetricFamily(
            "grid_network_phase",
            "The served GridNetwork's phase: 1 for the current phase, 0 for the others.",
            labels=["network", "phase"],
        )
        served = self._state.network()
        if served is not None:
            for network_phase in NetworkPhase:
                networks.add_metric(
                    [served.name, network_phase.value], float(network_phase is served.phase)
                )
        yield networks
        yield GaugeMetricFamily(
            "grid_overlay_failed_rounds",
            "Render rounds in a row in which a served gateway's overlay failed to render "
            "or be written; 0 after a clean round.",
            value=self._state.failed_rounds(),
        )
        fresh = GaugeMetricFamily(
            "grid_overlay_candidate_fresh",
            "1 while every rendered candidate of the site's cluster is fresh, 0 while one "
            "is not (Degraded, or its signal sample is older than 60 s).",
            labels=["site", "cluster"],
        )
        for (site, cluster), ok in sorted(self._state.freshness().items()):
            fresh.add_metric([site, cluster], float(ok))
        yield fresh
        ratios = GaugeMetricFamily(
            "grid_budget_spend_ratio",
            "A budgetPolicy tenant's spend over its cap as this site sees it (1 at the cap).",
            labels=["tenant"],
        )
        for item in self._state.budgets():
            ratios.add_metric([str(item["tenantId"])], float(item["spendRatio"]))
        yield ratios


def state_collector(
    sites: SiteController, served: ServedNetwork, overlays: OverlayLoop
) -> OperatorStateCollector:
    """The collector of one operator, reading its controllers' current state."""
    return OperatorStateCollector(
        OperatorState(
            site_phases=lambda: sites.phases,
            network=lambda: served.network,
            failed_rounds=lambda: overlays.failed_rounds,
            freshness=lambda: overlays.last_round.freshness,
            budgets=lambda: overlays.budget_status,
        )
    )
