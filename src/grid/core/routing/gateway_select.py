"""Which GridNetwork and gateway a render is for (`select_gateway`, `select_network`).

A render names a gateway (and maybe its namespace); the network that lists it
in ``spec.gatewayRefs`` is the one rendered, from that gateway's site. An
operator serves the network its own GridSite names. Both refuse an ambiguous
or missing choice with a `ValidationError` that says how to resolve it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from grid.core.resources import GridNetwork, GridSite
from grid.errors import ValidationError

DEFAULT_NAMESPACE = "default"
"""The gateway namespace when neither ``--namespace`` nor the gatewayRef names one."""


def select_gateway(
    networks: Iterable[GridNetwork], gateway: str, namespace: str | None
) -> tuple[GridNetwork, str | None, str]:
    """The network listing ``gateway``, the gateway's localSiteName and namespace.

    Raises `ValidationError` when no network (or more than one) lists it.
    """
    matches = [
        (network, ref)
        for network in networks
        for ref in network.spec.gateway_refs
        if ref.name == gateway and (namespace is None or ref.namespace in (None, namespace))
    ]
    where = f" in namespace {namespace!r}" if namespace else ""
    if not matches:
        raise ValidationError(
            f"no GridNetwork lists gateway {gateway!r}{where} in spec.gatewayRefs",
            path="spec.gatewayRefs",
        )
    if len(matches) > 1:
        names = ", ".join(sorted(f"{n.name}" for n, _ in matches))
        raise ValidationError(
            f"gateway {gateway!r}{where} is listed by more than one GridNetwork ({names}); "
            "pass --namespace to choose",
            path="spec.gatewayRefs",
        )
    network, ref = matches[0]
    return network, ref.local_site_name, namespace or ref.namespace or DEFAULT_NAMESPACE


def select_network(
    networks: Sequence[GridNetwork], sites: Sequence[GridSite], site: str
) -> GridNetwork:
    """The network a site belongs to (its GridSite's ``gridNetworkRef``), or the only one."""
    owners = {s.spec.grid_network_ref for s in sites if s.name == site}
    candidates = [n for n in networks if n.name in owners] or list(networks)
    if len(candidates) != 1:
        problem = "no GridNetwork" if not candidates else "more than one GridNetwork"
        raise ValidationError(
            f"{problem} found for site {site!r}; add a GridSite naming its gridNetworkRef",
            path="spec.gridNetworkRef",
        )
    return candidates[0]
