// bench_charts.js — the bench matrix's figures as inline SVG in the page (the benchmark panel, app/bench_panel.js):
// the same figure objects as the CLI report (exactspec.benchmatrix computes them, py/bench/matrix_report.py draws
// them for report.html) with the same geometry, classes and data attributes:
//   bars   <rect class="chart-bar" data-series data-category data-value>   (height, or width when horizontal, linear
//          in the value), ranges <line class="range" data-lo data-hi>, a reference line <line class="ref">
//   lines  <circle class="chart-pt" data-series data-category data-value>, <polyline class="line" data-series>
//   scatter <circle class="chart-pt" data-series data-x data-y>
// Built with createElementNS (no markup strings, no inline styles: the page's CSP allows neither).
//   figureElement(fig) -> <figure class="fig" data-figure data-kind> with its caption, SVG and table

const NS = 'http://www.w3.org/2000/svg';
const W = 760, H = 320, ML = 64, MR = 16, MB = 96;
const COLORS = ['#3366cc', '#dc7a12', '#2a9d5c', '#b83280', '#7a5af8', '#8c6d1f', '#0e9aa7', '#d9534f', '#5b6770',
  '#9acd32', '#e377c2', '#17becf'];

// a number as the data attributes spell it (up to 6 significant digits, as the report's)
export function num(v) { return v === null || v === undefined ? '' : String(Number(Number(v).toPrecision(6))); }
const g3 = (v) => String(Number(Number(v).toPrecision(3)));
const g4 = (v) => String(Number(Number(v).toPrecision(4)));

export function niceMax(v) {
  if (!(v > 0) || !Number.isFinite(v)) return 1;
  const e = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * e) return m * e;
  return 10 * e;
}

const ticks = (vmax, n = 5) => Array.from({ length: n + 1 }, (_, i) => (i * vmax) / n);

function el(name, attrs = {}, text = null) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  if (text !== null) e.textContent = text;
  return e;
}

function titled(e, text) { e.append(el('title', {}, text)); return e; }

function legendRows(names, width) {
  const rows = [];
  let row = [], x = ML;
  for (const name of names) {
    const w = 18 + 7 * name.length + 14;
    if (row.length && x + w > width - MR) { rows.push(row); row = []; x = ML; }
    row.push([name, x]);
    x += w;
  }
  if (row.length) rows.push(row);
  return rows;
}

function legend(svg, names) {
  const rows = legendRows(names, W);
  rows.forEach((row, r) => {
    const y = 14 + 16 * r;
    for (const [name, x] of row) {
      const i = names.indexOf(name);
      svg.append(el('rect', { class: 'key', x, y: y - 9, width: 12, height: 10, fill: COLORS[i % COLORS.length] }),
        el('text', { class: 'legend', x: x + 16, y }, name));
    }
  });
  return 22 + 16 * rows.length;
}

function axis(svg, top, vmax, yLabel, plotH) {
  for (const t of ticks(vmax)) {
    const y = top + plotH - (plotH * t) / vmax;
    svg.append(el('line', { class: 'grid', x1: ML, x2: W - MR, y1: y.toFixed(2), y2: y.toFixed(2) }),
      el('text', { class: 'tick', x: ML - 6, y: (y + 4).toFixed(2), 'text-anchor': 'end' }, g3(t)));
  }
  const cy = (top + plotH / 2).toFixed(1);
  svg.append(el('text', { class: 'axis', x: 14, y: cy, transform: `rotate(-90 14 ${cy})`, 'text-anchor': 'middle' }, yLabel || ''));
}

function svgRoot(fig, h) {
  return el('svg', { class: 'chart', 'data-figure': fig.id, viewBox: `0 0 ${W} ${h}`, width: W, height: h, role: 'img',
    'aria-label': fig.title });
}

function bars(fig) {
  const { series, categories: cats } = fig;
  const svg = svgRoot(fig, H);
  const top = series.length > 1 ? legend(svg, series.map((s) => s.name)) : 16;
  const plotH = H - top - MB;
  const vals = [];
  for (const s of series) for (const v of [...s.values, ...(s.hi || [])]) if (v !== null && v !== undefined) vals.push(v);
  const vmax = niceMax(Math.max(...vals, fig.ref || 0, 1e-12) * 1.05);
  axis(svg, top, vmax, fig.y_label, plotH);
  const base = top + plotH;
  const group = (W - ML - MR) / Math.max(1, cats.length);
  const bw = (group * 0.8) / Math.max(1, series.length);
  const flags = fig.flags || {};
  cats.forEach((c, ci) => {
    const x0 = ML + ci * group + group * 0.1;
    series.forEach((s, si) => {
      const v = s.values[ci];
      if (v === null || v === undefined) return;
      const h = (plotH * v) / vmax;
      const x = x0 + si * bw;
      svg.append(titled(el('rect', { class: 'chart-bar', 'data-series': s.name, 'data-category': c, 'data-value': num(v),
        x: x.toFixed(2), y: (base - h).toFixed(3), width: bw.toFixed(2), height: h.toFixed(3),
        fill: COLORS[si % COLORS.length] }), `${s.name}, ${c}: ${g4(v)}`));
      const lo = (s.lo || [])[ci], hi = (s.hi || [])[ci];
      if (lo !== null && lo !== undefined && hi !== null && hi !== undefined && hi > lo) {
        const cx = (x + bw / 2).toFixed(2);
        svg.append(el('line', { class: 'range', 'data-lo': num(lo), 'data-hi': num(hi), x1: cx, x2: cx,
          y1: (base - (plotH * lo) / vmax).toFixed(3), y2: (base - (plotH * hi) / vmax).toFixed(3) }));
      }
    });
    const x = x0 + group * 0.4;
    const ty = base + 14;
    const t = el('text', { class: `cat${flags[c] ? ' flagged' : ''}`, 'data-category': c, x: x.toFixed(2), y: ty,
      'text-anchor': 'end', transform: `rotate(-35 ${x.toFixed(2)} ${ty})` }, (flags[c] ? '✗ ' : '') + c);
    if (flags[c]) titled(t, flags[c]);
    svg.append(t);
  });
  if (fig.ref !== null && fig.ref !== undefined) {
    const y = (base - (plotH * fig.ref) / vmax).toFixed(3);
    svg.append(el('line', { class: 'ref', 'data-value': num(fig.ref), x1: ML, x2: W - MR, y1: y, y2: y }));
  }
  svg.append(el('line', { class: 'axisline', x1: ML, x2: W - MR, y1: base, y2: base }));
  return svg;
}

function hbars(fig) {
  const s = fig.series[0], cats = fig.categories;
  const row = 22, lw = 230;
  const h = 16 + row * cats.length + 28;
  const vmax = niceMax(Math.max(...s.values.filter((v) => v !== null && v !== undefined), 1e-12) * 1.05);
  const pw = W - lw - MR - 60;
  const svg = svgRoot(fig, h);
  for (const t of ticks(vmax, 4)) {
    const x = (lw + (pw * t) / vmax).toFixed(2);
    svg.append(el('line', { class: 'grid', x1: x, x2: x, y1: 10, y2: h - 24 }),
      el('text', { class: 'tick', x, y: h - 8, 'text-anchor': 'middle' }, g3(t)));
  }
  cats.forEach((c, i) => {
    const y = 12 + row * i;
    const v = s.values[i];
    svg.append(el('text', { class: 'cat', 'data-category': c, x: lw - 8, y: y + 14, 'text-anchor': 'end' }, c));
    if (v === null || v === undefined) return;
    const w = (pw * v) / vmax;
    svg.append(titled(el('rect', { class: 'chart-bar', 'data-series': s.name, 'data-category': c, 'data-value': num(v),
      x: lw, y, width: w.toFixed(3), height: row - 6, fill: COLORS[0] }), `${c}: ${g4(v)} ${fig.unit || ''}`),
    el('text', { class: 'val', x: (lw + w + 4).toFixed(2), y: y + 13 }, g4(v)));
  });
  return svg;
}

function lines(fig) {
  const { series, categories: cats } = fig;
  const svg = svgRoot(fig, H);
  const top = legend(svg, series.map((s) => s.name));
  const plotH = H - top - 40;
  const vals = series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
  const vmax = fig.y_max || niceMax(Math.max(...vals, 1e-12) * 1.05);
  axis(svg, top, vmax, fig.y_label, plotH);
  const base = top + plotH;
  const step = (W - ML - MR) / Math.max(1, cats.length);
  const xs = cats.map((_, i) => ML + step * (i + 0.5));
  const flags = fig.flags || {};
  series.forEach((s, si) => {
    const col = COLORS[si % COLORS.length];
    const pts = [];
    s.values.forEach((v, i) => { if (v !== null && v !== undefined) pts.push([xs[i], base - (plotH * v) / vmax, cats[i], v]); });
    svg.append(el('polyline', { class: 'line', 'data-series': s.name, fill: 'none', stroke: col,
      'stroke-dasharray': flags[s.name] ? '4 3' : null,
      points: pts.map(([x, y]) => `${x.toFixed(2)},${y.toFixed(3)}`).join(' ') }));
    for (const [x, y, c, v] of pts) {
      svg.append(titled(el('circle', { class: 'chart-pt', 'data-series': s.name, 'data-category': c, 'data-value': num(v),
        cx: x.toFixed(2), cy: y.toFixed(3), r: 3, fill: col }), `${s.name}, ${fig.x_label || ''} ${c}: ${Number(v).toFixed(3)}`));
    }
  });
  svg.append(el('line', { class: 'axisline', x1: ML, x2: W - MR, y1: base, y2: base }));
  cats.forEach((c, i) => svg.append(el('text', { class: 'tick', x: xs[i].toFixed(2), y: base + 16, 'text-anchor': 'middle' }, c)));
  svg.append(el('text', { class: 'axis', x: ((ML + W - MR) / 2).toFixed(1), y: base + 32, 'text-anchor': 'middle' }, fig.x_label || ''));
  return svg;
}

function scatter(fig) {
  const series = fig.series;
  const svg = svgRoot(fig, H);
  const top = legend(svg, series.map((s) => s.name));
  const plotH = H - top - 40;
  const xsv = series.flatMap((s) => s.points.map((p) => p[0]));
  const ysv = series.flatMap((s) => s.points.map((p) => p[1]));
  const xmax = niceMax(Math.max(...xsv, 1) * 1.05);
  const ymax = niceMax(Math.max(...ysv, 1e-12) * 1.05);
  axis(svg, top, ymax, fig.y_label, plotH);
  const base = top + plotH;
  const pw = W - ML - MR;
  for (const t of ticks(xmax, 4)) {
    svg.append(el('text', { class: 'tick', x: (ML + (pw * t) / xmax).toFixed(2), y: base + 16, 'text-anchor': 'middle' }, g3(t)));
  }
  series.forEach((s, si) => {
    const col = COLORS[si % COLORS.length];
    for (const [x, y] of s.points) {
      svg.append(titled(el('circle', { class: 'chart-pt', 'data-series': s.name, 'data-x': num(x), 'data-y': num(y),
        cx: (ML + (pw * x) / xmax).toFixed(3), cy: (base - (plotH * y) / ymax).toFixed(3), r: 3, fill: col,
        'fill-opacity': 0.7 }), `${s.name}: ${x} tokens, ${Number(y).toFixed(1)} tok/s`));
    }
  });
  svg.append(el('line', { class: 'axisline', x1: ML, x2: W - MR, y1: base, y2: base }));
  svg.append(el('text', { class: 'axis', x: ((ML + W - MR) / 2).toFixed(1), y: base + 32, 'text-anchor': 'middle' }, fig.x_label || ''));
  return svg;
}

export function svgOf(fig) {
  if (fig.kind === 'bars') return fig.horizontal ? hbars(fig) : bars(fig);
  if (fig.kind === 'lines') return lines(fig);
  if (fig.kind === 'scatter') return scatter(fig);
  throw new Error(`unknown figure kind ${fig.kind}`);
}

export function tableOf(t) {
  const table = document.createElement('table');
  table.className = 'data';
  const thead = table.createTHead().insertRow();
  for (const c of t.columns) { const th = document.createElement('th'); th.scope = 'col'; th.textContent = c; thead.append(th); }
  const body = table.createTBody();
  for (const r of t.rows) {
    const tr = body.insertRow();
    for (const x of r) tr.insertCell().textContent = String(x);
  }
  return table;
}

export function figureElement(fig) {
  const f = document.createElement('figure');
  f.className = 'fig';
  f.id = `fig-${fig.id}`;
  f.dataset.figure = fig.id;
  f.dataset.kind = fig.kind;
  const cap = document.createElement('figcaption');
  cap.textContent = fig.title;
  f.append(cap);
  const flagged = Object.keys(fig.flags || {});
  if (flagged.length) {
    const p = document.createElement('p');
    p.className = 'flag';
    p.textContent = `✗ exactness check failed in: ${flagged.join(', ')}`;
    f.append(p);
  }
  const wrap = document.createElement('div');
  wrap.className = 'chart-wrap';
  wrap.append(svgOf(fig));
  f.append(wrap);
  const det = document.createElement('details');
  const sum = document.createElement('summary');
  sum.textContent = 'Table';
  det.append(sum, tableOf(fig.table));
  f.append(det);
  return f;
}
