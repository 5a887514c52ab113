"""A run's report: Markdown with a latency plot (SVG) whose fault windows
are shaded, and the availability of the cluster during each fault."""

import html
import math
import re

COLORS = {"ok": "#2a7d2a", "fail": "#d98c00", "info": "#c0262d"}
KIND_FILL = {"kill": "#f3d6d6", "pause": "#d6e2f3", "crash-dc": "#ead6f3"}


def operations(events):
    """Pairs a history's events into (invoke_ns, complete_ns or None, f,
    type, value, dc, error) tuples."""
    open_ops = {}
    ops = []
    for e in events:
        if e["type"] == "invoke":
            open_ops[e["process"]] = e
            continue
        inv = open_ops.pop(e["process"], None)
        if inv is not None:
            ops.append((inv["time"], e["time"], inv["f"], e["type"], inv.get("value"),
                        inv.get("dc", ""), e.get("error", "")))
    for inv in open_ops.values():
        ops.append((inv["time"], None, inv["f"], "info", inv.get("value"), inv.get("dc", ""),
                    "never answered"))
    ops.sort(key=lambda o: o[0])
    return ops


def _conflict(o):
    """An operation refused for contention (409), not for a fault."""
    return o[3] == "fail" and o[6].startswith("409")


def availability(ops, windows, is_commit):
    """Per fault window: operations invoked in it (conflicts, which are the
    workload's contention and not the fault's doing, left out), the share
    that were ok, and seconds from the fault's start to the first ok commit
    invoked after it (None if there was none). The last entry, kind
    "none", is the same for the operations invoked outside every fault."""
    out = []
    for w in windows:
        start, end = w["start"], w.get("end", w["start"])
        inside = [o for o in ops if start <= o[0] <= end and not _conflict(o)]
        ok = sum(1 for o in inside if o[3] == "ok")
        first = None
        for o in ops:
            if o[0] >= start and o[3] == "ok" and is_commit(o[2], o[4]):
                first = (o[1] - start) / 1e9
                break
        out.append({"kind": w["kind"], "target": w["target"], "start_s": start / 1e9,
                    "seconds": (end - start) / 1e9, "ops": len(inside), "ok": ok,
                    "ok_share": ok / len(inside) if inside else None,
                    "first_commit_s": first})
    outside = [o for o in ops if not _conflict(o) and not any(
        w["start"] <= o[0] <= w.get("end", w["start"]) for w in windows)]
    ok = sum(1 for o in outside if o[3] == "ok")
    out.append({"kind": "none", "target": "", "start_s": 0.0, "seconds": 0.0,
                "ops": len(outside), "ok": ok,
                "ok_share": ok / len(outside) if outside else None, "first_commit_s": None})
    return out


def latency_svg(ops, windows, run_ns, width=960, height=320):
    """Latency of every completed operation over time, log scale, coloured
    by outcome; fault windows shaded and labelled."""
    left, right, top, bottom = 60, 20, 20, 40
    pw, ph = width - left - right, height - top - bottom
    span = max(run_ns, 1)
    lo, hi = math.log10(0.5), math.log10(30000.0)  # ms

    def x(ns):
        return left + pw * min(max(ns / span, 0.0), 1.0)

    def y(ms):
        v = (math.log10(max(ms, 0.5)) - lo) / (hi - lo)
        return top + ph * (1 - min(max(v, 0.0), 1.0))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    for w in windows:
        x0, x1 = x(w["start"]), x(w.get("end", w["start"]))
        fill = KIND_FILL.get(w["kind"], "#eeeeee")
        label = html.escape(f"{w['kind']} {w['target']}")
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 1):.1f}" '
                     f'height="{ph}" fill="{fill}"><title>{label}</title></rect>')
        parts.append(f'<text x="{x0 + 2:.1f}" y="{top + 10}" fill="#555">{label}</text>')
    for ms in (1, 10, 100, 1000, 10000):
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(ms):.1f}" y2="{y(ms):.1f}" '
                     f'stroke="#ddd"/><text x="{left - 6}" y="{y(ms) + 4:.1f}" '
                     f'text-anchor="end">{ms if ms < 1000 else str(ms // 1000) + " s"}'
                     f'{" ms" if ms < 1000 else ""}</text>')
    seconds = span / 1e9
    step = max(1, int(seconds / 10))
    for s in range(0, int(seconds) + 1, step):
        xs = x(s * 1e9)
        parts.append(f'<text x="{xs:.1f}" y="{top + ph + 15}" text-anchor="middle">{s}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 5}" text-anchor="middle">'
                 f'seconds into the run</text>')
    parts.append(f'<text x="12" y="{top + ph / 2}" transform="rotate(-90 12 {top + ph / 2})" '
                 f'text-anchor="middle">latency</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
                 f'stroke="#888"/>')
    done = [o for o in ops if o[1] is not None]
    stride = max(1, len(done) // 20000)  # at most ~20,000 points
    for o in done[::stride]:
        ms = (o[1] - o[0]) / 1e6
        parts.append(f'<circle cx="{x(o[1]):.1f}" cy="{y(ms):.1f}" r="1.3" '
                     f'fill="{COLORS.get(o[3], "#000")}"/>')
    lx = left + pw - 150
    for i, (k, c) in enumerate(COLORS.items()):
        parts.append(f'<circle cx="{lx + i * 50}" cy="{top + ph - 8}" r="3" fill="{c}"/>'
                     f'<text x="{lx + i * 50 + 6}" y="{top + ph - 4}">{k}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _pct(v):
    return "—" if v is None else f"{100 * v:.1f}%"


def _secs(v):
    return "none" if v is None else f"{v:.2f} s"


def markdown(run, ops, avail, check, replay):
    """The run's report as Markdown (`run`: its parameters and outcome)."""
    counts = {}
    for o in ops:
        counts[(o[2], o[3])] = counts.get((o[2], o[3]), 0) + 1
    errors = {}
    for o in ops:
        if o[3] != "ok" and o[6]:
            key = re.sub(r"\d+", "N", o[6])[:100]  # one line per kind of error
            errors[key] = errors.get(key, 0) + 1
    lines = [f"# Campaign run {run['seed']}: {run['verdict']}", "",
             f"* workload **{run['workload']}**, topology **{run['topology']}**"
             f"{' with TLS' if run.get('tls') else ''}, "
             f"{run['clients']} clients, {run['seconds']} s",
             f"* operations: {len(ops)} ({', '.join(f'{f} {t}: {n}' for (f, t), n in sorted(counts.items()))})",
             f"* faults: {sum(1 for a in avail if a['kind'] != 'none')}",
             f"* replay: `{replay}`", "",
             "![latency over time, faults shaded](latency.svg)", "",
             "## Checker", "", "```", check.strip() or "(no output)", "```", ""]
    faults_ = [a for a in avail if a["kind"] != "none"]
    calm = [a for a in avail if a["kind"] == "none"]
    if faults_:
        lines += ["## Faults and availability", "",
                  "Operations invoked during each fault (conflicts left out), the share "
                  "that succeeded, and the time from the fault to the first successful "
                  "commit invoked after it began.", "",
                  "| at | fault | lasted | ops invoked | ok | first commit after |",
                  "|---|---|---|---|---|---|"]
        for a in calm:
            lines.append(f"| — | no fault | — | {a['ops']} | {_pct(a['ok_share'])} | — |")
        for a in faults_:
            lines.append(f"| {a['start_s']:.1f} s | {a['kind']} {a['target']} | "
                         f"{a['seconds']:.1f} s | {a['ops']} | {_pct(a['ok_share'])} | "
                         f"{_secs(a['first_commit_s'])} |")
        lines.append("")
    if errors:
        lines += ["## Errors (most common)", "", "| count | error |", "|---|---|"]
        for e, n in sorted(errors.items(), key=lambda kv: -kv[1])[:15]:
            lines.append(f"| {n} | {e.replace('|', '/')} |")
        lines.append("")
    if run.get("problems"):
        lines += ["## Problems", ""] + [f"* {p}" for p in run["problems"]] + [""]
    return "\n".join(lines)
