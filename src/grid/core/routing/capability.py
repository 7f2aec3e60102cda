"""Restricting candidates to models that declare a capability.

`provider_with_capability` keeps, of a provider, only the models whose
``capabilities`` list the given name, and drops providers left with none. It
works on the render inputs, before any candidate is drafted, so ``grid render
--capability`` and ``grid explain --capability`` rank exactly the candidates
the unrestricted render would, minus the models without the capability, and
the same inputs still give the same revision. Remote providers carry their
models' capabilities in their records (`grid.core.crdt.record.ModelInfo`), so
they restrict the same way.
"""

from __future__ import annotations

from grid.core.resources import InferenceProvider


def provider_with_capability(
    provider: InferenceProvider, capability: str
) -> InferenceProvider | None:
    """The provider serving only its models that declare ``capability``; None without any."""
    models = [m for m in provider.spec.models if capability in m.capabilities]
    if not models:
        return None
    if len(models) == len(provider.spec.models):
        return provider
    spec = provider.spec.model_copy(update={"models": models})
    return provider.model_copy(update={"spec": spec})
