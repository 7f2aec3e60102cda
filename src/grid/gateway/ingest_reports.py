"""The gateway's ingests as §7 feedback reports: overlay reloads and signals documents.

Under poll every ingest is a report to the operator through
`grid.gateway.feedback.FeedbackReporter`: each overlay-file reload (accepted
or rejected by the §5 verifier) and each signals document pulled (taken, or
refused as invalid). A rejected ingest raises the cumulative rejected counter;
an accepted one reports clean.

A clean report clears the gateway's evidence at the operator, so it is sent
only when it is true of the whole gateway: while one source's latest ingest
stands rejected (an overlay file that did not verify, kept out while the last
good snapshot serves), a good ingest from the other source is counted as held
and not reported, so it cannot clear that evidence. The next good ingest of
the rejected source reports clean again.
"""

from __future__ import annotations

from grid.gateway.feedback import FeedbackReporter

SOURCES = ("overlay", "signals")
"""What the gateway ingests."""


class IngestReports:
    """Records each ingest of each source into the reporter, clean only when all are."""

    def __init__(self, reporter: FeedbackReporter) -> None:
        self.reporter = reporter
        self.standing = dict.fromkeys(SOURCES, True)
        """Whether each source's latest ingest was accepted."""
        self.held = 0
        """Good ingests not reported because another source stands rejected."""

    def ingest(self, source: str, accepted: bool) -> None:
        """Record one completed ingest of ``source``."""
        self.standing[source] = accepted
        if accepted and not all(self.standing.values()):
            self.held += 1
            return
        self.reporter.record(accepted)
