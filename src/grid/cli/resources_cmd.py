"""`grid crds` and `grid validate`: the resource model at the command line.

`grid crds` prints the three CustomResourceDefinitions (generated from the models,
so they never drift) or writes them to a directory. `grid validate -f PATH` loads a
file or directory of CR YAML and reports every problem. `load_or_exit` is the shared
edge for every command that reads manifests (render, explain, validate): on bad input
it prints one line per problem to stderr and exits with status 2, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from grid.adapters.manifests import load_manifests
from grid.core.resources import KINDS
from grid.core.resources.crd_schema import all_crds_yaml, crd_file_name, crd_yaml
from grid.core.resources.manifest import ManifestError, Manifests

EXIT_INVALID_INPUT = 2
"""Exit status of a command whose input manifests are invalid."""

_F = TypeVar("_F", bound=Callable[..., Any])


def load_or_exit(path: str | os.PathLike[str]) -> Manifests:
    """Load manifests from `path`, or print each problem on its own line and exit 2."""
    try:
        return load_manifests(path)
    except ManifestError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        raise SystemExit(EXIT_INVALID_INPUT) from None


def manifest_path_option(func: _F) -> _F:
    """The ``-f/--filename PATH`` option every manifest-reading command shares."""
    option = click.option(
        "-f",
        "--filename",
        "path",
        required=True,
        type=click.Path(path_type=Path),
        help="A CR YAML file, or a directory of *.yaml files.",
    )
    return option(func)


@click.command("crds")
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write one file per CRD into this directory instead of printing.",
)
def crds_command(out_dir: Path | None) -> None:
    """Print the Grid CustomResourceDefinitions (structural OpenAPI v3) as YAML."""
    if out_dir is None:
        click.echo(all_crds_yaml(), nl=False)
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        target = out_dir / crd_file_name(kind)
        target.write_text(crd_yaml(kind), encoding="utf-8")
        click.echo(str(target))


@click.command("validate")
@manifest_path_option
def validate_command(path: Path) -> None:
    """Check CR YAML (and Secrets) at PATH; print one line per problem, exit 2 if any."""
    manifests = load_or_exit(path)
    counts = {
        "GridNetwork": len(manifests.networks),
        "GridSite": len(manifests.sites),
        "InferenceProvider": len(manifests.providers),
        "Secret": len(manifests.secrets),
    }
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    click.echo(f"valid: {summary}")


def register(main: click.Group) -> None:
    """Attach `grid crds` and `grid validate` to the top-level group."""
    main.add_command(crds_command)
    main.add_command(validate_command)
