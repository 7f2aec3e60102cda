"""`grid keys create`: a new client key for ``clientAuth.mode: apiKey`` (§15).

It prints the key once, on stdout, and appends its hash line ``{tenant,
sha256}`` to the keys file (``--file``), the content of the Secret key the
gateway mounts. Without ``--file`` the line is printed on stderr to be added by
hand. Only the digest is ever written; the key itself is kept nowhere.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import click
import yaml

from grid.core.identity import TENANT_MAX, KeysFileError, key_line, parse_keys

KEY_PREFIX = "grid-"
KEY_BYTES = 32
"""Random bytes of a key (256 bits, URL-safe base64 after the prefix)."""


def _tenant(value: str) -> str:
    tenant = value.strip()
    if not tenant or len(tenant) > TENANT_MAX or not tenant.isprintable():
        raise click.BadParameter(
            f"a tenant is 1-{TENANT_MAX} printable characters", param_hint="--tenant"
        )
    return tenant


def _append(path: Path, line: str) -> None:
    """Append ``line`` to the keys file, refusing one that is not a keys file already."""
    try:
        existing = path.read_text() if path.exists() else ""
        parse_keys(yaml.safe_load(existing + line))
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise click.ClickException(f"{path} does not read: {reason}") from None
    except (KeysFileError, yaml.YAMLError) as exc:
        raise click.ClickException(f"{path} is not a keys file ({exc}); nothing written") from None
    prefix = "\n" if existing and not existing.endswith("\n") else ""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(prefix + line)


@click.group("keys")
def keys() -> None:
    """Client keys of gateways running clientAuth apiKey."""


@keys.command("create")
@click.option("--tenant", required=True, help="The tenant the key is charged to.")
@click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Keys file to append the key's hash line to (created with mode 0600).",
)
def create(tenant: str, file: Path | None) -> None:
    """Print a new key for TENANT once, and append its {tenant, sha256} line to --file."""
    tenant = _tenant(tenant)
    key = KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)
    line = key_line(tenant, key)
    if file is not None:
        _append(file, line)
        click.echo(f"appended {tenant}'s key hash to {file}; the key is shown once:", err=True)
    else:
        click.echo(f"add this line to the keys file; the key is shown once:\n{line}", err=True)
    click.echo(key)


def register(main: click.Group) -> None:
    """Add ``grid keys`` to the top-level command."""
    main.add_command(keys)
