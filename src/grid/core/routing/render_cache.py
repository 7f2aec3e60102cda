"""A render cache: what one gateway's renders keep from one round to the next.

The operator renders every gateway it serves whenever something changed, and a
round in which one provider changed must cost in proportion to that change, not
to the grid. `RenderCache` keeps, per provider, the three things a render
derives from it alone:

* its draft (`grid.core.routing.candidate_draft.draft_for`), kept while the
  provider, its signals entry and what the clock decides of that entry
  (`sample_clock`: stale, evicted) are the same, and everything the render's
  view shares (sites, Secrets, geographies, local and default site, TTL) is too;
* its evaluation and sort key part (`grid.core.routing.ranking.group_score`),
  kept while its draft's candidates are the same objects, the scoring context
  but for the stabilized-admission hold set is the same, and the provider's own
  membership of that set is;
* each of its candidates' wire form and canonical text
  (`grid.core.overlay.candidate_cache.CandidateCache`).

The rank order is kept too (`grid.core.routing.order_cache.OrderCache`): the
candidates of the providers that changed are taken out of the last order and
put back by binary search, and each ranked record that kept its place is reused.
The selection groups and the digest are computed again in every round, from
the kept parts. A render with a cache gives exactly the documents, text
and digest of one without (a property test drives random rounds through both).
Each kind of entry keeps only what the last render used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import chain, compress
from operator import is_not
from typing import Any, NamedTuple

from grid.core.overlay.candidate_cache import CandidateCache
from grid.core.resources import SITE_LABEL, InferenceProvider
from grid.core.routing.candidate import CandidateInput
from grid.core.routing.candidate_draft import (
    CandidateDraft,
    DraftView,
    SampleClock,
    draft_for,
    provider_sites,
)
from grid.core.routing.group_cache import GroupCache
from grid.core.routing.order_cache import OrderCache
from grid.core.routing.ranking import GroupScore, Ordering, group_score
from grid.core.routing.scoring import Evaluation, ScoringContext
from grid.core.routing.signals import ProviderSignals
from grid.core.vocabulary import RoutingPolicy


class _KeptDraft(NamedTuple):
    entry: ProviderSignals | None
    clock: tuple[bool, bool]
    draft: CandidateDraft


class _KeptProvider(NamedTuple):
    provider: InferenceProvider
    name: tuple[str, str | None]
    """The provider's name and site label (what `RenderCache` keeps it under)."""
    drafts: dict[str, _KeptDraft | None]
    """Per hosting site, in `provider_sites` order (None: not drafted yet)."""


class _KeptScore(NamedTuple):
    candidate: CandidateInput
    held: bool
    evaluation: Evaluation
    key: tuple[float | str, ...]


def _view_key(view: DraftView) -> tuple[Any, ...]:
    """What every draft of a render shares, beyond its provider, entry and clock."""
    return (
        view.local_site,
        view.default_site,
        view.ttl,
        view.signals is None,
        dict(view.sites),
        tuple(view.secrets),
        dict(view.geographies),
    )


def _context_key(context: ScoringContext, policy: RoutingPolicy) -> tuple[Any, ...]:
    """What every evaluation of a render shares; the hold set only as present or not."""
    config = context.config
    held = config.admission.held
    return (
        context.local_site,
        context.local_geography,
        replace(config, admission=replace(config.admission, held=None)),
        held is None,
        policy,
    )


class RenderCache:
    """Drafts, evaluations and candidate wire forms of one gateway's last render."""

    def __init__(self) -> None:
        self._view: tuple[Any, ...] | None = None
        self._drafts: dict[tuple[str, str | None], _KeptProvider] = {}
        self._by_id: dict[int, _KeptProvider] = {}
        """The same entries by the identity of the provider each holds."""
        self._round: _Round | None = None
        """The last round's drafts by place (`_patched`)."""
        self._listed: tuple[str, tuple[InferenceProvider, ...], list[int]] | None = None
        """The network, providers and sorted order of the last `by_name`."""
        self._context: tuple[Any, ...] | None = None
        self._scores: dict[int, _KeptScore] = {}
        self._held: frozenset[tuple[str, str]] | None = None
        """The hold set of the last order (`ordered`)."""
        self.candidates = CandidateCache()
        """The overlay candidates' wire forms (`build_overlay_parts` takes it)."""
        self.order = OrderCache()
        """The last rank order (`ordered`)."""
        self.groups = GroupCache()
        """The last selection groups (`grid.core.routing.group_cache`)."""
        self.drafted = 0
        """Drafts the last render made afresh (the others were kept)."""
        self.scored = 0
        """Evaluations the last render made afresh."""

    def drafts(
        self, providers: Sequence[InferenceProvider], view: DraftView
    ) -> list[CandidateDraft]:
        """`drafts_for` of each provider in order, kept drafts where their inputs hold.

        A provider that is the very object of the last render is found by its
        identity (the operator's record views hand out the same object while its
        record is); any other by its name and site label, and kept while equal.
        """
        key = _view_key(view)
        if key != self._view:
            self._view, self._drafts, self._by_id, self._round = key, {}, {}, None
        clock = SampleClock(view)
        self.drafted = 0
        given = tuple(providers)
        patched = self._patched(given, view, clock)
        if patched is not None:
            return patched
        self.drafted = 0
        kept = [self._provider(p, self._drafts, self._by_id, view, clock) for p in given]
        self._drafts = {k.name: k for k in kept}
        self._by_id = {id(k.provider): k for k in kept}
        self._round = _round_of(given, view, clock, kept)
        return [k.draft for p in kept for k in p.drafts.values() if k is not None]

    def _provider(
        self,
        provider: InferenceProvider,
        by_name: Mapping[tuple[str, str | None], _KeptProvider],
        by_id: Mapping[int, _KeptProvider],
        view: DraftView,
        clock: SampleClock,
    ) -> _KeptProvider:
        """One provider's drafts, the kept ones where their entry and clock held."""
        old = by_id.get(id(provider))
        if old is None or old.provider is not provider:
            old = self._by_name(provider, by_name, view)
        # The clock's two instants, compared here inline (a call per sample costs more).
        oldest_fresh, kept_from = clock.bounds or (None, None)
        local, index = view.local_site, view.signal_index
        drafts = old.drafts
        name = old.name[0]
        for site, kept in drafts.items():
            entry = index.get((site, name))
            if oldest_fresh is None or entry is None:
                at = clock(entry, site)
            else:
                observed = entry.observed_at
                at = (
                    observed < oldest_fresh,
                    kept_from is not None and site != local and observed < kept_from,
                )
            if kept is None or kept.clock != at or not (kept.entry is entry or kept.entry == entry):
                if drafts is old.drafts:
                    drafts = dict(drafts)
                drafts[site] = _KeptDraft(entry, at, draft_for(provider, view, site))
                self.drafted += 1
        if drafts is not old.drafts:
            old = _KeptProvider(provider, old.name, drafts)
        return old

    def _patched(
        self, providers: tuple[InferenceProvider, ...], view: DraftView, clock: SampleClock
    ) -> list[CandidateDraft] | None:
        """The last round's drafts with only the changed providers' looked at, or None.

        A provider is looked at when it is another object than at its place last
        round, or when an entry of its (site, name) is. The others keep their
        drafts unlooked-at only while the clock can have changed none of their
        answers: it did not go back, and no sample kept fresh (or kept, remote)
        is older than its new instant (`_Round.fresh_floor`, `kept_floor`).
        """
        last = self._round
        entries = view.signals.providers if view.signals is not None else None
        if last is None or entries is None or not last.steady(providers, entries, clock.bounds):
            return None
        changed = set(compress(range(len(providers)), map(is_not, providers, last.providers)))
        for j in compress(range(len(entries)), map(is_not, entries, last.entries)):
            for e in (entries[j], last.entries[j]):
                changed.update(last.where.get((e.site, e.name), ()))
        if len(changed) > len(providers) * PATCH_MAX_SHARE:
            return None
        kept, drafts = list(last.kept), list(last.drafts)
        by_name, by_id = dict(self._drafts), dict(self._by_id)
        for i in changed:
            old = kept[i]
            new = self._provider(providers[i], self._drafts, self._by_id, view, clock)
            if new.name != old.name or list(new.drafts) != list(old.drafts):
                return None  # its places in `where` would move
            del by_id[id(old.provider)]
            by_name[new.name], by_id[id(new.provider)] = new, new
            kept[i] = new
            drafts[i] = [k.draft for k in new.drafts.values() if k is not None]
        self._drafts, self._by_id = by_name, by_id
        patched = [kept[i] for i in changed]
        self._round = last.moved(providers, entries, clock.bounds, kept, drafts, patched, view)
        return list(chain.from_iterable(drafts))

    @staticmethod
    def _by_name(
        provider: InferenceProvider,
        kept: Mapping[tuple[str, str | None], _KeptProvider],
        view: DraftView,
    ) -> _KeptProvider:
        """What is kept of a provider equal to ``provider``, else a new entry with no drafts."""
        # Names are unique per site, and a site label names where one is.
        name = (provider.name, provider.metadata.labels.get(SITE_LABEL))
        old = kept.get(name)
        if old is None or not (old.provider is provider or old.provider == provider):
            old = _KeptProvider(provider, name, dict.fromkeys(provider_sites(provider, view)))
        return old

    def scorer(
        self, context: ScoringContext, policy: RoutingPolicy
    ) -> Callable[[CandidateInput], GroupScore]:
        """`group_score` under ``context`` and ``policy``, kept per candidate, for one render.

        Only the candidates scored through the returned function are kept for the next.
        """
        key = _context_key(context, policy)
        if key != self._context:
            self._context, self._scores = key, {}
        kept: dict[int, _KeptScore] = self._scores
        fresh: dict[int, _KeptScore] = {}
        self._scores = fresh
        self.scored = 0
        return self._scoring(kept, fresh, context, policy)

    def _scoring(
        self,
        kept: Mapping[int, _KeptScore],
        fresh: dict[int, _KeptScore],
        context: ScoringContext,
        policy: RoutingPolicy,
    ) -> Callable[[CandidateInput], GroupScore]:
        """A group's score: the one in ``kept`` while its candidate and hold are the same,
        else scored afresh (counted in ``scored``); each answer is put in ``fresh``."""
        held = context.config.admission.held

        def score(candidate: CandidateInput) -> GroupScore:
            member = held is not None and (candidate.site, candidate.provider) in held
            old = kept.get(id(candidate))
            if old is None or old.candidate is not candidate or old.held != member:
                old = _KeptScore(candidate, member, *group_score(candidate, context, policy))
                self.scored += 1
            fresh[id(candidate)] = old
            return old.evaluation, old.key

        return score

    def ordered(
        self,
        groups: Iterable[Sequence[CandidateInput]],
        context: ScoringContext,
        policy: RoutingPolicy,
    ) -> Ordering:
        """`order_candidates` of ``groups`` through `scorer`, kept from the last order.

        While the scoring context and the hold set are those of the last order,
        every group seen then scores as it did, so the order looks only at the
        places whose group changed and the kept scores are updated for those.
        """
        key, held = _context_key(context, policy), context.config.admission.held
        steady = key == self._context and held == self._held
        self._held = held
        if not steady:
            return self.order.order(groups, self.scorer(context, policy))
        kept = self._scores
        self.scored = 0
        fresh: dict[int, _KeptScore] = {}
        ordering = self.order.order(
            groups, self._scoring(kept, fresh, context, policy), steady=True
        )
        if not self.order.patched:
            self._scores = fresh  # every group was scored
            return ordering
        # Keep the scores of exactly the groups ordered: drop the ones taken out.
        for group in self.order.removed:
            kept.pop(id(group.group[0]), None)
        kept.update(fresh)
        return ordering

    @property
    def scores_kept(self) -> int:
        """How many groups' scores are kept (one per group of the last order)."""
        return len(self._scores)

    def by_name(
        self, providers: Sequence[InferenceProvider], network: str
    ) -> list[InferenceProvider]:
        """The providers of ``network`` sorted by name (a stable sort), as a render takes them.

        When each provider that is not the very object of the last call has the
        name and network of the one it replaced, the sort is the last one's: its
        order is applied to the new providers instead of sorting them again.
        """
        given = tuple(providers)
        last = self._listed
        if last is not None and last[0] == network and len(last[1]) == len(given):
            before, order = last[1], last[2]
            moved = compress(range(len(given)), map(is_not, before, given))
            if all(_same_place(before[i], given[i]) for i in moved):
                self._listed = (network, given, order)
                return list(map(given.__getitem__, order))
        kept = [i for i, p in enumerate(given) if p.spec.grid_network_ref == network]
        order = sorted(kept, key=lambda i: given[i].metadata.name)
        self._listed = (network, given, order)
        return list(map(given.__getitem__, order))


def _same_place(old: InferenceProvider, new: InferenceProvider) -> bool:
    """Whether ``new`` sorts where ``old`` did: same network, same name."""
    return (
        old.spec.grid_network_ref == new.spec.grid_network_ref
        and old.metadata.name == new.metadata.name
    )


PATCH_MAX_SHARE = 0.25
"""Past this share of the providers changed, a round drafts everything afresh."""

_NEVER = datetime.max.replace(tzinfo=UTC)


class _Round(NamedTuple):
    """The last round's drafts, provider by provider (`RenderCache._patched` patches them)."""

    providers: tuple[InferenceProvider, ...]
    entries: tuple[ProviderSignals, ...]
    bounds: tuple[datetime, datetime | None]
    kept: list[_KeptProvider]
    drafts: list[list[CandidateDraft]]
    where: dict[tuple[str, str], list[int]]
    """The providers drafted at each (site, name), by place."""
    fresh_floor: datetime
    """No sample judged fresh is older (never later than the oldest such)."""
    kept_floor: datetime
    """No remote sample judged not evicted is older."""

    def steady(
        self,
        providers: tuple[InferenceProvider, ...],
        entries: tuple[ProviderSignals, ...],
        bounds: tuple[datetime, datetime | None] | None,
    ) -> bool:
        """Whether places compare and the clock changed no answer of an unchanged sample."""
        if bounds is None or len(providers) != len(self.providers):
            return False
        if len(entries) != len(self.entries):
            return False
        (fresh, kept), (was_fresh, was_kept) = bounds, self.bounds
        if not was_fresh <= fresh <= self.fresh_floor:
            return False
        if kept is None or was_kept is None:
            return kept is None and was_kept is None
        return was_kept <= kept <= self.kept_floor

    def moved(
        self,
        providers: tuple[InferenceProvider, ...],
        entries: tuple[ProviderSignals, ...],
        bounds: tuple[datetime, datetime | None] | None,
        kept: list[_KeptProvider],
        drafts: list[list[CandidateDraft]],
        patched: Iterable[_KeptProvider],
        view: DraftView,
    ) -> _Round:
        """This round after patching: the floors lowered by the ``patched`` providers' samples.

        Only lowered: a floor the patched-out samples held stays, which only makes a
        later round draft afresh sooner than it must."""
        assert bounds is not None
        floors = (self.fresh_floor, self.kept_floor)
        fresh_floor, kept_floor = _floors(patched, view.local_site, floors)
        return self._replace(
            providers=providers,
            entries=entries,
            bounds=bounds,
            kept=kept,
            drafts=drafts,
            fresh_floor=fresh_floor,
            kept_floor=kept_floor,
        )


def _floors(
    kept: Iterable[_KeptProvider], local: str, start: tuple[datetime, datetime]
) -> tuple[datetime, datetime]:
    """The oldest sample judged fresh, and the oldest remote one judged not evicted."""
    fresh_floor, kept_floor = start
    for provider in kept:
        for site, draft in provider.drafts.items():
            if draft is None or draft.entry is None:
                continue
            observed = draft.entry.observed_at
            stale, evicted = draft.clock
            if not stale and observed < fresh_floor:
                fresh_floor = observed
            if site != local and not evicted and observed < kept_floor:
                kept_floor = observed
    return fresh_floor, kept_floor


def _round_of(
    providers: tuple[InferenceProvider, ...],
    view: DraftView,
    clock: SampleClock,
    kept: list[_KeptProvider],
) -> _Round | None:
    """What `RenderCache._patched` needs of a round drafted afresh (None: nothing to patch)."""
    bounds = clock.bounds
    if bounds is None or view.signals is None:
        return None
    drafts = [[k.draft for k in p.drafts.values() if k is not None] for p in kept]
    where: dict[tuple[str, str], list[int]] = {}
    for i, provider in enumerate(kept):
        for site in provider.drafts:
            where.setdefault((site, provider.name[0]), []).append(i)
    floors = _floors(kept, view.local_site, (_NEVER, _NEVER))
    return _Round(providers, view.signals.providers, bounds, kept, drafts, where, *floors)
