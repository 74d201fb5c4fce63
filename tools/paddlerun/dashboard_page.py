"""The live job page paddlerun --dashboard serves at / (dashboard.py).

One HTML document with its script inline: the machines have no internet, so no CDN, and a .py
module travels wherever the launcher does (bazel runfiles, tools/install-paddlerun, the wheel)
without packaging rules of its own. The script polls /api/workers once a second and draws with
plain SVG: a table of the workers, each rank's step time and allreduce wait over time, the loss
curve, the straggler verdict and the events (membership changes and failures with their
messages). The history lives in the page, so a page opened late starts its curves then.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>paddlerun job</title>
<style>
 body { font: 14px/1.4 sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 1.3em; margin: 0 0 .3em; }
 h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
 table { border-collapse: collapse; }
 td, th { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: right; }
 th { background: #f3f3f3; }
 .down { color: #b00; }
 #straggler { padding: .4em .7em; background: #f3f3f3; display: inline-block; }
 #straggler.slow { background: #fde2e2; color: #900; }
 .charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
 svg { border: 1px solid #ccc; background: #fff; }
 .legend span { margin-right: 1em; }
 #events li { font-family: monospace; font-size: 12px; }
</style>
</head>
<body>
<h1>Job <span id="job">?</span></h1>
<div><span id="summary">waiting for the workers' first reports...</span>
 &middot; <a href="/metrics">/metrics</a> &middot; <a href="/api/workers">/api/workers</a></div>
<h2>Straggler</h2>
<div id="straggler">no verdict yet</div>
<h2>Workers</h2>
<table id="workers"><thead><tr><th>rank</th><th>host</th><th>pid</th><th>generation</th>
<th>steps</th><th>samples</th><th>step ms</th><th>allreduce wait ms</th><th>compute ms</th>
<th>loss</th><th>last report</th></tr></thead><tbody></tbody></table>
<div class="charts">
 <div><h2>Step time per rank (ms)</h2><svg id="steps" width="460" height="220"></svg>
  <div class="legend" id="steps-legend"></div></div>
 <div><h2>Allreduce wait per rank (ms per step)</h2><svg id="waits" width="460" height="220"></svg>
  <div class="legend" id="waits-legend"></div></div>
 <div><h2>Loss</h2><svg id="loss" width="460" height="220"></svg>
  <div class="legend" id="loss-legend"></div></div>
</div>
<h2>Membership changes and failures</h2>
<ul id="events"><li>none</li></ul>
<script>
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];
const KEEP_S = 300;  // seconds of history the curves show
const series = {steps: {}, waits: {}, loss: {}};
const t0 = Date.now() / 1000;

function push(chart, key, t, v) {
  if (v === null || v === undefined || !isFinite(v)) return;
  const s = series[chart][key] || (series[chart][key] = []);
  s.push([t, v]);
  while (s.length && s[0][0] < t - KEEP_S) s.shift();
}

function draw(id) {
  const svg = document.getElementById(id);
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), P = 34;
  const keys = Object.keys(series[id]).sort((a, b) => a - b);
  let tmin = Infinity, tmax = -Infinity, vmax = 0;
  for (const k of keys) for (const [t, v] of series[id][k]) {
    tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); vmax = Math.max(vmax, v);
  }
  let out = "";
  if (keys.length && tmax > tmin) {
    vmax = vmax > 0 ? vmax * 1.1 : 1;
    const x = t => P + (t - tmin) / (tmax - tmin) * (W - P - 8);
    const y = v => H - 20 - v / vmax * (H - 30);
    for (let i = 0; i <= 4; i++) {
      const v = vmax * i / 4;
      out += `<line x1="${P}" x2="${W - 8}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>` +
             `<text x="2" y="${y(v) + 4}" font-size="10">${v.toPrecision(3)}</text>`;
    }
    out += `<text x="${P}" y="${H - 4}" font-size="10">${(tmin - t0).toFixed(0)} s</text>` +
           `<text x="${W - 40}" y="${H - 4}" font-size="10">${(tmax - t0).toFixed(0)} s</text>`;
    keys.forEach((k, i) => {
      const pts = series[id][k].map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      out += `<polyline fill="none" stroke-width="1.5" stroke="${COLORS[i % COLORS.length]}" ` +
             `points="${pts.join(" ")}"/>`;
    });
  }
  svg.innerHTML = out;
  document.getElementById(id + "-legend").innerHTML = keys.map((k, i) =>
    `<span style="color:${COLORS[i % COLORS.length]}">&#9632; rank ${k}</span>`).join("");
}

const fmt = (v, d) => (v === null || v === undefined) ? "" : v.toFixed(d);
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                    '"': "&quot;"}[c]));

function render(data) {
  document.getElementById("job").textContent = data.job;
  const now = Date.now() / 1000;
  const live = data.workers.filter(w => w.age < 5);
  const hosts = new Set(data.workers.map(w => w.host));
  document.getElementById("summary").textContent =
    `${live.length} of ${data.workers.length} workers reporting, on ${hosts.size} host(s)`;
  const rows = data.workers.map(w => {
    const c = w.metrics.counters || {}, g = w.metrics.gauges || {}, r = w.recent || {};
    if (w.age < 5) {
      push("steps", w.rank, now, r.step_s * 1000);
      push("waits", w.rank, now, r.wait_s * 1000);
      push("loss", w.rank, now, g.paddle_loss);
    }
    return `<tr class="${w.age < 5 ? "" : "down"}"><td>${w.rank}</td><td>${esc(w.host)}</td>` +
      `<td>${w.pid}</td><td>${w.generation}</td><td>${c.paddle_steps_total ?? ""}</td>` +
      `<td>${c.paddle_samples_total ?? ""}</td><td>${fmt(r.step_s * 1000, 1)}</td>` +
      `<td>${fmt(r.wait_s * 1000, 1)}</td><td>${fmt(r.busy_s * 1000, 1)}</td>` +
      `<td>${fmt(g.paddle_loss, 4)}</td><td>${w.age.toFixed(1)} s ago</td></tr>`;
  });
  document.querySelector("#workers tbody").innerHTML = rows.join("");
  for (const id of ["steps", "waits", "loss"]) draw(id);
  const s = document.getElementById("straggler");
  s.textContent = data.straggler ? data.straggler.text : "no straggler: the ranks keep pace";
  s.className = data.straggler ? "slow" : "";
  const ev = data.events.slice().reverse().map(e =>
    `<li>${new Date(e.time * 1000).toLocaleTimeString()} [${esc(e.kind)}]` +
    `${e.rank === null || e.rank === undefined ? "" : " rank " + e.rank}: ${esc(e.text)}</li>`);
  document.getElementById("events").innerHTML = ev.length ? ev.join("") : "<li>none</li>";
}

async function poll() {
  try {
    const r = await fetch("/api/workers" + location.search, {cache: "no-store"});
    if (r.ok) render(await r.json());
  } catch (e) {
    document.getElementById("summary").textContent = "the launcher does not answer (job ended?)";
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
"""
