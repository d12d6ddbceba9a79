#!/usr/bin/env python3
"""Draws the charts of BENCHMARKS.md's front page as plain SVG.

    python3 docs/benchmarks/charts.py

Reads docs/benchmarks/data/*.csv (figures taken verbatim from BENCHMARKS.md,
docs/benchmarks/*.md and the Go reference's go-reference.md, each row naming
its source) and, for the soak chart, the per-minute CSVs of docs/soak/ that
data/soak-hour.csv lists. Writes docs/benchmarks/submitters.svg,
tree-size.svg and soak-hour.svg. Python 3 standard library only.
"""

import csv
import math
import os
import sys
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DATA = os.path.join(HERE, "data")

# One colour per engine, the Go reference in greys; a dash per run or path.
COLOURS = {
    "memory": "#6b6b6b",
    "sqlite": "#1f6fb4",
    "postgres": "#d0621b",
    "go-memory": "#111111",
    "go-sqlite": "#111111",
    "go-postgres": "#7a7a7a",
}
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""


def read_rows(name):
    with open(os.path.join(DATA, name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def number(text):
    return float(text) if text not in (None, "") else None


def grouped(rows, key="series"):
    """Rows by series, in the order each series first appears."""
    out = {}
    for row in rows:
        out.setdefault(row[key], []).append(row)
    return out


def si(value):
    """1, 10, 100, 1k, 10k, 1M, ... for log-axis labels."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            v = value / limit
            return f"{v:g}{suffix}"
    return f"{value:g}"


def power_of_ten(value):
    """10^n as text with a superscript exponent (for tree sizes)."""
    n = round(math.log10(value))
    sup = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
    return "10" + str(n).translate(sup)


class Axis:
    def __init__(self, lo, hi, log, pixels_lo, pixels_hi):
        self.lo, self.hi, self.log = lo, hi, log
        self.p0, self.p1 = pixels_lo, pixels_hi

    def __call__(self, v):
        if self.log:
            a, b, v = math.log10(self.lo), math.log10(self.hi), math.log10(v)
        else:
            a, b = self.lo, self.hi
        return self.p0 + (v - a) / (b - a) * (self.p1 - self.p0)

    def ticks(self):
        """(value, major) pairs: decades and their 2-9 multiples on a log axis."""
        if self.log:
            out = []
            e = math.floor(math.log10(self.lo))
            while 10**e <= self.hi * 1.0001:
                for m in range(1, 10):
                    v = m * 10**e
                    if self.lo * 0.9999 <= v <= self.hi * 1.0001:
                        out.append((v, m == 1))
                e += 1
            return out
        span = self.hi - self.lo
        raw = span / 6
        mag = 10 ** math.floor(math.log10(raw))
        step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=mag)
        v = math.ceil(self.lo / step) * step
        out = []
        while v <= self.hi + 1e-9:
            out.append((v, True))
            v += step
        return out


class Chart:
    def __init__(self, title, subtitle, xlabel, ylabel, x, y, width=960, height=560, legend_width=330):
        self.width, self.height = width, height
        self.left, self.right = 78, width - legend_width
        self.top, self.bottom = 70, height - 96
        self.title, self.subtitle = title, subtitle
        self.xlabel, self.ylabel = xlabel, ylabel
        xlo, xhi, xlog = x
        ylo, yhi, ylog = y
        self.x = Axis(xlo, xhi, xlog, self.left, self.right)
        self.y = Axis(ylo, yhi, ylog, self.bottom, self.top)
        self.parts = []
        self.legend = []
        self.notes = []

    def text(self, x, y, s, size=12, anchor="start", weight="normal", colour="#222", rotate=None):
        transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{colour}" {FONT}{transform}>{escape(s)}</text>'
        )

    def axes(self, xfmt, yfmt):
        p = self.parts
        p.append(f'<rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
                 f'height="{self.bottom - self.top}" fill="#fcfcfc" stroke="#999"/>')
        for v, major in self.x.ticks():
            px = self.x(v)
            if major:
                p.append(f'<line x1="{px:.1f}" y1="{self.top}" x2="{px:.1f}" y2="{self.bottom}" stroke="#e2e2e2"/>')
                p.append(f'<line x1="{px:.1f}" y1="{self.bottom}" x2="{px:.1f}" y2="{self.bottom + 6}" stroke="#555"/>')
                self.text(px, self.bottom + 20, xfmt(v), anchor="middle")
            else:
                p.append(f'<line x1="{px:.1f}" y1="{self.bottom}" x2="{px:.1f}" y2="{self.bottom + 3}" stroke="#888"/>')
        for v, major in self.y.ticks():
            py = self.y(v)
            if major:
                p.append(f'<line x1="{self.left}" y1="{py:.1f}" x2="{self.right}" y2="{py:.1f}" stroke="#e2e2e2"/>')
                p.append(f'<line x1="{self.left - 6}" y1="{py:.1f}" x2="{self.left}" y2="{py:.1f}" stroke="#555"/>')
                self.text(self.left - 9, py + 4, yfmt(v), anchor="end")
            else:
                p.append(f'<line x1="{self.left - 3}" y1="{py:.1f}" x2="{self.left}" y2="{py:.1f}" stroke="#888"/>')
        mid_x = (self.left + self.right) / 2
        self.text(mid_x, self.bottom + 42, self.xlabel, size=13, anchor="middle")
        mid_y = (self.top + self.bottom) / 2
        self.text(20, mid_y, self.ylabel, size=13, anchor="middle", rotate=-90)
        self.text(self.left, 28, self.title, size=17, weight="bold")
        self.text(self.left, 50, self.subtitle, size=12, colour="#555")

    def series(self, label, points, colour, dash=None, marker="circle", width=2.0, line=True):
        """points: (x, y, y_high or None); a y_high draws a range bar."""
        pts = [(self.x(a), self.y(b), None if c is None else self.y(c)) for a, b, c in points]
        d = f' stroke-dasharray="{dash}"' if dash else ""
        if line and len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in pts)
            self.parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                              f'stroke-width="{width}"{d} stroke-linejoin="round"/>')
        for px, py, ph in pts:
            if ph is not None:
                self.parts.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{px:.1f}" y2="{ph:.1f}" stroke="{colour}" stroke-width="2"/>')
                for yy in (py, ph):
                    self.parts.append(f'<line x1="{px - 5:.1f}" y1="{yy:.1f}" x2="{px + 5:.1f}" y2="{yy:.1f}" stroke="{colour}" stroke-width="2"/>')
            if marker:
                self.parts.append(self.mark(marker, px, py, colour))
        self.legend.append((supers(label), colour, dash, marker, line))

    @staticmethod
    def mark(kind, x, y, colour, r=4):
        if kind == "square":
            return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" fill="{colour}"/>'
        if kind == "diamond":
            return (f'<polygon points="{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y:.1f} '
                    f'{x:.1f},{y + r + 1:.1f} {x - r - 1:.1f},{y:.1f}" fill="{colour}"/>')
        if kind == "triangle":
            return (f'<polygon points="{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y + r:.1f} '
                    f'{x - r - 1:.1f},{y + r:.1f}" fill="{colour}"/>')
        if kind == "open":
            return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="#fff" stroke="{colour}" stroke-width="2"/>'
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}"/>'

    def note(self, s):
        self.notes.append(s)

    def render(self):
        per_line = int((self.width - self.left - 12) / 5.9)
        notes = wrap(" ".join(self.notes), per_line)
        height = max(self.height, self.bottom + 62 + 14 * len(notes))
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{height}" '
               f'viewBox="0 0 {self.width} {height}">',
               f'<rect width="{self.width}" height="{height}" fill="#ffffff"/>']
        out += self.parts
        # Legend, right of the plot; long labels wrap at the box's width.
        lx, ly = self.right + 18, self.top + 4
        for label, colour, dash, marker, line in self.legend:
            d = f' stroke-dasharray="{dash}"' if dash else ""
            if line:
                out.append(f'<line x1="{lx}" y1="{ly:.1f}" x2="{lx + 30}" y2="{ly:.1f}" stroke="{colour}" stroke-width="2"{d}/>')
            if marker:
                out.append(self.mark(marker, lx + 15, ly, colour))
            chunks = wrap(label, 40)
            for i, chunk in enumerate(chunks):
                out.append(f'<text x="{lx + 38}" y="{ly + 4 + i * 14:.1f}" font-size="11.5" fill="#222" {FONT}>{escape(chunk)}</text>')
            ly += 14 * (len(chunks) - 1) + 22
        ny = self.bottom + 62
        for line in notes:
            out.append(f'<text x="{self.left}" y="{ny}" font-size="10.5" fill="#555" {FONT}>{escape(line)}</text>')
            ny += 14
        out.append("</svg>")
        return "\n".join(out) + "\n"


def supers(text):
    """10^8 as 10⁸ in labels."""
    sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
    out, i = [], 0
    while i < len(text):
        if text.startswith("10^", i):
            j = i + 3
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append("10" + text[i + 3:j].translate(sup))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def wrap(text, width):
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def submitters_chart():
    rows = read_rows("submitters.csv")
    chart = Chart(
        "Durable leaves/s against one-leaf submitters",
        "Each submitter writes one new random leaf at a time in a loop; durable commits (SQLite synchronous=FULL, Postgres fsync on)",
        "concurrent submitters (log)",
        "acknowledged leaves per second (log)",
        x=(1, 10000, True),
        y=(0.1, 100000, True),
    )
    chart.axes(si, si)
    styles = {
        ("sqlite", "writer"): (None, "circle"),
        ("postgres", "writer"): (None, "square"),
        ("sqlite", "direct"): ("6 4", "open"),
        ("postgres", "direct"): ("6 4", "open"),
        ("go-sqlite", "direct"): ("2 3", "triangle"),
        ("go-postgres", "direct"): ("2 3", "triangle"),
        ("go-sqlite", "coalesced"): (None, "diamond"),
        ("go-postgres", "coalesced"): (None, "diamond"),
    }
    for label, rs in grouped(rows).items():
        engine, path = rs[0]["engine"], rs[0]["path"]
        dash, marker = styles[(engine, path)]
        pts = [(float(r["submitters"]), float(r["leaves_per_s"]), number(r["leaves_per_s_high"])) for r in rs]
        sizes = sorted({r["tree_leaves"] for r in rs})
        tree = ", ".join(power_of_ten(float(s)) for s in sizes)
        chart.series(f"{label} (tree of {tree})", pts, COLOURS[engine], dash, marker, line=len(pts) > 1)
    chart.note("ms-smt: crates/sql/examples/load.rs, 2026-11-26, commit ea325ac, tree of 10⁶ leaves, 5 s per cell (docs/benchmarks/load.md).")
    chart.note("Go reference: taproot-assets mssmt + tapdb at 95bd8d41, 2026-11-25, 10 s per cell, SQLite at 10⁵ and Postgres at 10⁴ leaves (go-reference.md);")
    chart.note("its 100 × 1 cells failed 65 of 101 (SQLite) and 59 of 103 (Postgres) calls. The range bar is the reference's 0.2-0.4. Same kind of machine: 2 vCPUs, SHA-NI.")
    return chart.render()


def tree_size_chart():
    rows = read_rows("tree-size.csv")
    chart = Chart(
        "insert_many of 1,000 new random keys, against the tree's size",
        "One call: read the keys' paths, one descent, one durable commit (ms-smt: a warm handle); time per call",
        "leaves in the tree (log)",
        "milliseconds per insert_many of 1,000 (log)",
        x=(5000, 200000000, True),
        y=(10, 1000000, True),
        height=600,
        legend_width=350,
    )
    chart.axes(lambda v: power_of_ten(v) if math.isclose(math.log10(v), round(math.log10(v))) else si(v), si)
    dashes = {
        "bef2a02": (None, "circle"),
        "d0c68b5": ("6 4", "square"),
        "8022599": ("2 3", "diamond"),
        "e3bb04d": ("10 3 2 3", "triangle"),
        "95bd8d41": (None, "diamond"),
    }
    for label, rs in grouped(rows).items():
        engine, commit = rs[0]["engine"], rs[0]["commit"]
        dash, marker = dashes[commit]
        if engine.startswith("go-"):
            marker = "square" if engine == "go-memory" else ("diamond" if engine == "go-sqlite" else "triangle")
        if label == "ms-smt SQLite alone at 10^8":
            marker = "open"
        pts = [(float(r["tree_leaves"]), float(r["ms"]), number(r["ms_high"])) for r in rs]
        chart.series(f"{label} ({rs[0]['date']}, {commit})", pts, COLOURS[engine], dash, marker, line=len(pts) > 1)
    chart.note("ms-smt: crates/sql/examples/scale.rs and scale_big.rs (docs/benchmarks/sql.md, scale.md). e3bb04d: trees built in key order, both engines at once on one")
    chart.note("machine; at 10⁸ their two databases (39.4 GB) exceed its 24 GiB, SQLite alone stays mostly cached. d0c68b5: SQLite's 10⁵ and 10⁶ ran beside a test run (upper bounds).")
    chart.note("Go reference: go-reference.md, 1,000 keys into a 10⁴-leaf tree (taproot-assets 95bd8d41); tapdb SQLite 3.8-4.7 s over 3 runs (the bar), Postgres 1 run.")
    return chart.render()


def soak_chart():
    manifest = read_rows("soak-hour.csv")
    lines = []
    top = 0.0
    for m in manifest:
        with open(os.path.join(ROOT, m["csv"]), newline="", encoding="utf-8") as f:
            minutes = list(csv.DictReader(f))
        pts = [(float(r[m["minute_column"]]), float(r[m["rate_column"]])) for r in minutes if r[m["rate_column"]]]
        top = max(top, max(v for _, v in pts))
        lines.append((m, pts))
    chart = Chart(
        "An hour of churn: acknowledged leaves/s, minute by minute",
        "100 one-leaf submitters through one store writer (new : replace : delete = 50 : 30 : 20), readers, a pager, a delta-sync follower, pins",
        "minute of the hour",
        "acknowledged leaf writes per second",
        x=(0, 60, False),
        y=(0, math.ceil(top * 1.08 / 250) * 250, False),
    )
    chart.axes(lambda v: f"{v:g}", lambda v: f"{v:,.0f}")
    styles = [(None, None), (None, None), ("6 4", None)]
    for (m, pts), (dash, marker) in zip(lines, styles):
        chart.series(f"{m['series']} ({m['date']}, {m['commit']})", [(a, b, None) for a, b in pts],
                     COLOURS[m["engine"]], dash, marker, width=1.8)
    # The windows the targets compare: minutes 6-15 and 51-60.
    for a, b in ((5.5, 15.5), (50.5, 60)):
        x0, x1 = chart.x(a), chart.x(b)
        chart.parts.insert(1, f'<rect x="{x0:.1f}" y="{chart.top}" width="{x1 - x0:.1f}" '
                              f'height="{chart.bottom - chart.top}" fill="#f1f1e6"/>')
    chart.note("crates/sql/examples/soak.rs via scripts/soak.sh, one engine at a time, a big tree of 10⁶ leaves and 1,000 small trees under a parent (docs/benchmarks/soak.md).")
    chart.note("The host's allocator set in all three (MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=1048576 MALLOC_TRIM_THRESHOLD_=8388608).")
    chart.note("Shaded: minutes 6-15 and 51-60, the windows of the rate target. Raw per-minute CSVs: docs/soak/solo-hours/, docs/soak/memory-probe-hour/.")
    chart.note("No Go reference figure exists for this workload.")
    return chart.render()


def main():
    outputs = {
        "submitters.svg": submitters_chart(),
        "tree-size.svg": tree_size_chart(),
        "soak-hour.svg": soak_chart(),
    }
    for name, svg in outputs.items():
        path = os.path.join(HERE, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
        print(f"wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
