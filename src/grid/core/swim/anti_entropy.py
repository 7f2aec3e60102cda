"""What a push-pull reply carries: what the requester does not already hold.

A periodic push-pull request carries the requester's whole table and items.
Answering with ours in full sent most of it straight back: at 128 members in a
steady mesh every record of the reply was one the requester had just sent, and
push-pull was 45 % of a member's bytes. So the reply to a request that is not a
join leaves out every member update the request holds exactly, and every item
whose origin and lane the request holds at the same or a newer revision. What is
left is what the requester lacks or holds differently; merging it leaves both
sides where a full reply would. A joiner (``join``) still gets everything, as it
asked.
"""

from __future__ import annotations

from grid.core.swim.messages import PushPull


def reply_to(request: PushPull, ours: PushPull) -> PushPull:
    """``ours`` without what ``request`` already holds (all of it for a join)."""
    if request.join:
        return ours
    held = set(request.members)
    revisions: dict[tuple[str, str], int] = {}
    for item in request.items:
        key = (item.lane, item.origin)
        revisions[key] = max(revisions.get(key, item.revision), item.revision)
    members = tuple(m for m in ours.members if m not in held)
    items = tuple(i for i in ours.items if revisions.get((i.lane, i.origin), -1) < i.revision)
    return PushPull(ours.source, members, items, ours.join)
