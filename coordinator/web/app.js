// The appliance's web page: the cluster, its jobs and one job's plots,
// memory plan and log, from the coordinator's JSON API (docs/web.md),
// polled while the page is open. No libraries: plots are SVG drawn here.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2a5bd7", "#d7832a", "#2f9e5a", "#9b3fb5", "#c23b3b", "#2aa3b5", "#7a7f2a",
                 "#5b6475", "#e0609f", "#4e7d1e", "#b58f2a", "#3f4fb5", "#8c564b", "#17becf"];
let timer = null;        // the poll of the view shown
let job = null;          // what the job view holds: {id, steps, loss, rate, stride, logNext}

const $ = (id) => document.getElementById(id);

async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: "same-origin"}, opts || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) { showLogin(body && body.error); throw new Error("login"); }
  if (!r.ok) throw new Error((body && body.error) || ("HTTP " + r.status));
  return body;
}

function show(view) {
  for (const v of ["login-view", "cluster-view", "job-view"]) $(v).hidden = v !== view;
}

function showLogin(msg) {
  if (timer) { clearTimeout(timer); timer = null; }
  show("login-view");
  $("who").textContent = "";
  $("logout").hidden = true;
  if (msg && $("login-view").dataset.tried) $("login-error").textContent = msg;
}

function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}

function fmtNum(x, digits) {
  return x === null || x === undefined ? "" : Number(x).toFixed(digits);
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- cluster ----

async function pollCluster() {
  try {
    const [cl, jobs] = await Promise.all([api("/api/cluster"), api("/api/jobs")]);
    const c = cl.coordinator;
    $("coordinator-line").textContent = "coordinator " + c.name + ": loop lag p99 " +
      fmtNum(c.loop_lag_p99 * 1000, 1) + " ms (largest " + fmtNum(c.loop_lag_max * 1000, 1) +
      " ms), " + c.queued + " job(s) queued" + (c.running ? ", running " + c.running : "");
    const mb = $("members").tBodies[0];
    mb.replaceChildren(...cl.members.map((m) => {
      const tr = el("tr", {class: "member", "data-name": m.name});
      const mem = m.simulated ? "simulated compute"
                : m.wafer_memory ? "wafer " + fmtBytes(m.wafer_memory)
                : m.memory ? fmtBytes(m.memory) : "";
      for (const [t, cls] of [[m.id], [m.role], [m.name], [m.state, "state-" + m.state],
                              [m.host], [m.job], [m.load1 === null ? "" : fmtNum(m.load1, 2)],
                              [fmtNum(m.loop_lag_p99 * 1000, 1) + " ms"], [mem],
                              [fmtNum(m.last_seen_ms_ago / 1000, 1) + " s ago"]])
        tr.appendChild(el("td", cls ? {class: cls} : {}, String(t)));
      return tr;
    }));
    const jb = $("jobs").tBodies[0];
    jb.replaceChildren(...jobs.jobs.map((j) => {
      const tr = el("tr", {class: "job", "data-id": j.id});
      tr.addEventListener("click", () => { location.hash = "#/job/" + j.id; });
      const a = el("a", {href: "#/job/" + j.id}, j.id);
      const td = el("td");
      td.appendChild(a);
      tr.appendChild(td);
      for (const [t, cls] of [[j.file], [j.owner || "operator"], [j.state, "state-" + j.state],
                              [j.phase], [j.queue_position || ""], [j.step + "/" + j.max_steps],
                              [fmtNum(j.loss, 6)], [fmtNum(j.samples_per_sec, 1)]])
        tr.appendChild(el("td", cls ? {class: cls} : {}, String(t)));
      return tr;
    }));
    $("no-jobs").hidden = jobs.jobs.length > 0;
    timer = setTimeout(pollCluster, 2000);
  } catch (e) {
    if (e.message !== "login") timer = setTimeout(pollCluster, 4000);
  }
}

// ---- plots ----

const PLOT = {w: 480, h: 240, left: 58, right: 48, top: 10, bottom: 28};

// Draws series (each {xs, ys, cls, dots, right}) on an SVG with axes: the
// left axis spans the series without `right`, the right axis the others.
// The left scale is kept on the SVG (data-*) so that what is drawn can be
// read back.
function plot(node, series, ylabel) {
  const xs = [].concat(...series.map((s) => s.xs));
  node.replaceChildren();
  const W = PLOT.w - PLOT.left - PLOT.right, H = PLOT.h - PLOT.top - PLOT.bottom;
  node.appendChild(svg("line", {class: "axis", x1: PLOT.left, y1: PLOT.top + H, x2: PLOT.left + W, y2: PLOT.top + H}));
  node.appendChild(svg("line", {class: "axis", x1: PLOT.left, y1: PLOT.top, x2: PLOT.left, y2: PLOT.top + H}));
  const range = (side) => {
    const ys = [].concat(...series.filter((s) => !!s.right === side).map((s) => s.ys)).filter((y) => y !== null);
    if (!ys.length) return null;
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.05 + 1e-9; y1 += Math.abs(y1) * 0.05 + 1e-9; }
    return [y0, y1];
  };
  const ranges = {false: range(false), true: range(true)};
  if (!xs.length || !(ranges[false] || ranges[true])) {
    node.appendChild(svg("text", {x: PLOT.left + 10, y: PLOT.top + 20}, "no points yet"));
    node.dataset.n = "0";
    return;
  }
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  if (x1 === x0) x1 = x0 + 1;
  if (ranges[false])
    Object.assign(node.dataset, {x0, x1, y0: ranges[false][0], y1: ranges[false][1],
                                 left: PLOT.left, top: PLOT.top, w: W, h: H});
  const px = (x) => PLOT.left + (x - x0) / (x1 - x0) * W;
  for (const side of [false, true]) {
    const r = ranges[side];
    if (!r) continue;
    for (const [v, y] of [[r[1], PLOT.top], [r[0], PLOT.top + H]])
      node.appendChild(svg("text", side ? {x: PLOT.w - 4, y: y + 4, "text-anchor": "end"} : {x: 4, y: y + 4},
                           Number(v).toPrecision(4)));
  }
  node.appendChild(svg("text", {x: PLOT.left, y: PLOT.h - 8}, String(x0)));
  node.appendChild(svg("text", {x: PLOT.left + W - 40, y: PLOT.h - 8}, "step " + x1));
  if (ylabel) node.appendChild(svg("text", {x: PLOT.left + 6, y: PLOT.top + 12}, ylabel));
  let n = 0;
  for (const s of series) {
    const [y0, y1] = ranges[!!s.right];
    const py = (y) => PLOT.top + (y1 - y) / (y1 - y0) * H;
    const pts = [];
    for (let i = 0; i < s.xs.length; i++)
      if (s.ys[i] !== null) pts.push(px(s.xs[i]).toFixed(2) + "," + py(s.ys[i]).toFixed(2));
    n += pts.length;
    const line = svg("polyline", {class: s.cls, points: pts.join(" ")});
    line.dataset.n = String(pts.length);
    node.appendChild(line);
    if (s.dots)
      for (const p of pts) {
        const [cx, cy] = p.split(",");
        node.appendChild(svg("circle", {class: s.cls === "series2" ? "pt" : "pt1", cx, cy, r: 3}));
      }
  }
  node.dataset.n = String(n);
}

function plotPhases(node, phases) {
  node.replaceChildren();
  if (!phases.length) {
    node.appendChild(svg("text", {x: 20, y: 30}, "no step reported yet"));
    return;
  }
  const nr = Math.max(...phases.map((p) => p.replica_sec.length));
  let max = 0;
  for (let r = 0; r < nr; r++)
    max = Math.max(max, phases.reduce((a, p) => a + (p.replica_sec[r] || 0), 0));
  const W = PLOT.w - 90 - 10, bh = Math.min(28, (PLOT.h - 70) / Math.max(nr, 1));
  for (let r = 0; r < nr; r++) {
    let x = 90;
    const y = 10 + r * (bh + 6);
    node.appendChild(svg("text", {x: 4, y: y + bh / 2 + 4}, "replica " + r));
    phases.forEach((p, i) => {
      const w = max ? (p.replica_sec[r] || 0) / max * W : 0;
      const rect = svg("rect", {x, y, width: Math.max(w, 0), height: bh, fill: PALETTE[i % PALETTE.length]});
      rect.appendChild(svg("title", {}, p.name + ": " + fmtNum((p.replica_sec[r] || 0) * 1000, 2) + " ms"));
      node.appendChild(rect);
      x += w;
    });
  }
  let lx = 4, ly = PLOT.h - 40;
  phases.forEach((p, i) => {
    if (lx > PLOT.w - 90) { lx = 4; ly += 14; }
    node.appendChild(svg("rect", {x: lx, y: ly - 8, width: 9, height: 9, fill: PALETTE[i % PALETTE.length]}));
    node.appendChild(svg("text", {x: lx + 12, y: ly}, p.name));
    lx += 16 + p.name.length * 6.5;
  });
  node.appendChild(svg("text", {x: PLOT.w - 120, y: 10 + nr * (bh + 6) + 10},
                       "full bar " + fmtNum(max * 1000, 1) + " ms"));
}

// The memory plan: a bar per wse-node, the wafer's size as its full
// width, each buffer a slice of it.
function drawPlan(plan) {
  const box = $("plan");
  box.replaceChildren();
  $("plan-line").textContent = "mode " + plan.mode + ", global batch " + plan.global_batch +
    ", " + plan.total_params + " parameters" + (plan.micro_batch ? ", micro-batches of " + plan.micro_batch : "") +
    (plan.keep_outputs ? ", every output kept" : ", cheap outputs recomputed in the backward pass");
  for (const r of plan.replicas) {
    const W = 900, left = 10, bw = W - 2 * left;
    const legendRows = Math.ceil(r.buffers.length / 3);
    const n = svg("svg", {viewBox: "0 0 " + W + " " + (118 + 16 * legendRows),
                          class: "wse-plan", "data-member": r.member});
    const wafer = r.wafer_bytes || 1;
    n.appendChild(svg("text", {x: left, y: 16}, "replica " + r.replica + " on " + r.member +
      ": needs " + fmtBytes(r.needed_bytes) + " of a " + fmtBytes(r.wafer_bytes) + " wafer (" +
      fmtNum(100 * r.needed_bytes / wafer, 2) + "%), batch " + r.batch));
    // the wafer, and the part of it the plan takes (at least a sliver)
    n.appendChild(svg("rect", {class: "wafer", x: left, y: 24, width: bw, height: 16,
                               fill: "#eef0f4", stroke: "#1d2330"}));
    const used = Math.min(Math.max(r.needed_bytes / wafer * bw, 2), bw);
    n.appendChild(svg("rect", {class: "used", x: left, y: 24, width: used, height: 16,
                               fill: r.needed_bytes > wafer ? "#b3261e" : "#1d2330"}));
    n.appendChild(svg("text", {x: left, y: 56}, "what it needs, by buffer:"));
    let x = left;
    const need = r.needed_bytes || 1;
    r.buffers.forEach((b, i) => {
      const w = b.bytes / need * bw;
      const rect = svg("rect", {class: "buffer", x, y: 62, width: w, height: 24,
                                fill: PALETTE[i % PALETTE.length], "data-bytes": b.bytes});
      rect.appendChild(svg("title", {}, b.name + ": " + fmtBytes(b.bytes) + " (" + b.holds + ")"));
      n.appendChild(rect);
      x += w;
    });
    r.buffers.forEach((b, i) => {
      const lx = left + (i % 3) * 300, ly = 104 + Math.floor(i / 3) * 16;
      n.appendChild(svg("rect", {x: lx, y: ly - 9, width: 10, height: 10, fill: PALETTE[i % PALETTE.length]}));
      n.appendChild(svg("text", {x: lx + 14, y: ly}, b.name + " " + fmtBytes(b.bytes)));
    });
    box.appendChild(n);
  }
}

// ---- one job ----

async function pollJob() {
  const mine = job, id = job.id;
  const gone = () => job !== mine; // the page went elsewhere meanwhile
  try {
    const j = await api("/api/jobs/" + encodeURIComponent(id));
    if (gone()) return;
    $("job-title").textContent = j.id + " (" + j.file + ")";
    $("job-line").textContent = j.state + (j.phase ? ", " + j.phase : "") + ": step " + j.step +
      "/" + j.max_steps + (j.loss !== null ? ", loss " + fmtNum(j.loss, 6) : "") +
      (j.samples_per_sec ? ", " + fmtNum(j.samples_per_sec, 1) + " samples/s" : "") +
      (j.owner ? ", owner " + j.owner : "");
    $("job-line").className = "state-" + j.state;
    $("job-message").textContent = j.message;
    $("cancel").hidden = !j.can_cancel;
    // points: only the new ones, unless the coordinator thinned them
    const since = job.steps.length ? "?since=" + job.steps[job.steps.length - 1] : "";
    let p = await api("/api/jobs/" + encodeURIComponent(id) + "/points" + since);
    if (gone()) return;
    if (p.point_stride !== job.stride) {
      job.stride = p.point_stride;
      p = await api("/api/jobs/" + encodeURIComponent(id) + "/points");
      if (gone()) return;
      job.steps = []; job.loss = []; job.rate = [];
    }
    job.steps.push(...p.step); job.loss.push(...p.loss); job.rate.push(...p.samples_per_sec);
    plot($("loss-plot"), [{xs: job.steps, ys: job.loss, cls: "series"}], "loss");
    plot($("rate-plot"), [{xs: job.steps, ys: job.rate, cls: "series"}], "samples/s");
    const ev = j.evals;
    const metric = ev.map((e) => e.accuracy !== null ? e.accuracy : e.iou);
    plot($("eval-plot"), [{xs: ev.map((e) => e.step), ys: ev.map((e) => e.loss), cls: "series", dots: true},
                          {xs: ev.map((e) => e.step), ys: metric, cls: "series2", dots: true, right: true}],
         "loss (blue, left), " + (ev.length && ev[0].iou !== null ? "IoU" : "accuracy") + " (orange, right)");
    plotPhases($("phase-plot"), j.phases);
    if (!job.plan) {
      try {
        const plan = await api("/api/jobs/" + encodeURIComponent(id) + "/plan");
        if (gone()) return;
        job.plan = plan;
        drawPlan(plan);
      } catch (e) { if (e.message === "login" || gone()) return; $("plan-line").textContent = e.message; }
    }
    const lg = await api("/api/jobs/" + encodeURIComponent(id) + "/log?from=" + job.logNext);
    if (gone()) return;
    if (lg.lines.length) {
      const pre = $("log");
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent += lg.lines.join("\n") + "\n";
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    job.logNext = lg.next;
    const ended = !["queued", "running"].includes(j.state);
    timer = setTimeout(pollJob, ended && lg.next >= lg.total ? 5000 : 1000);
  } catch (e) {
    if (e.message === "login" || gone()) return;
    $("job-message").textContent = e.message;
    timer = setTimeout(pollJob, 4000);
  }
}

async function cancelJob() {
  $("cancel-error").textContent = "";
  if (!confirm("Cancel " + job.id + "?")) return;
  try {
    await api("/api/jobs/" + encodeURIComponent(job.id) + "/cancel", {method: "POST"});
  } catch (e) {
    if (e.message !== "login") $("cancel-error").textContent = e.message;
  }
}

// ---- routing ----

async function route() {
  if (timer) { clearTimeout(timer); timer = null; }
  let s;
  try { s = await api("/api/session"); } catch (e) { return; }
  $("who").textContent = s.operator ? "operator" : "user " + s.user;
  $("logout").hidden = false;
  const m = location.hash.match(/^#\/job\/([^/]+)$/);
  if (m) {
    show("job-view");
    job = {id: decodeURIComponent(m[1]), steps: [], loss: [], rate: [], stride: 0, logNext: 0, plan: null};
    $("log").textContent = "";
    for (const id of ["loss-plot", "eval-plot", "rate-plot", "phase-plot"]) {
      $(id).replaceChildren();
      $(id).dataset.n = "0";
    }
    for (const id of ["job-title", "job-line", "job-message"]) $(id).textContent = "";
    $("cancel").hidden = true;
    $("plan").replaceChildren();
    $("plan-line").textContent = "";
    $("cancel-error").textContent = "";
    pollJob();
  } else {
    show("cluster-view");
    job = null;
    pollCluster();
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("login-view").dataset.tried = "1";
    $("login-error").textContent = "";
    const body = new URLSearchParams({user: $("user").value, key: $("key").value});
    const r = await fetch("/api/login", {method: "POST", body, credentials: "same-origin"});
    $("key").value = "";
    if (!r.ok) {
      let msg = "HTTP " + r.status;
      try { msg = (await r.json()).error; } catch (e) { /* keep the status */ }
      $("login-error").textContent = msg;
      return;
    }
    route();
  });
  $("logout").addEventListener("click", async () => {
    await fetch("/api/logout", {method: "POST", credentials: "same-origin"});
    showLogin();
  });
  $("cancel").addEventListener("click", cancelJob);
  route();
});
