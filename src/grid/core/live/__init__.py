"""The live view's model (SPEC-DECISIONS §13): pure assembly of what ``/ui/`` shows.

`grid.core.live.view` builds one site's view and merges the views of many sites
into one; `grid.core.live.activity` keeps the recent membership events;
`grid.core.live.feed` turns two successive views into the Server-Sent Events
that carry what changed. Everything here is plain JSON-ready data: the HTTP
handlers only serialise it.
"""
