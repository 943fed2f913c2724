"""Human renderings of a task's history and of the stats."""

import time

from .output import fmt


def _clock(at):
    return time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}"


def render_task(t):
    """``tasks show`` for people: the state in words, then the timeline."""
    lines = [
        f"task      {t['key']}",
        f"state     {t['state']}",
        f"record    {t['record_id']} v{t['version']} (monitor {t['monitor']})",
        f"result    {'(purged by retention)' if t.get('purged') else fmt(t['result'])}",
        f"digest    {t['digest']}",
        f"approved  {fmt(t['approved_digest'])} by {fmt(t['approved_by'])}",
        f"attempts  {t['attempts']}   outcome_unknown {fmt(t['outcome_unknown'])}",
        "",
        "timeline:",
    ]
    entries = [(a["at"], f"audit    {a['code']}") for a in t["audit"]]
    entries += [(h["at"], f"attempt  {h['step']:<8} {h['code']:<16} {h['worker'] or ''}")
                for h in t["history"]]
    for at, text in sorted(entries, key=lambda e: e[0]):
        lines.append(f"  {_clock(at)}  {text}")
    if not entries:
        lines.append("  (nothing yet)")
    return "\n".join(lines)


def render_stats(s):
    """``stats`` for people."""
    u = s["uncertain"]
    rw = s["retries_waiting"]
    due = "-" if rw["next_due_in_s"] is None else f"{rw['next_due_in_s']:.1f}s"
    return "\n".join([
        "deliveries  " + _pairs(s["deliveries"]),
        "outcomes    " + _pairs(s["outcomes"]),
        "tasks       " + _pairs(s["tasks"]),
        f"in flight   deliveries {s['in_flight']['deliveries']}, tasks {s['in_flight']['tasks']}",
        f"retrying    deliveries {rw['deliveries']}, tasks {rw['tasks']}, next due in {due}",
        f"uncertain   now {u['now']}, parked (may have been written) {u['parked_may_be_written']}, "
        f"recovered {u['recovered']}, outcome unknown {u['outcome_unknown']}",
        f"parked      {s['parked']}",
        f"dead        {s['dead_letters']['total']} ({s['dead_letters']['not_replayed']} not replayed)",
        f"gaps        {s['stale_event_gaps']} stale event(s), {s['lease_expiries']} lease expiry(ies)",
        _not_observed(s.get("observation_gaps")),
    ])


def _not_observed(g):
    if not g or not g["resume_gaps"]:
        return "unobserved  no resume gap recorded"
    return (f"unobserved  {g['resume_gaps']} resume gap(s), {g['not_observed_s']:.0f}s "
            "not observed (see `signoff gaps`)")


def _pairs(counts):
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"




def render_gaps(g):
    """``gaps`` for people: every span nobody observed, never "no changes"."""
    lines = [f"resume gaps ({len(g['resume_gaps'])}, {g['not_observed_s']:.0f}s not observed):"]
    for r in g["resume_gaps"]:
        lines.append(f"  {fmt(r['from'])} → {fmt(r['to'])}  {r['previous']} → {r['monitor']}  "
                     f"{r['document']}  {r['mode']}: {r['observed']}")
    if not g["resume_gaps"]:
        lines.append("  (none recorded)")
    stale = g["stale_events"]
    lines.append(f"stale events ({stale['total']}; the latest {len(stale['latest'])} here):")
    for r in stale["latest"]:
        lines.append(f"  {fmt(float(r['occurred']))}  {r['monitor']}  {r['event_id']}  "
                     f"{r['record_id']}: not observed in time")
    if not stale["latest"]:
        lines.append("  (none recorded)")
    return "\n".join(lines)
