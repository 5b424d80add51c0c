/* The fabric view's script (topocast.renderers.html). No two slashes in a row anywhere in this
   file: the page must contain nothing URL-like, so comments are block comments. */
"use strict";
const D = JSON.parse(document.getElementById("topology").textContent);
const t0 = performance.now();
const S = D.switches, N = D.nodes, DOMS = D.domains, BL = D.blocks, DB = D.domainBlocks, CAP = D.cap;
const FLAG = ["", "added", "moved", "domain changed"];
/* nodes of the job named by #job=HOSTLIST, outlined wherever their cells are drawn */
let JOB = new Uint8Array(N.length);
/* the scheduler's node states when the page was made by topocast capacity --html (else null) */
const OCC_EL = document.getElementById("occupancy");
const ST = OCC_EL ? (o => N.map(n => ["free", "allocated", "drained"].includes(o[n[0]]) ? o[n[0]] : "unknown"))(JSON.parse(OCC_EL.textContent)) : null;
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]); }
function look(d) {
  if (d === -1) return "nodom"; if (d === -2) return "pend"; if (d === -3) return "other";
  return "h" + (d % 12) + " p" + (Math.floor(d / 12) % 4);
}
/* a domain as Slurm names it too: the block(s) topology-block.conf and scontrol show topology list,
   unless a block is named exactly as its domain (the default: names from the domain's ID) */
function blocksOf(d) { return DB[d].map(b => BL[b]).filter(b => b !== DOMS[d]).join(", "); }
function domName(d) {
  if (d < 0) return d === -2 ? "pending" : d === -3 ? "other domains" : "no domain";
  const named = blocksOf(d);
  return DOMS[d] + " (#" + (d + 1) + (named ? ", " + named : "") + ")";
}
function path(sw) { const p = []; while (sw >= 0) { p.push(S[sw][0]); sw = S[sw][2]; } return p.reverse().join(" > "); }
function cell(i) {
  const n = N[i], d = n[2];
  const tip = n[0] + "\nid: " + (n[1] || "-") + "\ndomain: " + domName(d) + (n[3] ? "\nsub-domain: " + n[3] : "") +
    (n[6] >= 0 ? "\nSlurm block: " + BL[n[6]] : "") + (n[5] ? "\nchanged: " + FLAG[n[5]] : "") + (ST ? "\nstate: " + ST[i] : "");
  return '<span class="n ' + look(d) + (n[5] ? " c" + n[5] : "") + (JOB[i] ? " job" : "") + (ST ? " st-" + ST[i] : "") + '" id="n' + i + '" title="' + esc(tip) + '">' +
    esc(n[0]) + (d >= 0 ? "<b>#" + (d + 1) + "</b>" : "") + "</span>";
}
function fill(segs, total) {
  return '<span class="fill">' + segs.map(([d, c]) => {
    const w = 100 * c / total;
    return '<i class="' + look(d) + '" style="width:' + w.toFixed(2) + '%" title="' + esc(domName(d) + ": " + c + " node(s)") +
      '">' + (w >= 9 && d >= 0 ? "#" + (d + 1) : "") + "</i>";
  }).join("") + "</span>";
}
function header(label, count, segs, changed, lost) {
  return '<div class="hd"><span class="tw">&#9656;</span><span class="nm">' + esc(label) + '</span><span class="ct">' + count +
    "</span>" + (segs ? fill(segs, segs.reduce((a, s) => a + s[1], 0)) : "") +
    (changed ? '<span class="chg">' + changed + " changed</span>" : "") +
    (lost ? '<span class="chg lost" title="nodes removed or moved away since the previous graph">' + lost + " lost</span>" : "") +
    "</div>";
}
function group(sw) {
  const s = S[sw], el = document.createElement("div");
  el.className = "grp"; el.dataset.sw = sw;
  const kids = s[4].length, direct = s[6] - s[5];
  const leaves = s[4].every(k => S[k][4].length === 0);
  const what = s[7].toLocaleString() + " nodes" +
    (kids ? " \u00b7 " + kids + (leaves ? (kids === 1 ? " leaf" : " leaves") : (kids === 1 ? " switch" : " switches")) : "") +
    " \u00b7 " + s[9] + " domain" + (s[9] === 1 ? "" : "s") +
    (s[11] ? " (" + (s[11] === s[9] ? (s[9] === 1 ? "" : "all ") : s[11] + " ") + "also under other switches)" : "");
  el.innerHTML = header(s[0] + (s[0] !== s[1] ? " (" + s[1] + ")" : ""), what, s[8], s[10], s[12]);
  el.firstChild.title = "switch " + s[1] + "\n" + path(sw) + "\nclick to open or close";
  el.firstChild.onclick = () => toggle(el);
  return el;
}
function bareGroup() {
  const [a, b] = D.bare, el = document.createElement("div");
  el.className = "grp bare"; el.dataset.bare = "1";
  el.innerHTML = header("no topology", (b - a) + " node(s) without switches", null, 0);
  el.firstChild.onclick = () => toggle(el);
  return el;
}
function open(el) {
  if (el.dataset.open) return;
  el.dataset.open = "1"; el.firstChild.firstChild.innerHTML = "&#9662;";
  const body = document.createElement("div");
  if (el.dataset.bare) {
    body.className = "cells"; let h = "";
    for (let i = D.bare[0]; i < D.bare[1]; i++) h += cell(i);
    body.innerHTML = h;
  } else {
    const s = S[+el.dataset.sw];
    for (const k of s[4]) body.appendChild(group(k));
    if (s[6] > s[5]) {
      const cells = document.createElement("div"); cells.className = "cells"; let h = "";
      for (let i = s[5]; i < s[6]; i++) h += cell(i);
      cells.innerHTML = h; body.appendChild(cells);
    }
  }
  el.appendChild(body);
}
function close(el) { if (!el.dataset.open) return; delete el.dataset.open; el.firstChild.firstChild.innerHTML = "&#9656;"; el.lastChild.remove(); }
function toggle(el) { el.dataset.open ? close(el) : open(el); }
const tree = document.getElementById("tree");
function overview() {
  tree.innerHTML = "";
  if (D.bare[1] > D.bare[0]) { const b = bareGroup(); tree.appendChild(b); if (N.length <= 300) open(b); }
  let level = D.roots.map(r => { const g = group(r); tree.appendChild(g); return g; });
  let shown = level.length;
  /* open breadth-first while the next level still fits on a screen */
  while (level.length) {
    const next = level.reduce((a, g) => a + S[+g.dataset.sw][4].length, 0);
    if ((shown + next > 40 && N.length > 300) || next === 0) break;
    const nl = [];
    for (const g of level) { open(g); nl.push(...g.lastChild.querySelectorAll(":scope > .grp")); }
    shown += next; level = nl;
  }
}
/* ----- search: node names, hostlists, switches, blocks, domains ----- */
function splitTerms(expr) {
  const terms = []; let depth = 0, cur = "";
  for (const ch of expr) { if (ch === "[") depth++; if (ch === "]") depth--; if (ch === "," && depth === 0) { terms.push(cur); cur = ""; } else cur += ch; }
  terms.push(cur);
  return terms.map(t => t.trim()).filter(Boolean);
}
/* a hostlist term as [literal, [[lo, hi, width], ...], literal, ...]; null when it is not one */
function parseHost(term) {
  const parts = []; let rest = term;
  while (rest) {
    const a = rest.indexOf("[");
    if (a < 0) { parts.push(rest); break; }
    const b = rest.indexOf("]", a); if (b < 0) return null;
    parts.push(rest.slice(0, a));
    const ranges = [];
    for (const part of rest.slice(a + 1, b).split(",")) {
      const m = part.trim().match(/^(\d{1,15})(?:-(\d{1,15}))?$/); if (!m) return null;
      const lo = +m[1], hi = m[2] === undefined ? lo : +m[2];
      if (hi < lo) return null;
      ranges.push([lo, hi, m[1].length]);
    }
    parts.push(ranges); rest = rest.slice(b + 1);
  }
  return parts;
}
/* how many names a parsed term stands for, counted without expanding (Infinity past the cap) */
function countHost(parts) {
  let n = 1;
  for (const p of parts) if (typeof p !== "string") { n *= p.reduce((a, r) => a + r[1] - r[0] + 1, 0); if (n > CAP) return Infinity; }
  return n;
}
function expandHost(parts) {
  let out = [""];
  for (const p of parts) {
    if (typeof p === "string") { out = out.map(r => r + p); continue; }
    const vals = [];
    for (const [lo, hi, w] of p) for (let v = lo; v <= hi; v++) vals.push(String(v).padStart(w, "0"));
    out = out.flatMap(r => vals.map(v => r + v));
  }
  return out;
}
const index = new Map(N.map((n, i) => [n[0], i]));
const swIndex = new Map(); S.forEach((s, i) => { swIndex.set(s[1], i); if (!swIndex.has(s[0])) swIndex.set(s[0], i); });
const blockIndex = new Map(BL.map((b, i) => [b, i]));
const domIndex = new Map(DOMS.map((d, i) => [d, i]));
function nodesBelow(sw) {
  /* nodes are stored depth-first, children before a switch's own nodes: a subtree is one range */
  let lo = S[sw][5]; for (let k = sw; S[k][4].length; k = S[k][4][0]) lo = Math.min(lo, S[S[k][4][0]][5]);
  const out = []; for (let i = lo; i < S[sw][6]; i++) out.push(i); return out;
}
function nodesWhere(col, v) { const out = []; N.forEach((n, i) => { if (n[col] === v) out.push(i); }); return out; }
/* one term without brackets: a node, a switch, a block, a domain (name or #N), else a substring of node names */
function resolve(t) {
  if (index.has(t)) return {what: "", hits: [index.get(t)]};
  if (swIndex.has(t)) { const sw = swIndex.get(t); return {what: "switch " + path(sw), hits: nodesBelow(sw), sw: sw}; }
  if (blockIndex.has(t)) {
    const b = blockIndex.get(t), hits = nodesWhere(6, b), d = hits.length ? N[hits[0]][2] : -1;
    return {what: "Slurm block " + t + (d >= 0 ? " = domain " + DOMS[d] + " (#" + (d + 1) + ")" : ""), hits: hits};
  }
  const num = t.match(/^#(\d+)$/), d = num ? +num[1] - 1 : domIndex.has(t) ? domIndex.get(t) : -1;
  if (d >= 0 && d < DOMS.length) return {what: "domain " + domName(d), hits: nodesWhere(2, d)};
  const l = t.toLowerCase(), hits = [];
  N.forEach((n, i) => { if (n[0].toLowerCase().includes(l)) hits.push(i); });
  return {what: "", hits: hits};
}
function reveal(i) {
  const chain = []; for (let sw = N[i][4]; sw >= 0; sw = S[sw][2]) chain.unshift(sw);
  let el = null;
  if (N[i][4] < 0) { el = tree.querySelector(".bare"); open(el); }
  for (const sw of chain) { el = tree.querySelector('.grp[data-sw="' + sw + '"]'); if (!el) break; open(el); }
  for (const old of document.querySelectorAll(".hit")) old.classList.remove("hit");
  const c = document.getElementById("n" + i);
  if (c) { c.classList.add("hit"); c.scrollIntoView({block: "center"}); }
}
function revealSwitch(target) {
  const chain = []; for (let sw = target; sw >= 0; sw = S[sw][2]) chain.unshift(sw);
  let el = null;
  for (const sw of chain) { el = tree.querySelector('.grp[data-sw="' + sw + '"]'); if (!el) return; if (sw !== target) open(el); }
  for (const old of document.querySelectorAll(".hit")) old.classList.remove("hit");
  el.classList.add("hit"); el.scrollIntoView({block: "center"});
}
function report(q, hits, notes, misses) {
  const res = document.getElementById("results");
  res.dataset.count = hits.length; res.dataset.unmatched = misses.length;
  res.innerHTML = "<div><b>" + hits.length + " match" + (hits.length === 1 ? "" : "es") + "</b> for " + esc(q) + "</div>" +
    notes.map(n => '<div class="what">' + esc(n) + "</div>").join("") +
    (misses.length ? '<div class="miss">No match for ' + misses.map(m => "<code>" + esc(m) + "</code>").join(", ") + "</div>" : "") +
    hits.slice(0, 100).map(i => '<div data-i="' + i + '"><a>' + esc(N[i][0]) + "</a> \u2014 " +
      esc(N[i][4] >= 0 ? path(N[i][4]) : "no topology") + " \u2014 " + esc(domName(N[i][2])) + "</div>").join("") +
    (hits.length > 100 ? "<div>\u2026 first 100 shown</div>" : "");
  for (const row of res.querySelectorAll("[data-i]")) row.firstChild.onclick = () => reveal(+row.dataset.i);
}
function search(q) {
  q = q.trim(); const res = document.getElementById("results");
  if (!q) { res.innerHTML = ""; res.dataset.count = 0; res.dataset.unmatched = 0; return; }
  const terms = /[\[,]/.test(q) ? splitTerms(q) : [q];
  /* count every hostlist term first: n[0-150000][0-150000] must never be built */
  const parsed = terms.map(t => t.includes("[") ? parseHost(t) : null);
  const total = parsed.reduce((a, p) => a + (p ? countHost(p) : 0), 0);
  if (total > CAP) {
    report(q, [], ["expands to " + (total === Infinity ? "more than " + CAP.toLocaleString() : total.toLocaleString()) +
      " names: at most " + CAP.toLocaleString() + " are searched, narrow the ranges"], []);
    return;
  }
  const seen = new Uint8Array(N.length), hits = [], notes = [], misses = [];
  let onlySwitch = -1;
  terms.forEach((t, k) => {
    let found = [];
    if (t.includes("[")) {
      if (!parsed[k]) { misses.push(t + " (not a hostlist)"); return; }
      const names = expandHost(parsed[k]);
      found = names.filter(n => index.has(n)).map(n => index.get(n));
      if (found.length && found.length < names.length) notes.push(t + ": " + (names.length - found.length) + " of " + names.length + " names are not in this graph");
    } else {
      const r = resolve(t); found = r.hits;
      if (r.what && found.length) notes.push(t + ": " + r.what + ", " + found.length + " node" + (found.length === 1 ? "" : "s"));
      if (r.sw !== undefined && terms.length === 1) onlySwitch = r.sw;
    }
    if (!found.length) { misses.push(t); return; }
    for (const i of found) if (!seen[i]) { seen[i] = 1; hits.push(i); }
  });
  report(q, hits, notes, misses);
  if (onlySwitch >= 0) revealSwitch(onlySwitch); else if (hits.length) reveal(hits[0]);
}
function guarded(q) {
  try { search(q); } catch (e) {
    /* whatever a URL or the box holds, the page stays usable */
    const res = document.getElementById("results");
    res.dataset.count = 0; res.innerHTML = '<div class="miss">Search failed: ' + esc(e && e.message || e) + "</div>";
  }
}
const q = document.getElementById("q");
document.getElementById("go").onclick = () => guarded(q.value);
q.addEventListener("keydown", e => { if (e.key === "Enter") guarded(q.value); });
document.getElementById("all").onclick = () => {
  if (N.length > 20000 && !confirm(N.length + " nodes: opening everything may be slow. Continue?")) return;
  let todo = [...tree.querySelectorAll(".grp")];
  while (todo.length) { const g = todo.pop(); open(g); todo.push(...g.lastChild.querySelectorAll(":scope > .grp")); }
};
document.getElementById("none").onclick = overview;
document.getElementById("legend").textContent = (DOMS.length ? "Domains are numbered #1\u2013#" + DOMS.length +
  " in name order; the number is printed in each node cell and wide bar segments, colour and pattern repeat every 12 and 48." +
  (BL.length ? " Slurm names their blocks as topology-block.conf does (" + BL[0] + "\u2026), shown next to the number." : "") : "") +
  (D.previous ? " Outlined red: added, moved or domain changed since the previous graph; \u201clost\u201d: nodes removed or moved away." : "");
/* ----- occupancy: free / allocated / drained per NVLink domain (topocast capacity --html) ----- */
function occupancy() {
  const KINDS = ["free", "allocated", "drained", "unknown"], per = new Map(), leaf = new Map();
  N.forEach((n, i) => {
    const key = n[2] >= 0 ? n[2] : -1;
    if (!per.has(key)) per.set(key, {free: 0, allocated: 0, drained: 0, unknown: 0});
    per.get(key)[ST[i]]++;
    if (n[4] >= 0 && ST[i] === "free") leaf.set(n[4], (leaf.get(n[4]) || 0) + 1);
  });
  const total = {free: 0, allocated: 0, drained: 0, unknown: 0};
  ST.forEach(s => total[s]++);
  let bestDom = -1, bestFree = 0;
  for (const [d, c] of per) if (d >= 0 && c.free > bestFree) { bestDom = d; bestFree = c.free; }
  let bestLeaf = -1, leafFree = 0;
  for (const [sw, f] of leaf) if (f > leafFree) { bestLeaf = sw; leafFree = f; }
  const rows = [...per.entries()].sort((a, b) => a[0] - b[0]).map(([d, c]) => {
    const all = KINDS.reduce((a, k) => a + c[k], 0);
    const bar = KINDS.map(k => c[k] ? '<i class="occ-' + k + '" style="width:' + (100 * c[k] / all).toFixed(1) + '%"></i>' : "").join("");
    return '<tr data-dom="' + d + '"><td>' + esc(domName(d)) + "</td>" + KINDS.map(k => "<td>" + c[k] + "</td>").join("") +
      '<td><span class="occbar">' + bar + "</span></td></tr>";
  }).join("");
  const el = document.createElement("details");
  el.id = "occupancy-panel"; el.className = "occupancy"; el.open = true;
  el.innerHTML = "<summary><b>Occupancy</b>: " + KINDS.map(k => total[k] + " " + k).join(", ") +
    " \u2014 largest free: " + (bestDom >= 0 ? bestFree + " in domain " + esc(domName(bestDom)) : "no free domain") +
    ", " + (bestLeaf >= 0 ? leafFree + " under leaf " + esc(S[bestLeaf][0]) : "no free leaf") + "</summary>" +
    "<table><tr><th>NVLink domain</th>" + KINDS.map(k => "<th>" + k + "</th>").join("") + "<th></th></tr>" + rows + "</table>";
  document.body.insertBefore(el, document.querySelector(".bar-top"));
}
if (ST) occupancy();
overview();
/* the fewest groups that hold n nodes: the k largest, as topocast score counts them (all the graph's nodes) */
function fewest(sizes, n) { sizes.sort((a, b) => b - a); let k = 0, held = 0; while (held < n && k < sizes.length) held += sizes[k++]; return k; }
/* spans of the job's nodes per NVLink domain and per leaf against the fewest possible; a node without a domain
   (or a leaf) is a group of its own */
function jobSpans(hits) {
  const spans = [];
  for (const [label, col] of [["NVLink domains", 2], ["leaves", 4]]) {
    const size = new Map(); let alone = 0;
    N.forEach(n => { if (n[col] >= 0) size.set(n[col], (size.get(n[col]) || 0) + 1); else alone++; });
    const used = new Set(); let own = 0;
    for (const i of hits) { if (N[i][col] >= 0) used.add(N[i][col]); else own++; }
    spans.push(label + ": " + (used.size + own) + " spanned, fewest possible " + fewest([...size.values(), ...Array(alone).fill(1)], hits.length));
  }
  return spans;
}
function showJob(text) {
  JOB = new Uint8Array(N.length);
  guarded(text);
  const res = document.getElementById("results"), hits = [...res.querySelectorAll("[data-i]")].map(r => +r.dataset.i);
  const all = [];
  for (const t of splitTerms(text)) {
    const p = t.includes("[") ? parseHost(t) : [t];
    if (p && countHost(p) <= CAP) for (const name of expandHost(p)) if (index.has(name)) all.push(index.get(name));
  }
  for (const i of all) JOB[i] = 1;
  for (const el of tree.querySelectorAll(".n")) if (JOB[+el.id.slice(1)]) el.classList.add("job");
  /* open every leaf that holds a job node (at most 100 leaves), so the outline is seen */
  const leaves = [...new Set(all.map(i => N[i][4]))].slice(0, 100);
  for (const sw of leaves) if (sw >= 0) { const i = all.find(k => N[k][4] === sw); reveal(i); }
  res.dataset.job = all.length;
  res.insertAdjacentHTML("afterbegin", '<div class="jobsum"><b>job: ' + all.length + " node(s) outlined</b> — " +
    esc(jobSpans([...new Set(all)]).join("; ")) + " (topocast score gives every tier and the score)</div>");
  return hits;
}
function fromFragment() {
  const j = location.hash.match(/job=([^&]*)/);
  if (j) {
    let text = j[1];
    try { text = decodeURIComponent(text); } catch (e) { /* searched as written */ }
    q.value = text;
    try { showJob(text); } catch (e) {
      document.getElementById("results").innerHTML = '<div class="miss">Job failed: ' + esc(e && e.message || e) + "</div>";
    }
    return;
  }
  const m = location.hash.match(/search=([^&]*)/);
  if (!m) return;
  let text = m[1], bad = false;
  try { text = decodeURIComponent(text); } catch (e) { bad = true; }
  q.value = text; guarded(text);
  if (bad) document.getElementById("results").insertAdjacentHTML("afterbegin",
    '<div class="miss">The search in the address is not valid percent-encoding: searched as written.</div>');
}
fromFragment();
window.addEventListener("hashchange", fromFragment);
document.body.dataset.renderMs = Math.round(performance.now() - t0);
document.body.dataset.ready = "1";
