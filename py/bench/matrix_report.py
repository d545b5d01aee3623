"""DIR/report.html of the bench matrix: self-contained (inline SVG and CSS, no script, no network), drawn from the
matrix document's `figures` (exactspec.benchmatrix computes them; app/bench_charts.js draws the same figures in the
page's benchmark panel with the same geometry).

Every mark carries its number: bars are <rect class="chart-bar" data-series data-category data-value>, line and scatter
points <circle class="chart-pt" data-series data-category|data-x data-value|data-y>, so a test can check each plot against
the JSON (values, and that heights / positions are linear in them)."""
from __future__ import annotations

import html
import math

W, H = 760, 320                 # one chart's size (px)
ML, MR, MB = 64, 16, 96         # margins: left (y axis), right, bottom (category labels)
COLORS = ("#3366cc", "#dc7a12", "#2a9d5c", "#b83280", "#7a5af8", "#8c6d1f", "#0e9aa7", "#d9534f", "#5b6770",
          "#9acd32", "#e377c2", "#17becf")


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def num(v) -> str:
    """A number as data attributes spell it (both renderers: up to 6 significant digits)."""
    return "" if v is None else f"{v:.6g}"


def nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * e:
            return m * e
    return 10 * e


def tick_text(t: float) -> str:
    """A tick label (both renderers: 3 significant digits, whole numbers from 1000 up)."""
    return f"{t:.0f}" if t >= 1000 else f"{t:.3g}"


def ticks(vmax: float, n: int = 5) -> list[float]:
    step = vmax / n
    return [i * step for i in range(n + 1)]


def legend_rows(names: list[str], width: int) -> list[list[tuple[str, int]]]:
    """Legend items laid out left to right, wrapped at width: [[(name, x), ...], ...] (both renderers)."""
    rows, row, x = [], [], ML
    for name in names:
        w = 18 + 7 * len(name) + 14
        if row and x + w > width - MR:
            rows.append(row)
            row, x = [], ML
        row.append((name, x))
        x += w
    if row:
        rows.append(row)
    return rows


def _legend(names: list[str], out: list[str]) -> int:
    rows = legend_rows(names, W)
    for r, row in enumerate(rows):
        y = 14 + 16 * r
        for name, x in row:
            i = names.index(name)
            out.append(f'<rect class="key" x="{x}" y="{y - 9}" width="12" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                       f'<text class="legend" x="{x + 16}" y="{y}">{esc(name)}</text>')
    return 22 + 16 * len(rows)


def _axis(out, top, vmax, unit, y_label, plot_h):
    for t in ticks(vmax):
        y = top + plot_h - plot_h * t / vmax
        out.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.2f}" y2="{y:.2f}"/>'
                   f'<text class="tick" x="{ML - 6}" y="{y + 4:.2f}" text-anchor="end">{tick_text(t)}</text>')
    out.append(f'<text class="axis" x="14" y="{top + plot_h / 2:.1f}" transform="rotate(-90 14 {top + plot_h / 2:.1f})"'
               f' text-anchor="middle">{esc(y_label)}</text>')


def _cat_labels(out, cats, xs, base_y, flags):
    for c, x in zip(cats, xs):
        flag = flags.get(c)
        label = ("✗ " if flag else "") + c
        out.append(f'<text class="cat{" flagged" if flag else ""}" data-category="{esc(c)}" x="{x:.2f}" y="{base_y + 14}"'
                   f' text-anchor="end" transform="rotate(-35 {x:.2f} {base_y + 14})">{esc(label)}'
                   + (f"<title>{esc(flag)}</title>" if flag else "") + "</text>")


def svg_bars(fig: dict) -> str:
    series, cats = fig["series"], fig["categories"]
    out: list[str] = []
    top = _legend([s["name"] for s in series], out) if len(series) > 1 else 16
    plot_h = H - top - MB
    vals = [v for s in series for v in (s["values"] + [x for x in s.get("hi") or [] if x is not None]) if v is not None]
    vmax = nice_max(max(vals + [fig.get("ref") or 0] + [1e-12]) * 1.05)
    _axis(out, top, vmax, fig.get("unit"), fig.get("y_label", ""), plot_h)
    base = top + plot_h
    group = (W - ML - MR) / max(1, len(cats))
    bw = group * 0.8 / max(1, len(series))
    xs = []
    for ci, c in enumerate(cats):
        x0 = ML + ci * group + group * 0.1
        xs.append(x0 + group * 0.4)
        for si, s in enumerate(series):
            v = s["values"][ci]
            if v is None:
                continue
            h = plot_h * v / vmax
            x = x0 + si * bw
            out.append(f'<rect class="chart-bar" data-series="{esc(s["name"])}" data-category="{esc(c)}" data-value="{num(v)}"'
                       f' x="{x:.2f}" y="{base - h:.3f}" width="{bw:.2f}" height="{h:.3f}"'
                       f' fill="{COLORS[si % len(COLORS)]}"><title>{esc(s["name"])}, {esc(c)}: {v:.4g}</title></rect>')
            lo, hi = (s.get("lo") or [None] * len(cats))[ci], (s.get("hi") or [None] * len(cats))[ci]
            if lo is not None and hi is not None and hi > lo:
                cx = x + bw / 2
                out.append(f'<line class="range" data-lo="{num(lo)}" data-hi="{num(hi)}" x1="{cx:.2f}" x2="{cx:.2f}"'
                           f' y1="{base - plot_h * lo / vmax:.3f}" y2="{base - plot_h * hi / vmax:.3f}"/>')
    if fig.get("ref") is not None:
        y = base - plot_h * fig["ref"] / vmax
        out.append(f'<line class="ref" data-value="{num(fig["ref"])}" x1="{ML}" x2="{W - MR}" y1="{y:.3f}" y2="{y:.3f}"/>')
    out.append(f'<line class="axisline" x1="{ML}" x2="{W - MR}" y1="{base}" y2="{base}"/>')
    _cat_labels(out, cats, xs, base, fig.get("flags") or {})
    return _svg(fig, out, H)


def svg_hbars(fig: dict) -> str:
    """Horizontal bars, one series (peak memory): width linear in the value."""
    s, cats = fig["series"][0], fig["categories"]
    row, lw = 22, 230
    h = 16 + row * len(cats) + 28
    vmax = nice_max(max([v for v in s["values"] if v is not None] + [1e-12]) * 1.05)
    pw = W - lw - MR - 60
    out = []
    for i, t in enumerate(ticks(vmax, 4)):
        x = lw + pw * t / vmax
        out.append(f'<line class="grid" x1="{x:.2f}" x2="{x:.2f}" y1="10" y2="{h - 24}"/>'
                   f'<text class="tick" x="{x:.2f}" y="{h - 8}" text-anchor="middle">{tick_text(t)}</text>')
    for i, (c, v) in enumerate(zip(cats, s["values"])):
        y = 12 + row * i
        out.append(f'<text class="cat" data-category="{esc(c)}" x="{lw - 8}" y="{y + 14}" text-anchor="end">{esc(c)}</text>')
        if v is None:
            continue
        w = pw * v / vmax
        out.append(f'<rect class="chart-bar" data-series="{esc(s["name"])}" data-category="{esc(c)}" data-value="{num(v)}"'
                   f' x="{lw}" y="{y}" width="{w:.3f}" height="{row - 6}" fill="{COLORS[0]}"><title>{esc(c)}: {v:.4g}'
                   f' {esc(fig.get("unit", ""))}</title></rect>'
                   f'<text class="val" x="{lw + w + 4:.2f}" y="{y + 13}">{v:.4g}</text>')
    return _svg(fig, out, h)


def svg_lines(fig: dict) -> str:
    series, cats = fig["series"], fig["categories"]
    out: list[str] = []
    top = _legend([s["name"] for s in series], out)
    mb = 40
    plot_h = H - top - mb
    vals = [v for s in series for v in s["values"] if v is not None]
    vmax = fig.get("y_max") or nice_max(max(vals + [1e-12]) * 1.05)
    _axis(out, top, vmax, fig.get("unit"), fig.get("y_label", ""), plot_h)
    base = top + plot_h
    step = (W - ML - MR) / max(1, len(cats))
    xs = [ML + step * (i + 0.5) for i in range(len(cats))]
    flags = fig.get("flags") or {}
    for si, s in enumerate(series):
        col = COLORS[si % len(COLORS)]
        pts = [(x, base - plot_h * v / vmax, c, v) for x, c, v in zip(xs, cats, s["values"]) if v is not None]
        dash = ' stroke-dasharray="4 3"' if s["name"] in flags else ""
        out.append(f'<polyline class="line" data-series="{esc(s["name"])}" fill="none" stroke="{col}"{dash}'
                   f' points="{" ".join(f"{x:.2f},{y:.3f}" for x, y, _, _ in pts)}"/>')
        for x, y, c, v in pts:
            out.append(f'<circle class="chart-pt" data-series="{esc(s["name"])}" data-category="{esc(c)}" data-value="{num(v)}"'
                       f' cx="{x:.2f}" cy="{y:.3f}" r="3" fill="{col}"><title>{esc(s["name"])}, {esc(fig.get("x_label", ""))}'
                       f' {esc(c)}: {v:.3f}</title></circle>')
    out.append(f'<line class="axisline" x1="{ML}" x2="{W - MR}" y1="{base}" y2="{base}"/>')
    for c, x in zip(cats, xs):
        out.append(f'<text class="tick" x="{x:.2f}" y="{base + 16}" text-anchor="middle">{esc(c)}</text>')
    out.append(f'<text class="axis" x="{(ML + W - MR) / 2:.1f}" y="{base + 32}" text-anchor="middle">'
               f'{esc(fig.get("x_label", ""))}</text>')
    return _svg(fig, out, H)


def svg_scatter(fig: dict) -> str:
    series = fig["series"]
    out: list[str] = []
    top = _legend([s["name"] for s in series], out)
    mb = 40
    plot_h = H - top - mb
    xsv = [p[0] for s in series for p in s["points"]]
    ysv = [p[1] for s in series for p in s["points"]]
    xmax = nice_max(max(xsv + [1]) * 1.05)
    ymax = nice_max(max(ysv + [1e-12]) * 1.05)
    _axis(out, top, ymax, fig.get("unit"), fig.get("y_label", ""), plot_h)
    base = top + plot_h
    pw = W - ML - MR
    for t in ticks(xmax, 4):
        x = ML + pw * t / xmax
        out.append(f'<text class="tick" x="{x:.2f}" y="{base + 16}" text-anchor="middle">{tick_text(t)}</text>')
    for si, s in enumerate(series):
        col = COLORS[si % len(COLORS)]
        for x, y in s["points"]:
            out.append(f'<circle class="chart-pt" data-series="{esc(s["name"])}" data-x="{num(x)}" data-y="{num(y)}"'
                       f' cx="{ML + pw * x / xmax:.3f}" cy="{base - plot_h * y / ymax:.3f}" r="3" fill="{col}"'
                       f' fill-opacity="0.7"><title>{esc(s["name"])}: {x} tokens, {y:.1f} tok/s</title></circle>')
    out.append(f'<line class="axisline" x1="{ML}" x2="{W - MR}" y1="{base}" y2="{base}"/>')
    out.append(f'<text class="axis" x="{(ML + W - MR) / 2:.1f}" y="{base + 32}" text-anchor="middle">'
               f'{esc(fig.get("x_label", ""))}</text>')
    return _svg(fig, out, H)


def _svg(fig, body, h) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-figure="{esc(fig["id"])}" viewBox="0 0 {W} {h}"'
            f' width="{W}" height="{h}" role="img" aria-label="{esc(fig["title"])}">' + "".join(body) + "</svg>")


def svg(fig: dict) -> str:
    if fig["kind"] == "bars":
        return svg_hbars(fig) if fig.get("horizontal") else svg_bars(fig)
    if fig["kind"] == "lines":
        return svg_lines(fig)
    if fig["kind"] == "scatter":
        return svg_scatter(fig)
    raise ValueError(f"unknown figure kind {fig['kind']!r}")


def table_html(t: dict, cls: str = "data") -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in t["columns"])
    body = "".join("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in row) + "</tr>" for row in t["rows"])
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure_html(fig: dict) -> str:
    flags = fig.get("flags") or {}
    warn = (f'<p class="flag">✗ exactness check failed in: {esc(", ".join(flags))}</p>' if flags else "")
    return (f'<figure class="fig" id="fig-{esc(fig["id"])}" data-figure="{esc(fig["id"])}" data-kind="{esc(fig["kind"])}">'
            f'<figcaption>{esc(fig["title"])}</figcaption>{warn}{svg(fig)}'
            f'<details open><summary>Table</summary>{table_html(fig["table"])}</details></figure>')


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12.5px}td,th{border:1px solid #d5d9e2;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f2f4f8}table.kv td:first-child{font-weight:600;white-space:nowrap}
code{font-size:12px;background:#f2f4f8;padding:1px 4px;border-radius:3px;word-break:break-all}
figure{margin:18px 0 26px}figcaption{font-weight:600;margin-bottom:4px}.flag,.bad{color:#b00020;font-weight:600}
.ok{color:#17733a;font-weight:600}svg.chart{max-width:100%;height:auto;background:#fff}
svg .grid{stroke:#e4e7ee}svg .axisline{stroke:#555}svg .ref{stroke:#b00020;stroke-dasharray:5 4}
svg .range{stroke:#222;stroke-width:1.5}svg text{font-size:11px;fill:#333}svg .cat.flagged{fill:#b00020;font-weight:700}
svg .line{stroke-width:2}summary{cursor:pointer;color:#445}
"""


def _kv(rows) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{esc(k)}</td><td>{v}</td></tr>" for k, v in rows) + "</table>"


def render(doc: dict) -> str:
    m, sp, s = doc["meta"], doc["spec"], doc["summary"]
    figs = doc["figures"]
    art = m.get("artifacts") or {}
    ad = m.get("adapter") or {}
    ver = m.get("versions") or {}
    mach = m.get("machine") or {}
    title = f"ExactSpec bench matrix — subset {sp['subset']}, {m['host']} / {m['backend']}"
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{CSS}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    ok = s["all_identical"] and not doc.get("errors")
    parts.append(f"<p class='{'ok' if s['all_identical'] else 'bad'}'>"
                 + ("Every speculative answer was identical to the champion alone's."
                    if s["all_identical"] else "EXACTNESS CHECK FAILED in: "
                    + esc(", ".join(k for k, v in s["exactness"].items() if v["failed"])))
                 + (f" {len(doc.get('errors') or [])} request(s) failed (see the end)." if doc.get("errors") else "")
                 + "</p>")
    if m.get("stopped"):
        parts.append(f"<p class='bad'>Stopped early: {esc(m['stopped'])}</p>")
    dep = sp.get("departures") or []
    parts.append("<h2>What was run</h2>")
    parts.append(_kv([
        ("spec", f"<code>{esc(sp.get('path'))}</code> {esc(sp.get('name'))} v{esc(sp.get('version'))}, "
                 f"subset <b>{esc(sp['subset'])}</b>"),
        ("spec sha256", f"<code>{esc(sp.get('sha256'))}</code>"),
        ("definition", "<code>" + esc(", ".join(f"{k}={v}" for k, v in (sp.get("definition") or {}).items()
                                               if k != "about")) + "</code>"),
        ("departures from the spec", esc("; ".join(dep)) if dep else "none"),
        ("command", f"<code>{esc(m.get('command'))}</code>"),
        ("started (UTC)", esc(m.get("started"))),
        ("wall time", f"{m.get('wall_s', 0) / 60:.1f} min (boot {m.get('boot', {}).get('wall_s', 0):.1f} s)"),
        ("answers", f"{len(doc.get('records') or [])} measured, {len(doc.get('ttft') or [])} cold-TTFT, "
                    f"{len(doc.get('warmups') or [])} warm-ups; prompts {esc(', '.join(m.get('prompts') or []))}"),
    ]))
    parts.append("<h2>Machine</h2>")
    la = m.get("load_average") or {}
    parts.append(_kv([
        ("host / backend", f"{esc(m['host'])} / {esc(m['backend'])} (active: {esc(m.get('backend_active'))})"),
        ("adapter", esc(", ".join(f"{k} {v}" for k, v in ad.items() if v not in (None, "")) or "none (no GPU)")),
        ("CPU", esc(f"{mach.get('cpu')} ({mach.get('cpus')} logical cores)")),
        ("load average", esc(f"start {la.get('start')}, end {la.get('end')}") if la else "–"),
        ("platform", esc(mach.get("platform"))),
        ("versions", esc(", ".join(f"{k} {v}" for k, v in {**ver, "python": mach.get("python")}.items() if v))),
        ("git commit", f"<code>{esc(m.get('git_commit'))}</code>"),
    ]))
    parts.append("<h2>Artifacts (sha256)</h2>")
    parts.append(_kv([(k, f"<code>{esc(v.get('sha256'))}</code> {esc(v.get('file') or '')}"
                          + (f" ({v['size']:,} bytes)" if v.get("size") else ""))
                      for k, v in art.items() if v]))
    parts.append("<h2>Exactness per stratum</h2>")
    parts.append(table_html({"columns": ["stratum", "speculative answers", "identical", "check"],
                             "rows": [[k, v["answers"], v["identical"],
                                       "✓" if not v["failed"] else "✗ " + "; ".join(v["failed"])]
                                      for k, v in s["exactness"].items()]}))
    parts.append("<h2>Figures</h2><p>Every figure is drawn from <code>matrix.json</code>'s <code>figures</code> "
                 "(exactspec.benchmatrix); each mark carries its value as a data attribute; the table under each "
                 "figure holds the same numbers. Strata marked ✗ failed an exactness check.</p>")
    parts += [figure_html(f) for f in figs]
    prod = doc.get("product") or {}
    if prod.get("summary"):
        parts.append("<h2>Measured vs predicted speedup (the break-even formula)</h2><p>From the same answers and "
                     "the pass times measured beside them (py/bench/product.py's summary): predicted = tau (T_single "
                     "+ O) / (g T_draft + T_verify(g) + O).</p>")
        parts.append(table_html({"columns": ["stratum", "mode", "drafter", "k", "speedup", "predicted", "tau",
                                             "submissions/round", "readback B/token", "identical"],
                                 "rows": [[r["stratum"], r["mode"], r["drafter"], r["k"], _sp(r["speedup"]),
                                           _sp(r["predicted"]), _sp(r["tau"]),
                                           f"{r['submissions_per_round'] or 0:.2f}",
                                           f"{r['readback_bytes_per_token'] or 0:.0f}",
                                           "yes" if r["identical"] else "NO"] for r in prod["summary"]]}))
    if doc.get("timings"):
        rows = []
        for t in doc["timings"]:
            if not t.get("single_ms"):
                continue
            ve = t.get("verify_ms") or {}
            rows.append([t["stratum"], t["run"] + 1, t["mode"], f"{t['single_ms']['median']:.2f}",
                         ", ".join(f"{k}: {v['median']:.2f}" for k, v in sorted(ve.items(), key=lambda x: int(x[0]))),
                         ", ".join(f"{d}: {v['median']:.3f}" for d, v in (t.get("draft_ms") or {}).items())])
        if rows:
            parts.append("<h2>Pass times (ms)</h2>")
            parts.append(table_html({"columns": ["stratum", "run", "mode", "T_single", "T_verify(k)",
                                                 "T_draft per proposal"], "rows": rows}))
    if doc.get("errors"):
        parts.append("<h2>Failed requests</h2>")
        parts.append(table_html({"columns": ["what", "where", "error"],
                                 "rows": [[e.get("what"), f"{e.get('stratum')} {e.get('prompt_id', '')}",
                                           e.get("error")] for e in doc["errors"]]}))
    parts.append("<h2>Procedure (preregistered)</h2><ol>"
                 + "".join(f"<li>{esc(p)}</li>" for p in sp.get("procedure") or []) + "</ol>")
    parts.append(f"<p class='{'ok' if ok else 'bad'}'>End of report.</p></body></html>")
    return "\n".join(parts)


def _sp(s) -> str:
    if not s:
        return "–"
    if s["n"] == 1 or s["min"] == s["max"]:
        return f"{s['median']:.2f}"
    return f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"
