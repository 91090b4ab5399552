// The race timeline, drawn from an api.Timeline (the harness computes it):
// one lane per shard, a bar per critical section, red where two overlap on
// one shard, ▼ where a write repeated a value (a lost update), ✕ where a
// fenced write was refused, a tick where a stale holder's lease ran out,
// and ◆ at a COMMIT sent after the lock's release. The page and the
// harness's HTML report both load this file. It draws on canvases, so a run
// of 20,000 purchases draws in milliseconds; a window over the whole run
// zooms in on any part of it.
"use strict";

window.SeckillTimeline = (() => {
  const COLORS = {
    bar: "#64748b", overlap: "#dc2626", atomic: "#94a3b8", lost: "#7c2d12",
    refused: "#111827", lease: "#b45309", commit: "#7c3aed", focus: "#111827", grid: "#e5e7eb", text: "#5b6470",
  };
  const LABEL_W = 56; // the lane labels' margin, px
  const MAX_H = 420; // the detail's most height, px
  const AXIS_H = 18; // the time axis under the detail, px

  const ms = (us) => (us / 1000).toLocaleString("en-US", { maximumFractionDigits: 2 }) + " ms";

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      // Through the CSSOM: a style attribute is inline style, which the
      // page's Content-Security-Policy refuses.
      else if (k === "style") Object.assign(e.style, v);
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  // layout places the lanes: each shard's sub-rows, a row's height chosen
  // so that the whole fits MAX_H.
  function layout(tl) {
    const rows = tl.rows && tl.rows.length ? tl.rows : [1];
    const total = rows.reduce((a, b) => a + b, 0);
    const rowH = Math.max(2, Math.min(12, Math.floor((MAX_H - 4 * rows.length) / total)));
    const lanes = [];
    let y = 4;
    for (const n of rows) {
      lanes.push({ y, h: n * rowH });
      y += n * rowH + 4;
    }
    return { rowH, lanes, height: y };
  }

  // draw fills container with the sentence, the controls, the detail and
  // the overview; it returns nothing and keeps its state on the container.
  function draw(container, tl) {
    container.seckillTimeline?.observer.disconnect();
    container.replaceChildren();
    container.classList.add("tl");
    const bars = tl.bars || [];
    const lay = layout(tl);
    const span = Math.max(tl.span_us, 1);
    const sentence = el("p", { class: "tl-sentence" }, capital(tl.sentence || ""));
    const counts = el("p", { class: "tl-counts" },
      [bars.length.toLocaleString("en-US") + " critical sections over " + tl.shards + " shard" + (tl.shards === 1 ? "" : "s"),
        tl.overlapping + " overlapping", tl.lost_updates + " lost updates",
        tl.refused ? tl.refused + " refused" : "", tl.stale ? tl.stale + " past their lease" : "",
        tl.untraced ? tl.untraced + " answers without a trace" : ""].filter(Boolean).join(" · "));
    const zoomIn = el("button", { type: "button", class: "chip" }, "Zoom in");
    const zoomOut = el("button", { type: "button", class: "chip" }, "Zoom out");
    const whole = el("button", { type: "button", class: "chip" }, "Whole run");
    const focusBtn = el("button", { type: "button", class: "chip" }, "The sentence");
    focusBtn.hidden = !(tl.focus && tl.focus.length);
    const range = el("span", { class: "tl-range muted" });
    const controls = el("div", { class: "tl-controls", role: "group", "aria-label": "Timeline zoom" }, zoomIn, zoomOut, whole, focusBtn, range);
    const detail = el("canvas", { class: "tl-detail", role: "img" });
    const overview = el("canvas", { class: "tl-overview", role: "img", "aria-label": "The whole run; click to move the window" });
    const tip = el("p", { class: "tl-tip muted" }, "Point at a bar (or tap it) to see its purchase.");
    const entry = (sign, text) => el("span", {}, sign, text);
    const legend = el("p", { class: "tl-legend muted" },
      entry(swatch(COLORS.bar), "held alone"), entry(swatch(COLORS.overlap), "overlapping on one shard"),
      entry(swatch(COLORS.atomic), "atomic step"), entry(mark("▼", COLORS.lost), "lost update"),
      entry(mark("✕", COLORS.refused), "refused write"), entry(mark("|", COLORS.lease), "lease ran out"),
      entry(mark("◆", COLORS.commit), "COMMIT after the release"));
    container.append(sentence, counts, controls, el("div", { class: "tl-box" }, detail), overview, tip, legend);

    const st = { v0: 0, v1: span, drawnRed: 0 };
    const focus = () => {
      const fb = (tl.focus || []).map((i) => bars[i]).filter(Boolean);
      if (!fb.length) return;
      const a = Math.min(...fb.map((b) => b.start_us)), z = Math.max(...fb.map((b) => b.end_us));
      const pad = Math.max((z - a) * 0.6, 200);
      setView(a - pad, z + pad);
    };
    const setView = (a, z) => {
      const w = Math.min(Math.max(z - a, 50), span);
      a = Math.min(Math.max(a, 0), span - w);
      st.v0 = a;
      st.v1 = a + w;
      render();
    };
    const zoom = (f) => {
      const mid = (st.v0 + st.v1) / 2, w = (st.v1 - st.v0) * f;
      setView(mid - w / 2, mid + w / 2);
    };
    zoomIn.addEventListener("click", () => zoom(0.5));
    zoomOut.addEventListener("click", () => zoom(2));
    whole.addEventListener("click", () => setView(0, span));
    focusBtn.addEventListener("click", focus);
    overview.addEventListener("click", (e) => {
      const r = overview.getBoundingClientRect();
      const x = ((e.clientX - r.left - LABEL_W) / Math.max(r.width - LABEL_W, 1)) * span;
      const w = st.v1 - st.v0;
      setView(x - w / 2, x + w / 2);
    });
    const pick = (e) => {
      const r = detail.getBoundingClientRect();
      const x = e.clientX - r.left, y = e.clientY - r.top;
      const w = r.width - LABEL_W;
      const t = st.v0 + ((x - LABEL_W) / w) * (st.v1 - st.v0);
      const slack = (3 / w) * (st.v1 - st.v0);
      const hit = bars.find((b) => {
        const lane = lay.lanes[b.shard];
        if (!lane) return false;
        const by = lane.y + b.row * lay.rowH;
        return y >= by && y < by + lay.rowH && t >= b.start_us - slack && t <= b.end_us + slack;
      });
      tip.textContent = hit ? describe(hit) : "No bar there.";
    };
    detail.addEventListener("mousemove", pick);
    detail.addEventListener("click", pick);

    function render() {
      if (!detail.isConnected) return; // drawn over since, or taken out of the page
      st.drawnRed = paint(detail, tl, lay, st.v0, st.v1, true);
      paint(overview, tl, { ...lay, rowH: 0 }, 0, span, false, st);
      range.textContent = ms(st.v0) + " – " + ms(st.v1) + " of " + ms(span);
      detail.setAttribute("aria-label", capital(tl.sentence || "") + ". " + counts.textContent);
      container.dataset.red = String(st.drawnRed);
    }
    // Redrawn when the width changes, a frame later: drawing inside the
    // observer's callback would resize what it observes.
    let width = container.clientWidth;
    const observer = new ResizeObserver(() => {
      if (container.clientWidth === width) return;
      width = container.clientWidth;
      requestAnimationFrame(render);
    });
    observer.observe(container);
    container.seckillTimeline = { render, setView, state: st, observer };
    if (tl.focus && tl.focus.length) focus();
    else render();
  }

  // paint draws the bars in [v0, v1] on canvas and returns how many red
  // bars it drew. The overview draws every lane as one thin strip and the
  // window's frame.
  function paint(canvas, tl, lay, v0, v1, full, frame) {
    const cssW = Math.max(canvas.parentNode.clientWidth || canvas.clientWidth || 300, 120);
    const cssH = full ? lay.height + AXIS_H : Math.max(24, 6 * lay.lanes.length + 6);
    const dpr = window.devicePixelRatio || 1;
    canvas.style.width = cssW + "px";
    canvas.style.height = cssH + "px";
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cssW, cssH);
    const w = cssW - LABEL_W;
    const x = (t) => LABEL_W + ((t - v0) / (v1 - v0)) * w;
    const laneY = (k) => (full ? lay.lanes[k].y : 3 + 6 * k);
    const laneH = (k) => (full ? lay.lanes[k].h : 4);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    for (let k = 0; k < lay.lanes.length; k++) {
      g.fillStyle = COLORS.grid;
      g.fillRect(LABEL_W, laneY(k), w, laneH(k));
      if (full && (lay.lanes.length <= 16 || k % Math.ceil(lay.lanes.length / 16) === 0)) {
        g.fillStyle = COLORS.text;
        g.fillText("shard " + k, 2, laneY(k) + Math.min(laneH(k), 14) / 2);
      }
    }
    let red = 0;
    const marks = [];
    const bars = tl.bars || [];
    // Red last, so that a red bar is never hidden under a plain one.
    for (const pass of [false, true]) {
      for (const b of bars) {
        if (!!b.overlap !== pass || b.end_us < v0 || b.start_us > v1 || !lay.lanes[b.shard]) continue;
        const y = laneY(b.shard) + (full ? b.row * lay.rowH : 0);
        const h = full ? Math.max(lay.rowH - 1, 1) : laneH(b.shard);
        const x0 = x(Math.max(b.start_us, v0)), x1 = x(Math.min(b.end_us, v1));
        g.fillStyle = b.overlap ? COLORS.overlap : b.kind === "atomic" ? COLORS.atomic : COLORS.bar;
        g.fillRect(x0, y, Math.max(x1 - x0, 1), h);
        if (b.overlap) red++;
        if (full) marks.push([b, y, h]);
      }
    }
    const focused = new Set((tl.focus || []).map((i) => bars[i]));
    for (const [b, y, h] of marks) {
      const at = (t, glyph, color) => {
        if (t === undefined || t === null || t < v0 || t > v1) return;
        g.fillStyle = color;
        g.fillText(glyph, x(t) - 4, y + h / 2);
      };
      if (b.lost) at(b.write_us, "▼", COLORS.lost);
      if (b.outcome === "refused") at(b.write_us ?? b.end_us, "✕", COLORS.refused);
      if (b.lease_end_us !== undefined && b.lease_end_us >= v0 && b.lease_end_us <= v1) {
        g.fillStyle = COLORS.lease;
        g.fillRect(x(b.lease_end_us) - 1, y - 1, 2, h + 2);
      }
      if (b.commit_us !== undefined && b.commit_us > b.end_us) {
        g.strokeStyle = COLORS.commit;
        g.setLineDash([3, 2]);
        g.beginPath();
        g.moveTo(x(Math.max(b.end_us, v0)), y + h / 2);
        g.lineTo(x(Math.min(b.commit_us, v1)), y + h / 2);
        g.stroke();
        g.setLineDash([]);
        at(b.commit_us, "◆", COLORS.commit);
      }
      if (focused.has(b)) {
        g.strokeStyle = COLORS.focus;
        g.lineWidth = 2;
        g.strokeRect(x(Math.max(b.start_us, v0)) - 1, y - 1, Math.max(x(Math.min(b.end_us, v1)) - x(Math.max(b.start_us, v0)), 1) + 2, h + 2);
        g.lineWidth = 1;
      }
    }
    if (full) axis(g, canvas, x, v0, v1, w, lay.height);
    if (frame) {
      g.strokeStyle = COLORS.focus;
      g.lineWidth = 2;
      g.strokeRect(x(frame.v0), 1, Math.max(x(frame.v1) - x(frame.v0), 2), cssH - 2);
      g.lineWidth = 1;
    }
    return red;
  }

  // axis draws the time under the lanes: a tick and its time every 1, 2 or
  // 5 × 10^k µs (10 µs at least), about one per 90 px and two at least, and keeps the times drawn in the
  // canvas's data-axis (the page's test reads them).
  function axis(g, canvas, x, v0, v1, w, top) {
    // Never under 10 µs: the times are said to the hundredth of a ms.
    // At least five wanted, so that even a narrow canvas shows two times.
    const want = Math.max((v1 - v0) / Math.max(w / 90, 5), 10);
    const pow = 10 ** Math.floor(Math.log10(want));
    const step = [1, 2, 5, 10].map((m) => m * pow).find((st) => st >= want) || 10 * pow;
    const drawn = [];
    const boxes = []; // each time's left:right, px
    let right = -Infinity; // the right edge of the last time drawn
    g.fillStyle = COLORS.text;
    g.strokeStyle = COLORS.grid;
    g.textAlign = "center";
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      const px = x(t);
      g.beginPath();
      g.moveTo(px, 0);
      g.lineTo(px, top);
      g.stroke();
      const label = ms(t);
      const half = g.measureText(label).width / 2;
      const at = Math.min(Math.max(px, LABEL_W + half), LABEL_W + w - half);
      // A time that would overlap the one before it (long times on a
      // narrow screen, or one pushed in from the edge) keeps its tick only.
      if (at - half < right + 4) continue;
      right = at + half;
      g.fillText(label, at, top + AXIS_H / 2);
      drawn.push(label);
      boxes.push(Math.round(at - half) + ":" + Math.round(at + half));
    }
    g.textAlign = "start";
    canvas.dataset.axis = drawn.join(" | ");
    canvas.dataset.axisBoxes = boxes.join(" ");
  }

  function describe(b) {
    const parts = ["Buyer " + b.buyer + ", shard " + b.shard + ": " + b.kind + " " + ms(b.start_us) + " – " + ms(b.end_us)];
    if (b.read !== undefined) parts.push("read " + b.read + (b.read_us !== undefined ? " at " + ms(b.read_us) : ""));
    if (b.wrote !== undefined) parts.push("wrote " + b.wrote + (b.write_us !== undefined ? " at " + ms(b.write_us) : ""));
    if (b.commit_us !== undefined) parts.push("COMMIT sent at " + ms(b.commit_us));
    if (b.token) parts.push("token " + b.token);
    if (b.lease_end_us !== undefined) parts.push("lease ran out at " + ms(b.lease_end_us));
    parts.push(b.outcome + (b.overlap ? ", overlapping" : "") + (b.lost ? ", a lost update" : ""));
    return parts.join(" · ");
  }

  const capital = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);
  const swatch = (c) => el("span", { class: "tl-swatch", style: { background: c } });
  const mark = (glyph, c) => el("span", { class: "tl-mark", style: { color: c } }, glyph);

  return { draw };
})();
