#!/usr/bin/env python3
"""Renders dashboard.json to a PNG from a Prometheus that scraped a skewgate run.

Each panel's PromQL is asked of Prometheus over the run (`query_range`), with Grafana's variables
replaced ($__rate_interval by 20s, $instance and $job by .*), and drawn where the dashboard puts
it. Grafana is not needed: this shows what the panels show, not Grafana's look.

    render.py PROMETHEUS_URL START END OUT.png
"""

import json
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def query_range(prom, expr, start, end, step=2):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}") as r:
        return json.load(r)["data"]["result"]


def query(prom, expr, at):
    q = urllib.parse.urlencode({"query": expr, "time": at})
    with urllib.request.urlopen(f"{prom}/api/v1/query?{q}") as r:
        return json.load(r)["data"]["result"]


def legend(fmt, labels):
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out.strip() or ",".join(f"{k}={v}" for k, v in labels.items())


def expand(expr):
    return (
        expr.replace("$__rate_interval", "20s")
        .replace('"$instance"', '".*"')
        .replace('"$job"', '".*"')
    )


def main():
    prom, start, end, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    dash = json.loads((Path(__file__).parent / "dashboard.json").read_text())
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"])
    fig = plt.figure(figsize=(24, rows * 0.42), facecolor="#111217")
    scale_x, scale_y = 1 / 24, 1 / rows
    for p in dash["panels"]:
        g = p["gridPos"]
        left, bottom = g["x"] * scale_x, 1 - (g["y"] + g["h"]) * scale_y
        if p["type"] == "row":
            fig.text(left + 0.005, 1 - (g["y"] + 0.8) * scale_y, p["title"], color="#ccccdc",
                     fontsize=14, weight="bold")
            continue
        ax = fig.add_axes([left + 0.03 * scale_x * 10, bottom + 0.9 * scale_y,
                           g["w"] * scale_x - 0.04 * scale_x * 10, g["h"] * scale_y - 2.2 * scale_y])
        ax.set_facecolor("#181b1f")
        ax.set_title(p["title"], color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for s in ax.spines.values():
            s.set_color("#2c3235")
        if p["type"] == "table":
            ax.axis("off")
            lines = []
            for t in p["targets"]:
                for r in query(prom, expand(t["expr"]), end):
                    m = r["metric"]
                    lines.append(f'{m.get("pin", ""):<18} -> {m.get("backend", "")}')
            ax.text(0.02, 0.95, "pin                   backend\n" + "\n".join(sorted(lines)),
                    color="#ccccdc", family="monospace", fontsize=9, va="top",
                    transform=ax.transAxes)
            continue
        for t in p["targets"]:
            for r in query_range(prom, expand(t["expr"]), start, end):
                xs = [float(v[0]) - start for v in r["values"]]
                ys = [float(v[1]) for v in r["values"]]
                ax.plot(xs, ys, linewidth=1.2, label=legend(t.get("legendFormat", ""), r["metric"]))
        ax.set_xlabel("seconds into the run", color="#8e8e8e", fontsize=7)
        if ax.lines:
            ax.legend(fontsize=6, facecolor="#181b1f", labelcolor="#ccccdc", loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", color="#8e8e8e", ha="center", transform=ax.transAxes)
    fig.savefig(out, dpi=60, facecolor=fig.get_facecolor())


if __name__ == "__main__":
    main()
