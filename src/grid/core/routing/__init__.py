"""Routing: from a site's inputs to a ranked, credential-free list of candidates.

The pipeline, in the order a render runs it:

1. `signals`: the signals document (SPEC-DECISIONS §6), own and pulled, parsed and merged;
   `metrics_mapping` turns a provider's scraped Prometheus families into those signals.
2. `mesh_view`: the store's resources plus the CRDT replica's records, as render inputs.
3. `candidate_draft`: one candidate (`candidate.CandidateInput`) per (provider, model),
   with access policy, credential references and the exclusions decided before scoring;
   each provider's candidates form one group that shares an evaluation.
4. `scoring`: six normalised signals, admission state and locality tier of each candidate,
   blended into a score (§4).
5. `ranking`: the exclusions after scoring and the §4 sort, numbered 0..n-1.
6. `render`: the above end to end, building the overlay and its envelope
   (`grid.core.overlay`); `explain` keeps the excluded candidates and says why each ranks
   where it does.
"""
