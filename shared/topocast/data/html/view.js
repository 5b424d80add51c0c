/* The fabric view's script (topocast.renderers.html). No two slashes in a row anywhere in this
   file: the page must contain nothing URL-like, so comments are block comments. */
"use strict";
const D = JSON.parse(document.getElementById("topology").textContent);
const t0 = performance.now();
const S = D.switches, N = D.nodes, DOMS = D.domains;
const FLAG = ["", "added", "moved", "domain changed"];
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]); }
function look(d) {
  if (d === -1) return "nodom"; if (d === -2) return "pend"; if (d === -3) return "other";
  return "h" + (d % 12) + " p" + (Math.floor(d / 12) % 4);
}
function domName(d) { return d >= 0 ? DOMS[d] + " (#" + (d + 1) + ")" : d === -2 ? "pending" : d === -3 ? "other domains" : "no domain"; }
function path(sw) { const p = []; while (sw >= 0) { p.push(S[sw][0]); sw = S[sw][2]; } return p.reverse().join(" > "); }
function cell(i) {
  const n = N[i], d = n[2];
  const tip = n[0] + "\nid: " + (n[1] || "-") + "\ndomain: " + domName(d) + (n[3] ? "\nsub-domain: " + n[3] : "") +
    (n[5] ? "\nchanged: " + FLAG[n[5]] : "");
  return '<span class="n ' + look(d) + (n[5] ? " c" + n[5] : "") + '" id="n' + i + '" title="' + esc(tip) + '">' +
    esc(n[0]) + (d >= 0 ? "<b>#" + (d + 1) + "</b>" : "") + "</span>";
}
function fill(segs, total) {
  return '<span class="fill">' + segs.map(([d, c]) => {
    const w = 100 * c / total;
    return '<i class="' + look(d) + '" style="width:' + w.toFixed(2) + '%" title="' + esc(domName(d) + ": " + c + " node(s)") +
      '">' + (w >= 9 && d >= 0 ? "#" + (d + 1) : "") + "</i>";
  }).join("") + "</span>";
}
function header(label, count, segs, changed) {
  return '<div class="hd"><span class="tw">&#9656;</span><span class="nm">' + esc(label) + '</span><span class="ct">' + count +
    "</span>" + (segs ? fill(segs, segs.reduce((a, s) => a + s[1], 0)) : "") +
    (changed ? '<span class="chg">' + changed + " changed</span>" : "") + "</div>";
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
  el.innerHTML = header(s[0] + (s[0] !== s[1] ? " (" + s[1] + ")" : ""), what, s[8], s[10]);
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
function expandHost(expr) {
  const terms = [], out = []; let depth = 0, cur = "";
  for (const ch of expr) { if (ch === "[") depth++; if (ch === "]") depth--; if (ch === "," && depth === 0) { terms.push(cur); cur = ""; } else cur += ch; }
  terms.push(cur);
  for (const term of terms.map(t => t.trim()).filter(Boolean)) {
    let results = [""], rest = term;
    while (rest) {
      const a = rest.indexOf("[");
      if (a < 0) { results = results.map(r => r + rest); break; }
      const b = rest.indexOf("]", a); if (b < 0) return null;
      const lit = rest.slice(0, a), vals = [];
      for (const part of rest.slice(a + 1, b).split(",")) {
        const m = part.trim().match(/^(\d+)(?:-(\d+))?$/); if (!m) return null;
        const lo = +m[1], hi = m[2] === undefined ? lo : +m[2], w = m[1].length;
        if (hi - lo > 200000) return null;
        for (let v = lo; v <= hi; v++) vals.push(String(v).padStart(w, "0"));
      }
      results = results.flatMap(r => vals.map(v => r + lit + v)); rest = rest.slice(b + 1);
      if (results.length > 200000) return null;
    }
    out.push(...results);
  }
  return out;
}
const index = new Map(N.map((n, i) => [n[0], i]));
function reveal(i) {
  const chain = []; for (let sw = N[i][4]; sw >= 0; sw = S[sw][2]) chain.unshift(sw);
  let el = null;
  if (N[i][4] < 0) { el = tree.querySelector(".bare"); open(el); }
  for (const sw of chain) { el = tree.querySelector('.grp[data-sw="' + sw + '"]'); if (!el) break; open(el); }
  for (const old of document.querySelectorAll(".n.hit")) old.classList.remove("hit");
  const c = document.getElementById("n" + i);
  if (c) { c.classList.add("hit"); c.scrollIntoView({block: "center"}); }
}
function search(q) {
  q = q.trim(); const res = document.getElementById("results"); res.innerHTML = "";
  if (!q) { res.dataset.count = 0; return; }
  let hits = [];
  if (/[\[,]/.test(q)) { const names = expandHost(q) || []; hits = names.filter(n => index.has(n)).map(n => index.get(n)); }
  else if (index.has(q)) hits = [index.get(q)];
  else { const l = q.toLowerCase(); N.forEach((n, i) => { if (n[0].toLowerCase().includes(l)) hits.push(i); }); }
  res.dataset.count = hits.length;
  res.innerHTML = "<div><b>" + hits.length + " match" + (hits.length === 1 ? "" : "es") + "</b> for " + esc(q) + "</div>" +
    hits.slice(0, 100).map(i => '<div data-i="' + i + '"><a>' + esc(N[i][0]) + "</a> \u2014 " +
      esc(N[i][4] >= 0 ? path(N[i][4]) : "no topology") + " \u2014 " + esc(domName(N[i][2])) + "</div>").join("") +
    (hits.length > 100 ? "<div>\u2026 first 100 shown</div>" : "");
  for (const row of res.querySelectorAll("[data-i]")) row.firstChild.onclick = () => reveal(+row.dataset.i);
  if (hits.length) reveal(hits[0]);
}
const q = document.getElementById("q");
document.getElementById("go").onclick = () => search(q.value);
q.addEventListener("keydown", e => { if (e.key === "Enter") search(q.value); });
document.getElementById("all").onclick = () => {
  if (N.length > 20000 && !confirm(N.length + " nodes: opening everything may be slow. Continue?")) return;
  let todo = [...tree.querySelectorAll(".grp")];
  while (todo.length) { const g = todo.pop(); open(g); todo.push(...g.lastChild.querySelectorAll(":scope > .grp")); }
};
document.getElementById("none").onclick = overview;
document.getElementById("legend").textContent = DOMS.length ? "Domains are numbered #1\u2013#" + DOMS.length +
  " in name order; the number is printed in each node cell and wide bar segments, colour and pattern repeat every 12 and 48." +
  (D.previous ? " Outlined red: added, moved or domain changed since the previous graph." : "") : "";
overview();
const m = location.hash.match(/search=([^&]*)/);
if (m) { q.value = decodeURIComponent(m[1]); search(q.value); }
document.body.dataset.renderMs = Math.round(performance.now() - t0);
document.body.dataset.ready = "1";
