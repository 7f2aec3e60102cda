"""Demo ports: distinct, bindable, and outside the ephemeral range outgoing sockets use."""

import random
from pathlib import Path

from grid.demo.plan import PORT_RANGE, PortPicker, plan_mesh


def test_a_picker_never_hands_out_a_port_twice() -> None:
    pick = PortPicker(random.Random(7))
    ports = [pick() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(PORT_RANGE[0] <= p < PORT_RANGE[1] for p in ports)


def test_a_mesh_plan_uses_distinct_ports_below_the_ephemeral_range(tmp_path: Path) -> None:
    plan = plan_mesh(tmp_path, ["east", "west", "central"])
    ports = [p for s in plan.sites.values() for p in (s.swim_port, s.metrics_port, s.egress_port)]
    ports += [p.port for p in plan.providers]
    assert len(set(ports)) == len(ports)
    assert max(ports) < 32768
