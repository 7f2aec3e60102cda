"""Grid: a control plane that meshes AI inference backends across sites.

Grid is never in the request path. Each site's operator discovers its peers with
SWIM gossip, converges provider state with CRDTs, scores every candidate provider
and renders a credential-free routing overlay for the site's gateway.
"""

__version__ = "0.1.0"
