"""`grid apply`, `grid get` and `grid delete`: kubectl-like access to the embedded store.

The store is ``--store`` (``sqlite:PATH`` or ``kubernetes``), else the ``GRID_STORE``
environment variable, else ``sqlite:.grid/store.db``; a running `grid operator` on
the same file sees every change through its watch.

``apply -f PATH`` reads a YAML file or a directory of ``*.yaml`` files. Every
document is validated first (Grid resources through the resource model, core v1
Secrets and ConfigMaps structurally); on any problem it prints one line per problem
(``file:line: Kind/name: field: message``), writes nothing and exits 2. Valid input
is written in dependency order (Secrets and ConfigMaps, networks, sites,
providers): a new object is created, an existing one has its desired state, labels
and annotations replaced (``configured``) unless they already match
(``unchanged``). ``status`` in the input is ignored, as with a Kubernetes status
subresource. Secret values are stored but never printed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from grid.adapters.manifests import read_sources
from grid.adapters.store import objects
from grid.adapters.store.port import ResourceStore
from grid.adapters.store.url import DEFAULT_STORE_URL, STORE_ENV, open_store, parse_store_url
from grid.cli.store_output import CliKind, render, resolve_kind, table
from grid.core.resources import (
    KINDS,
    AgentToAgentProvider,
    AgentToolProvider,
    GridNetwork,
    InferenceProvider,
    Resource,
    parse_resource,
    resource_label,
)
from grid.core.resources.errors import InvalidResource, printable
from grid.core.resources.manifest import (
    NO_FIELD,
    NO_RESOURCE,
    Document,
    ManifestError,
    Problem,
    decode_documents,
)
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.secret import Secret, parse_secret
from grid.errors import AlreadyExists, Conflict, GridError, NotFound, ValidationError

EXIT_INVALID_INPUT = 2
APPLY_ATTEMPTS = 3
"""Tries per object when another writer changes it between read and write."""
APPLY_ORDER = (
    "Secret",
    "ConfigMap",
    "GridNetwork",
    "GridSite",
    "InferenceProvider",
    "AgentToolProvider",
    "AgentToAgentProvider",
)
"""Kinds in write order, referenced objects before the objects that refer to them."""

T = TypeVar("T")

store_option = click.option(
    "--store",
    "store_url",
    envvar=STORE_ENV,
    default=DEFAULT_STORE_URL,
    show_default=True,
    help=f"sqlite:PATH or kubernetes (env {STORE_ENV}).",
)


# -- apply input ---------------------------------------------------------------------


def _check_config_map(obj: Mapping[str, Any]) -> None:
    data = obj.get("data")
    if data is not None and (
        not isinstance(data, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items())
    ):
        raise ValidationError("must map keys to string values", path="data")


def _validate(doc: Document, parsed: list[Resource | Secret]) -> dict[str, Any]:
    """Validate one document, appending its model to `parsed`; raises `ValidationError`."""
    obj = doc.obj
    if not isinstance(obj, Mapping):
        raise ValidationError("a document must be a YAML mapping")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind in KINDS:
        parsed.append(parse_resource(obj))
    elif (kind, api_version) == ("Secret", "v1"):
        parsed.append(parse_secret(obj))
    elif (kind, api_version) == ("ConfigMap", "v1"):
        _check_config_map(obj)
    else:
        known = ", ".join([*KINDS, "v1 Secret", "v1 ConfigMap"])
        raise ValidationError(f"unknown apiVersion/kind (expected {known})", path="kind")
    objects.identify(dict(obj))
    return dict(obj)


def _problems_of(doc: Document, exc: ValidationError) -> list[Problem]:
    label = resource_label(doc.obj) if isinstance(doc.obj, Mapping) else "-"
    issues = exc.issues if isinstance(exc, InvalidResource) else None
    pairs = [(i.path, i.message) for i in issues] if issues else [(exc.path, exc.message)]
    return [
        Problem(doc.file, label, path or NO_FIELD, message, doc.line_of(path) if path else doc.line)
        for path, message in pairs
    ]


def _secret_refs(resource: Resource) -> list[tuple[str, SecretRef]]:
    """The Secret references of a resource, with their field paths."""
    if isinstance(resource, InferenceProvider | AgentToolProvider | AgentToAgentProvider):
        auth = resource.spec.auth
        return [("spec.auth.secretRef", auth.secret_ref)] if auth and auth.secret_ref else []
    if isinstance(resource, GridNetwork) and resource.spec.tls is not None:
        tls = resource.spec.tls
        pairs = (
            ("spec.tls.caSecretRef", tls.ca_secret_ref),
            ("spec.tls.siteSecretRef", tls.site_secret_ref),
            ("spec.tls.swimKeyRef", tls.swim_key_ref),
        )
        return [(path, ref) for path, ref in pairs if ref is not None]
    return []


def _missing_keys(parsed: list[tuple[Document, Resource | Secret]]) -> list[Problem]:
    """References to a Secret in the same input that lacks the key: provably wrong.

    A reference to a Secret that is not in the input is not checked, as with kubectl:
    it may already be in the store or arrive later.
    """
    secrets = {
        (s.metadata.namespace, s.metadata.name): s for _, s in parsed if isinstance(s, Secret)
    }
    problems: list[Problem] = []
    for doc, resource in parsed:
        if isinstance(resource, Secret):
            continue
        for path, ref in _secret_refs(resource):
            secret = secrets.get((ref.namespace, ref.name))
            if secret is not None and ref.key and not secret.has_key(ref.key):
                message = f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}"
                label = f"{resource.kind}/{resource.name}"
                problems.append(Problem(doc.file, label, f"{path}.key", message, doc.line_of(path)))
    return problems


def load_apply_input(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every object at `path`, validated, in `APPLY_ORDER`; `ManifestError` otherwise."""
    problems: list[Problem] = []
    found: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], Document] = {}
    parsed: list[tuple[Document, Resource | Secret]] = []
    for source in read_sources(path):
        for doc in decode_documents(source, problems):
            models: list[Resource | Secret] = []
            try:
                obj = _validate(doc, models)
            except ValidationError as exc:
                problems.extend(_problems_of(doc, exc))
                continue
            parsed.extend((doc, model) for model in models)
            info, namespace, name = objects.identify(obj)
            key = (info.kind, namespace, name)
            if key in seen:
                first = seen[key]
                message = f"duplicate {info.kind} {name!r} (first at {first.file}:{first.line})"
                problems.append(
                    Problem(doc.file, resource_label(obj), "metadata.name", message, doc.line)
                )
                continue
            seen[key] = doc
            found.append(obj)
    problems.extend(_missing_keys(parsed))
    if not problems and not found:
        message = "no resources to apply: the input holds no YAML documents"
        problems.append(Problem(str(path), NO_RESOURCE, NO_FIELD, message))
    if problems:
        raise ManifestError(problems)
    return sorted(found, key=lambda o: APPLY_ORDER.index(o["kind"]))


def _desired(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The client-owned part of an input object: no status, no server metadata."""
    meta = obj["metadata"]
    kept = {k: meta[k] for k in ("name", "namespace", *objects.CLIENT_METADATA) if k in meta}
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return {**body, "metadata": kept}


async def apply_one(store: ResourceStore, obj: Mapping[str, Any]) -> str:
    """Create or replace one object; returns ``created``, ``configured`` or ``unchanged``."""
    info, namespace, name = objects.identify(dict(obj))
    desired = _desired(obj)
    # An input resourceVersion is a precondition, as with kubectl: the object must exist
    # at exactly that version, or the apply is refused with a conflict.
    given = obj["metadata"].get("resourceVersion")
    for _attempt in range(APPLY_ATTEMPTS):
        try:
            current = await store.get(info.kind, name, namespace=namespace or None)
        except NotFound:
            if given:
                raise Conflict(
                    f"{info.kind} {printable(name)!r} carries resourceVersion but does not exist"
                ) from None
            try:
                await store.create(desired)
            except AlreadyExists:
                continue
            return "created"
        version = given or current["metadata"]["resourceVersion"]
        update = {**desired, "metadata": {**desired["metadata"], "resourceVersion": version}}
        try:
            stored = await store.replace(update)
        except (Conflict, NotFound):
            if given:
                raise
            continue
        return "unchanged" if stored["metadata"]["resourceVersion"] == version else "configured"
    raise Conflict(f"{info.kind} {name!r} kept changing; tried {APPLY_ATTEMPTS} times")


# -- running against a store -----------------------------------------------------------


def _store_exists(url: str) -> bool:
    """Whether the store holds anything yet; a missing SQLite file is an empty store
    (reading must not create it). A malformed URL is a usage error."""
    try:
        parsed = parse_store_url(url)
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint="--store") from None
    return parsed.path is None or parsed.path.exists()


def _run(url: str, work: Callable[[ResourceStore], Awaitable[T]]) -> T:
    """Open the store, run `work`, close it; store errors exit 1 with one line."""

    async def main() -> T:
        store = await open_store(url)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except GridError as exc:
        if isinstance(exc, NotFound):
            raise
        raise click.ClickException(exc.message) from None


def _kind_or_usage_error(name: str) -> CliKind:
    try:
        return resolve_kind(name)
    except NotFound as exc:
        raise click.BadParameter(exc.message, param_hint="KIND") from None


def _not_found(kind: CliKind, name: str) -> SystemExit:
    """Print kubectl's not-found line and return the exit (status 1) to raise."""
    click.echo(f'Error from server (NotFound): {kind.plural_resource} "{name}" not found', err=True)
    return SystemExit(1)


# -- commands ----------------------------------------------------------------------------


@click.command("apply")
@click.option(
    "-f",
    "--filename",
    "path",
    required=True,
    type=click.Path(path_type=Path),
    help="A YAML file, or a directory of *.yaml files.",
)
@store_option
def apply_command(path: Path, store_url: str) -> None:
    """Create or update the resources in PATH (kubectl apply -f)."""
    _store_exists(store_url)
    try:
        items = load_apply_input(path)
    except ManifestError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        raise SystemExit(EXIT_INVALID_INPUT) from None

    async def work(store: ResourceStore) -> None:
        for obj in items:
            outcome = await apply_one(store, obj)
            kind = resolve_kind(obj["kind"])
            click.echo(f"{kind.resource}/{obj['metadata']['name']} {outcome}")

    _run(store_url, work)


@click.command("get")
@click.argument("kind_name", metavar="KIND")
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), help="Print full objects.")
@click.option("-l", "--selector", help="Label selector, e.g. tier=prod,!canary.")
@click.option("-n", "--namespace", help="Namespace of ConfigMaps and Secrets (default: default).")
@click.option("-A", "--all-namespaces", is_flag=True, help="List across all namespaces.")
@store_option
def get_command(
    kind_name: str,
    name: str | None,
    output: str | None,
    selector: str | None,
    namespace: str | None,
    all_namespaces: bool,
    store_url: str,
) -> None:
    """Show one resource or list a kind (kubectl get); Secret values are never shown."""
    kind = _kind_or_usage_error(kind_name)
    exists = _store_exists(store_url)
    if not kind.namespaced and (namespace or all_namespaces):
        raise click.BadParameter(f"{kind.kind} is cluster-scoped", param_hint="--namespace")
    scope = None if all_namespaces else (namespace or "default") if kind.namespaced else None

    async def work(store: ResourceStore) -> list[dict[str, Any]]:
        if name is not None:
            return [await store.get(kind.kind, name, namespace=scope)]
        return await store.list(kind.kind, selector, namespace=scope)

    try:
        found = _run(store_url, work) if exists else []
    except NotFound:
        raise _not_found(kind, str(name)) from None
    if name is not None and not found:
        raise _not_found(kind, name)
    if not found:
        where = f" in {scope} namespace" if scope else ""
        click.echo(f"No resources found{where}.", err=True)
        return
    if output:
        click.echo(render(found, output, single=name is not None))
    else:
        click.echo(table(kind, found, dt.datetime.now(dt.UTC)))


@click.command("delete")
@click.argument("kind_name", metavar="KIND")
@click.argument("name")
@click.option("-n", "--namespace", help="Namespace of a ConfigMap or Secret (default: default).")
@store_option
def delete_command(kind_name: str, name: str, namespace: str | None, store_url: str) -> None:
    """Delete one resource (kubectl delete)."""
    kind = _kind_or_usage_error(kind_name)
    exists = _store_exists(store_url)
    if not kind.namespaced and namespace:
        raise click.BadParameter(f"{kind.kind} is cluster-scoped", param_hint="--namespace")

    async def work(store: ResourceStore) -> None:
        await store.delete(kind.kind, name, namespace=namespace)

    try:
        if not exists:
            raise NotFound(name)
        _run(store_url, work)
    except NotFound:
        raise _not_found(kind, name) from None
    click.echo(f'{kind.resource} "{name}" deleted')


def register(main: click.Group) -> None:
    """Add `apply`, `get` and `delete` to the `grid` command group."""
    main.add_command(apply_command)
    main.add_command(get_command)
    main.add_command(delete_command)
