"""Demo ports: distinct, bindable, and outside the ephemeral range outgoing sockets use."""

import random
from pathlib import Path

import pytest

from grid.demo.plan import plan_mesh
from grid.demo.ports import PORT_RANGE, RANGE_ENV, PortPicker, free_port, port_range


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


def test_every_picker_of_a_process_shares_one_ledger() -> None:
    first, second = PortPicker(random.Random(11)), PortPicker(random.Random(11))
    drawn = [first() for _ in range(50)] + [second() for _ in range(50)]
    drawn += [free_port() for _ in range(50)]
    assert len(set(drawn)) == len(drawn)


def test_the_range_can_be_narrowed_for_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RANGE_ENV, "24000-24100")
    assert port_range() == (24000, 24100)
    assert all(24000 <= PortPicker()() < 24100 for _ in range(20))


@pytest.mark.parametrize("raw", ["24000", "24100-24000", "80-90", "a-b", "24000-70000"])
def test_a_bad_range_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(RANGE_ENV, raw)
    with pytest.raises(ValueError, match=RANGE_ENV):
        port_range()
