"""`grid certs init`: write a development PKI for a local grid.

It writes a dev CA, one certificate and key per site (with the SPIFFE ID
``spiffe://{trust-domain}/site/{name}``) and a 32-byte SWIM key, using
`grid.demo.pki.write_dev_pki`. It prints the paths and each site's certificate
fingerprint, the value a GridSite's ``trust.certFingerprint`` pins. Private keys
are written with mode 0600 and never printed. An existing PKI is only replaced
with ``--force``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from grid.demo.pki import DEFAULT_TRUST_DOMAIN, issue_dev_site, write_dev_pki

_SITE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_TRUST_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9._]{0,253}[a-z0-9])?$")


def _site_names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("name at least one site, as in --sites east,west")
    for name in names:
        if not _SITE.match(name):
            raise click.BadParameter(f"{name!r} is not a DNS label (a-z, 0-9, '-')")
    if len(set(names)) != len(names):
        raise click.BadParameter("site names must be unique")
    return names


@click.group("certs")
def certs() -> None:
    """Development certificates for a local grid."""


@certs.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--sites", required=True, help="Comma-separated site names, e.g. east,west.")
@click.option(
    "--trust-domain",
    default=DEFAULT_TRUST_DOMAIN,
    show_default=True,
    help="SPIFFE trust domain of the site certificates.",
)
@click.option("--force", is_flag=True, help="Replace an existing PKI in DIRECTORY.")
def init(directory: Path, sites: str, trust_domain: str, force: bool) -> None:
    """Write a dev CA, site certificates with SPIFFE IDs, and a SWIM key into DIRECTORY."""
    names = _site_names(sites)
    if not _TRUST_DOMAIN.match(trust_domain):
        raise click.BadParameter(
            "must be lowercase letters, digits, '.', '-' or '_'", param_hint="--trust-domain"
        )
    if (directory / "ca.pem").exists() and not force:
        raise click.ClickException(
            f"{directory / 'ca.pem'} already exists; pass --force to replace the dev PKI"
        )
    pki = write_dev_pki(directory, names, trust_domain)
    click.echo(f"wrote {pki.ca}  (dev CA, trust domain {trust_domain})")
    click.echo(f"wrote {pki.swim_key}  (32-byte SWIM key, mode 0600)")
    for name, paths in pki.sites.items():
        click.echo(f"site {name}: {paths.cert}, {paths.key} (mode 0600)")
        click.echo(f"  spiffe id    spiffe://{trust_domain}/site/{name}")
        click.echo(f"  fingerprint  {paths.fingerprint}")


@certs.command("issue")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--site", required=True, help="The new site's name (a DNS label).")
@click.option(
    "--trust-domain",
    default=DEFAULT_TRUST_DOMAIN,
    show_default=True,
    help="SPIFFE trust domain of the site certificate.",
)
def issue(directory: Path, site: str, trust_domain: str) -> None:
    """Issue a certificate for one more site from the dev CA in DIRECTORY (ca-key.pem)."""
    names = _site_names(site)
    if len(names) != 1:
        raise click.BadParameter("name exactly one site", param_hint="--site")
    name = names[0]
    if (directory / f"{name}.pem").exists():
        raise click.ClickException(f"{directory / (name + '.pem')} already exists")
    if not (directory / "ca-key.pem").exists():
        raise click.ClickException(f"{directory / 'ca-key.pem'} is missing: not a dev PKI")
    paths = issue_dev_site(directory, name, trust_domain)
    click.echo(f"site {name}: {paths.cert}, {paths.key} (mode 0600)")
    click.echo(f"  spiffe id    spiffe://{trust_domain}/site/{name}")
    click.echo(f"  fingerprint  {paths.fingerprint}")


def register(main: click.Group) -> None:
    """Add `certs` to the `grid` command group."""
    main.add_command(certs)
