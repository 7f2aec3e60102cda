// Grid live view: renders /ui/state.json, then applies /ui/events as they arrive.
// Every value is written with textContent or setAttribute, never as markup.
"use strict";
(function () {
  const SIGNALS = ["locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost"];
  const COLORS = { locality: "#4b7bd1", queue_depth: "#2e9d5b", kv_cache: "#8c5bd1",
    prefix_cache: "#17a2b8", latency: "#e0a21b", cost: "#c8412f" };
  // Models, then tools and agents beside them (§16), each kind under its own heading.
  const KINDS = { inference_model: "Models", mcp_tool: "Tools (MCP)", a2a_agent: "Agents (A2A)" };
  const KIND_TAGS = { inference_model: "model", mcp_tool: "MCP tool", a2a_agent: "A2A agent" };
  const COMPACT_ABOVE = 6; // observers; more draw the membership as a matrix of squares
  const SVG = "http://www.w3.org/2000/svg";
  let view = null;
  let observer = null;
  let pending = false;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }
  function fill(id, ...children) { document.getElementById(id).replaceChildren(...children); }
  function fmt(x) { return x === null || x === undefined ? "-" : Number(x).toFixed(4); }

  function badge(state, incarnation, compact) {
    const b = el("span", { class: "badge " + (state || "unknown") });
    b.title = state ? state + " (incarnation " + incarnation + ")" : "no view";
    if (!compact) {
      b.append(state || "?");
      if (state) b.append(" ", el("small", {}, "#" + incarnation));
    }
    return b;
  }

  function renderMembers() {
    const sites = view.sites;
    const compact = sites.length > COMPACT_ABOVE;
    const head = el("tr", {}, el("th", {}, "member"));
    sites.forEach((s, i) => head.append(el("th", { title: s }, compact ? String(i + 1) : "seen by " + s)));
    document.getElementById("membership").classList.toggle("wide", compact);
    const table = el("table", { class: compact ? "matrix" : "" }, el("thead", {}, head));
    const body = el("tbody");
    for (const m of view.members) {
      const row = el("tr", { "data-member": m.id }, el("th", {}, m.id));
      for (const s of sites) {
        const seen = m.views[s];
        const cell = el("td", { "data-observer": s, "data-state": seen ? seen.state : "" });
        cell.append(badge(seen && seen.state, seen && seen.incarnation, compact));
        row.append(cell);
      }
      body.append(row);
    }
    table.append(body);
    const extra = [];
    if (view.unreachable.length) extra.push(el("p", { class: "muted", id: "unreachable" },
      "not answering: " + view.unreachable.join(", ")));
    const probes = el("table", { class: "probes" }, el("thead", {}, el("tr", {},
      ...["probe traffic of", "datagrams sent", "received", "push-pulls done", "served"].map((h) => el("th", {}, h)))));
    const pbody = el("tbody");
    for (const s of sites) {
      const t = view.transport[s] || {};
      pbody.append(el("tr", { "data-observer": s }, el("td", {}, s),
        ...["datagrams_sent", "datagrams_received", "push_pulls_completed", "push_pulls_served"]
          .map((k) => el("td", {}, t[k] === undefined ? "-" : String(t[k])))));
    }
    probes.append(pbody);
    const counts = {};
    for (const m of view.members) for (const seen of Object.values(m.views)) counts[seen.state] = (counts[seen.state] || 0) + 1;
    const legend = el("p", { class: "legend", id: "member-legend" }, ...["alive", "suspect", "dead", "left"].map((st) =>
      el("span", {}, el("span", { class: "badge dot " + st }), st + " " + (counts[st] || 0))));
    fill("members", legend, table, ...extra);
    fill("probes", ...(sites.length <= COMPACT_ABOVE ? [probes] : []));
    const items = view.activity.slice(0, 40).map((a) => el("li", {},
      el("span", { class: "muted" }, a.at.slice(11, 23) + " "), a.observer + " saw ",
      el("b", {}, a.member), " ", el("span", { class: "kind " + a.kind }, a.kind),
      " #" + a.incarnation));
    fill("activity", ...(items.length ? items : [el("li", { class: "muted" }, "no changes yet")]));
  }

  function renderLanes() {
    const sites = view.sites;
    if (sites.length > COMPACT_ABOVE) return renderLaneSummary(sites);
    const head = el("tr", {}, el("th", {}, "origin"), el("th", {}, "lane"));
    for (const s of sites) head.append(el("th", {}, "at " + s));
    head.append(el("th", {}, ""));
    const body = el("tbody");
    for (const lane of view.lanes) {
      const revs = sites.map((s) => lane.revisions[s]);
      const top = Math.max(...revs.filter((r) => r !== undefined));
      const drift = revs.some((r) => r !== top);
      const row = el("tr", { class: drift ? "drift" : "", "data-origin": lane.origin, "data-lane": lane.lane },
        el("td", {}, lane.origin), el("td", {}, lane.lane));
      for (const r of revs) {
        const cell = el("td", { class: r === top ? "" : "behind" });
        cell.append(r === undefined ? "-" : String(r).slice(-6));
        if (r !== undefined) cell.title = "revision " + r;
        row.append(cell);
      }
      row.append(el("td", {}, el("span", { class: "tag " + (drift ? "drifting" : "converged") },
        drift ? "drifting" : "converged")));
      body.append(row);
    }
    const drifting = view.lanes.filter((l) => new Set(sites.map((s) => l.revisions[s])).size > 1).length;
    document.getElementById("convergence-summary").textContent = view.lanes.length
      ? (drifting ? drifting + " of " + view.lanes.length + " lanes drifting" : "all " + view.lanes.length + " lanes converged")
      : "no lanes gossiped yet";
    fill("lanes", el("table", {}, el("thead", {}, head), body));
  }

  // Many sites: one row per origin and lane, with how many sites hold its newest revision.
  function renderLaneSummary(sites) {
    const head = el("tr", {}, ...["origin", "lane", "newest", "sites holding it", ""].map((h) => el("th", {}, h)));
    const body = el("tbody");
    let drifting = 0;
    for (const lane of view.lanes) {
      const revs = sites.map((s) => lane.revisions[s]).filter((r) => r !== undefined);
      const top = Math.max(...revs);
      const holding = revs.filter((r) => r === top).length;
      const drift = holding < sites.length;
      if (drift) drifting += 1;
      body.append(el("tr", { class: drift ? "drift" : "", "data-origin": lane.origin, "data-lane": lane.lane },
        el("td", {}, lane.origin), el("td", {}, lane.lane), el("td", { title: "revision " + top }, String(top).slice(-6)),
        el("td", {}, holding + " / " + sites.length),
        el("td", {}, el("span", { class: "tag " + (drift ? "drifting" : "converged") }, drift ? "drifting" : "converged"))));
    }
    document.getElementById("convergence-summary").textContent = view.lanes.length
      ? (drifting ? drifting + " of " + view.lanes.length + " lanes drifting" : "all " + view.lanes.length + " lanes converged")
      : "no lanes gossiped yet";
    fill("lanes", el("table", {}, el("thead", {}, head), body));
  }

  function bar(c) {
    const width = 320, height = 16;
    const node = svg("svg", { class: "bar", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    node.append(svg("rect", { class: "track", x: 0, y: 0, width, height, rx: 2 }));
    let x = 0;
    for (const name of SIGNALS) {
      const value = c.contributions[name];
      if (value === undefined) continue;
      const w = Math.max(0, value) * width;
      const seg = svg("rect", { x, y: 0, width: w, height, fill: COLORS[name],
        "data-signal": name, "data-value": value });
      const tip = svg("title", {});
      tip.textContent = name + " " + fmt(value);
      seg.append(tip);
      node.append(seg);
      x += w;
    }
    return node;
  }

  function candidate(c, model) {
    const excluded = c.rank === null;
    const row = el("div", { class: "candidate" + (excluded ? " excluded" : ""),
      "data-model": model, "data-provider": c.provider, "data-site": c.site, "data-cluster": c.cluster,
      "data-score": c.score === null ? "" : c.score, "data-group": c.group === null ? "" : c.group,
      "data-selections": c.selections, "data-share": c.share === null ? "" : c.share });
    const who = el("div", { class: "who" }, c.provider + "@" + c.site, el("small", {}, c.cluster));
    if (!excluded) {
      const f = el("div", { class: "fill" });
      f.style.width = (100 * (c.share || 0)).toFixed(1) + "%";
      who.append(el("div", { class: "share", title: c.selections + " selections in the last minute" },
        el("div", { class: "track" }, f),
        el("span", {}, c.share === null ? "no selections" : Math.round(100 * c.share) + "% of selections")));
    }
    const numbers = el("div", { class: "numbers" });
    for (const name of SIGNALS) {
      if (c.contributions[name] === undefined) continue;
      numbers.append(el("span", { class: "contribution", "data-signal": name }, name + " " + fmt(c.contributions[name])), " ");
    }

    const tags = el("div", {}, el("span", { class: "tag" }, c.admission), el("span", { class: "tag" }, c.tier),
      el("span", { class: "tag" + (c.fresh ? "" : " stale") }, c.fresh ? "fresh" : "not fresh"));
    if (excluded) tags.append(el("span", { class: "tag" }, c.status));
    const graph = el("div", {}, el("div", { class: "barline" }, bar(c),
      el("b", { class: "score" }, c.score === null ? "no score" : fmt(c.score))), numbers);
    row.append(el("div", { class: "rank", title: excluded ? c.status : "overlay rank " + c.rank },
      excluded ? "-" : c.position), who, graph,
      el("div", {}, tags, el("div", { class: "reason" }, c.reason)));
    return row;
  }

  // The model's candidates under one heading per selection group (§14), excluded ones last.
  function groups(m) {
    const out = [];
    let last;
    for (const c of m.candidates) {
      const g = c.rank === null ? null : c.group;
      if (g !== null && g !== last) {
        out.push(el("div", { class: "group", "data-group": g, title: c.group_reason }, "group " + g,
          el("small", {}, c.group_reason.replace(/^group \d+: /, ""))));
      }
      last = g;
      out.push(candidate(c, m.model));
    }
    return out;
  }

  function renderRanking() {
    const sites = Object.keys(view.ranking).sort();
    if (!sites.includes(observer)) observer = sites[0] || null;
    fill("observer-tabs", ...sites.map((s) => {
      const b = el("button", { type: "button", "aria-pressed": s === observer, "data-observer": s }, "from " + s);
      b.addEventListener("click", () => { observer = s; schedule(); });
      return b;
    }));
    fill("legend", ...SIGNALS.map((s) => el("span", {}, (() => {
      const i = el("i"); i.style.background = COLORS[s]; return i; })(), s)));
    const models = (observer && view.ranking[observer]) || [];
    const out = [];
    for (const [i, m] of models.entries()) {
      const kind = m.kind || "inference_model";
      if (i === 0 || kind !== (models[i - 1].kind || "inference_model")) {
        out.push(el("h3", { class: "kind", "data-kind": kind }, KINDS[kind] || kind));
      }
      out.push(rankedEntry(m, kind));
    }
    fill("ranking", ...out);
    if (!models.length) fill("ranking", el("p", { class: "muted" }, "no candidates yet"));
  }

  // One model, tool or agent: its heading, whose scores, its selections and its groups.
  function rankedEntry(m, kind) {
    return el("div", { class: "model", "data-model": m.model, "data-kind": kind },
      el("h3", {}, m.model + (m.scoring_enabled ? "" : " (scoring off)"),
        el("span", { class: "tag kind-tag" }, KIND_TAGS[kind] || kind)),
      ...(m.scored_by === "gateway"
        ? [el("p", { class: "muted scored-by", "data-scored-by": "gateway" },
          "scored as the poll-mode gateway ranks: its order and its scores from the pulled signals")]
        : []),
      el("p", { class: "muted selections", "data-selections": m.selections },
        m.selections + (m.selections === 1 ? " selection" : " selections") +
        " by this site's gateways in the last " + m.window_s + " s"),
      ...groups(m));
  }

  // One row per cluster, one column per source (each site's gateways, then the demo's
  // providers); each cell's bar is scaled to its column's largest count.
  function renderTraffic() {
    const sources = Object.keys(view.traffic).filter((s) => Object.keys(view.traffic[s]).length)
      .sort((a, b) => (a === "@providers") - (b === "@providers") || a.localeCompare(b));
    const clusters = [...new Set(sources.flatMap((s) => Object.keys(view.traffic[s])))].sort();
    if (!clusters.length) { fill("traffic", el("p", { class: "muted" }, "no requests counted yet")); return; }
    const tops = sources.map((s) => Math.max(1, ...Object.values(view.traffic[s])));
    const head = el("tr", {}, el("th", {}, "cluster"), ...sources.map((s) =>
      el("th", {}, s === "@providers" ? "received (demo)" : "sent by " + s)));
    const rows = clusters.map((name) => el("tr", { class: "traffic-row", "data-candidate": name },
      el("td", {}, name), ...sources.map((s, i) => {
        const n = view.traffic[s][name];
        if (n === undefined) return el("td", { class: "muted" }, "-");
        const f = el("div", { class: "fill" });
        f.style.width = (100 * n / tops[i]).toFixed(1) + "%";
        return el("td", { "data-source": s }, el("div", { class: "count" }, el("div", { class: "track" }, f),
          el("span", {}, String(n))));
      })));
    fill("traffic", el("table", { class: "traffic" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  }

  function renderBudgets() {
    const rows = [];
    for (const site of Object.keys(view.budgets).sort()) {
      for (const b of view.budgets[site]) {
        rows.push(el("tr", {}, el("td", {}, site), el("td", {}, b.tenantId), el("td", {}, String(b.spendUsd)),
          el("td", {}, String(b.capUsd)), el("td", {}, fmt(b.spendRatio))));
      }
    }
    document.getElementById("budgets-panel").hidden = rows.length === 0;
    const head = el("tr", {}, ...["site", "tenant", "spend USD", "cap USD", "ratio"].map((h) => el("th", {}, h)));
    fill("budgets", el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  }

  function renderModes() {
    const rows = [];
    const modes = view.modes || {};
    for (const site of Object.keys(modes).sort()) {
      for (const peer of modes[site].mismatched) {
        rows.push(el("tr", { class: "mode-mismatch" }, el("td", {}, site), el("td", {}, modes[site].mode),
          el("td", {}, peer.site), el("td", {}, peer.mode)));
      }
    }
    document.getElementById("modes-panel").hidden = rows.length === 0;
    const head = el("tr", {}, ...["site", "runs", "peer", "peer runs"].map((h) => el("th", {}, h)));
    fill("modes", el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  }

  function render() {
    pending = false;
    if (!view) return;
    renderMembers(); renderLanes(); renderRanking(); renderTraffic(); renderBudgets(); renderModes();
    document.getElementById("generated").textContent = "as of " + view.generated_at;
    document.body.setAttribute("data-generated-at", view.generated_at);
    window.gridView = view;
  }
  function schedule() { if (!pending) { pending = true; requestAnimationFrame(render); } }
  function status(state) {
    const s = document.getElementById("status");
    s.setAttribute("data-state", state);
    s.textContent = state === "live" ? "live" : state === "lost" ? "reconnecting" : "connecting";
  }

  function connect() {
    const source = new EventSource("events");
    source.onopen = () => status("live");
    source.onerror = () => status("lost");
    source.onmessage = (message) => {
      const event = JSON.parse(message.data);
      // A new object each time: window.gridView keeps the one the DOM was drawn from.
      view = Object.assign({}, view || {}, event);
      delete view.type;
      schedule();
    };
  }

  fetch("state.json", { cache: "no-store" }).then((r) => r.json()).then((v) => {
    view = v; schedule(); connect();
  }).catch(() => { status("lost"); connect(); });
})();
