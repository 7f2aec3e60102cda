"""The Containerfile and its lock: multi-stage, slim, non-root, every dependency pinned.

No container engine runs on the test machines, so the file is checked, not built.
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from grid.testing.helm import CHART, REPO, render

CONTAINER = REPO / "deploy" / "container"


def _lock() -> dict[str, str]:
    pins = {}
    for line in (CONTAINER / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_runtime_dependency_is_pinned_inside_its_declared_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _lock()
    for raw in project["dependencies"]:
        requirement = Requirement(raw)
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{requirement.name} is missing from requirements.lock"
        assert requirement.specifier.contains(pinned), f"{requirement.name}=={pinned} vs {raw}"


def test_the_image_is_multi_stage_slim_non_root_and_matches_the_chart() -> None:
    text = (CONTAINER / "Containerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(stages) == 2
    assert all(image.endswith("-slim-bookworm") for image in stages)
    final = text.split("\nFROM ")[-1]
    assert "COPY --from=build" in final
    (user,) = re.findall(r"^USER (\d+):(\d+)$", final, re.MULTILINE)
    assert int(user[0]) > 0
    assert "ADD " not in text
    objs = render(CHART / "ci" / "default-values.yaml")
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(user[0])
    (container,) = pod["containers"]
    exposed = set(re.findall(r"(\d+)/(tcp|udp)", final))
    ports = {(str(p["containerPort"]), p["protocol"].lower()) for p in container["ports"]}
    assert ports == exposed
    assert container["args"][0] == "operator"
    assert 'ENTRYPOINT ["grid"]' in final
