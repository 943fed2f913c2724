"""Human renderings of a task's history and of the stats."""

import time

from .output import fmt, safe, when
from ..rules.text import visible
from ..state.statuses import TaskStatus as T
from ..views import who


def _clock(at):
    return time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}"


def render_task(t):
    """``tasks show`` for people: the state in words, what is approved, then the timeline.

    Every stored value goes through ``fmt``, which escapes what could forge a
    line (a name with a newline, a bidi override in a record id). The record
    text and the draft keep their lines, indented under a label so that no
    line of theirs can pass for one of ours, with hidden characters shown.
    """
    result = t["result"] if isinstance(t.get("result"), dict) else {}
    lines = _questions(t) + [
        f"task      {fmt(t['key'])}",
        f"state     {fmt(t['state'])}",
        f"record    {fmt(t['record_id'])} v{fmt(t['version'])} (monitor {fmt(t['monitor'])})",
        f"sources   {fmt(result.get('sources'))}",
        f"digest    {fmt(t['digest'])}",
        f"approved  {fmt(t['approved_digest'])} by {fmt(t['approved_by'])}",
        f"attempts  {fmt(t['attempts'])}   outcome_unknown {fmt(t['outcome_unknown'])}",
    ]
    lines += _decisions(t)
    if t.get("superseded_by"):
        lines.append(f"replaced  by task {fmt(t['superseded_by'])} (a newer record version)")
    if t.get("draft_meta"):
        lines.append(_drafted_by(t["draft_meta"]))
    lines += _texts(t, result)
    lines += _draft_history(t)
    lines += ["", "timeline:"]
    for row in t["timeline"]:
        lines.append(f"  {_clock(row['at'])}  {fmt(row['kind']):<16} {fmt(row['code']):<16} "
                     f"{fmt(row['who']) if row['who'] else ''}".rstrip())
    if not t["timeline"]:
        lines.append("  (nothing yet)")
    return "\n".join(lines)


def _decisions(t):
    """The quorum, edits, rejection and hidden characters of ``tasks show``."""
    given = ", ".join(who(fmt(a["by"]), fmt(a["channel"]), a.get("note") and fmt(a["note"]),
                          a.get("for") and fmt(a["for"])) for a in t["approvals"]) or "none"
    lines = [f"approvals {given}; {t['approvals_needed']} needed"
             + (f", {t['approvals_missing']} missing" if t["approvals_missing"] else "")]
    for e in t["edits"]:
        shown = who(fmt(e['by']), fmt(e['channel']), e.get('note') and fmt(e['note']),
                    e.get('for') and fmt(e['for']))
        lines.append(f"edited    {_clock(e['at'])} by {shown}: "
                     f"{fmt(e['from_digest'][:12])} -> {fmt(e['to_digest'][:12])}")
        lines += [f"            {fmt(line)}" for line in (e.get("diff") or "").splitlines()]
    if t["edits"]:
        lines.append(f"drafted   {fmt(t['drafted_digest'])}")
    if t["status"] == T.REJECTED:
        rejected = fmt(t["rejected_by"]) + (f" for {fmt(t['rejected_for'])}"
                                            if t.get("rejected_for") else "")
        lines.append(f"rejected  by {rejected}: {fmt(t['reject_reason'])}")
    if t["hidden_characters"]:
        lines.append(f"WARNING   the draft holds hidden characters ({fmt(', '.join(t['hidden_characters']))}), "
                     "marked below as ⟨U+XXXX⟩; approving needs --ack-hidden-characters")
    return lines


def _questions(t):
    """The open questions, first of all: the task waits for a person to answer them."""
    questions = t.get("open_questions") or []
    if not questions:
        return []
    lines = [f"OPEN QUESTIONS ({len(questions)}): the material did not answer; "
             "no policy approves this task"]
    for n, question in enumerate(questions, 1):
        lines += [f"  {n}. " + visible(question).replace("\n", "\n     ")]
    return lines + [""]


def _drafted_by(meta):
    return (f"drafted   by {fmt(meta.get('model'))} (response {fmt(meta.get('response_id'))}, "
            f"prompt {fmt(str(meta.get('prompt_version'))[:12])}, tokens "
            f"{fmt(meta.get('input_tokens'))} in / {fmt(meta.get('output_tokens'))} out, "
            f"{fmt(meta.get('seconds'))} s)")


def _texts(t, result):
    """The record text (each record's, for a batch) and the draft, labelled."""
    if t.get("purged"):
        return ["", "record text and draft: (purged by retention)"]
    records = t["record"] if isinstance(t["record"], list) else [t["record"]]
    lines = []
    for record in records:
        record = record if isinstance(record, dict) else {}
        label = ("record text" if len(records) == 1 else
                 f"record {fmt(record.get('id'))} v{fmt(record.get('version'))} text")
        lines += ["", *_labelled(label, record.get("text"))]
    return lines + ["", *_labelled("draft", result.get("draft"))]


def _labelled(label, text):
    if not isinstance(text, str):
        return [f"{label}: {fmt(text)}"]
    return [f"{label}:", *(f"  {line}" for line in visible(text).split("\n"))]


def _draft_history(t):
    previous = t.get("previous_drafts") or []
    if not previous:
        return []
    lines = ["", f"earlier drafts ({len(previous)}), oldest first:"]
    for d in previous:
        record = d.get("record") or {}
        lines.append(f"  {_clock(d['at'])}  digest {fmt(d.get('digest'))}  "
                     f"record v{fmt(record.get('version'))}")
    lines += ["", "what changed in the draft:"]
    changes = t.get("draft_changes")
    lines += [f"  {fmt(line)}" for line in changes.splitlines()] if changes else ["  (the text is the same)"]
    return lines


def render_redraft(a):
    """``tasks redraft`` for people."""
    if not a["changed"]:
        return f"{a['key']}: {a['status']}, unchanged (the record and draft are the same)"
    if a["replaces"]:
        return (f"{a['key']}: {a['status']}, a new task for the newer record version; "
                f"{a['replaces']} is superseded. Review it: signoff tasks show {a['key'][:12]}")
    return f"{a['key']}: {a['status']}, drafted again (digest {a['digest']}); see `tasks show`"


def render_stats(s):
    """``stats`` for people."""
    u = s["uncertain"]
    rw = s["retries_waiting"]
    due = "-" if rw["next_due_in_s"] is None else f"{rw['next_due_in_s']:.1f}s"
    return "\n".join([
        "deliveries  " + _pairs(s["deliveries"]),
        "outcomes    " + _pairs(s["outcomes"]),
        "tasks       " + _pairs(s["tasks"]),
        _waiting(s.get("oldest_waiting")),
        f"in flight   deliveries {s['in_flight']['deliveries']}, tasks {s['in_flight']['tasks']}",
        f"retrying    deliveries {rw['deliveries']}, tasks {rw['tasks']}, next due in {due}",
        f"uncertain   now {u['now']}, parked (may have been written) {u['parked_may_be_written']}, "
        f"recovered {u['recovered']}, outcome unknown {u['outcome_unknown']}",
        f"parked      {s['parked']}",
        f"paused      {', '.join(s['paused']['monitors']) or 'none'} "
        f"({s['paused']['deliveries_waiting']} delivery(ies) waiting)",
        f"dead        {s['dead_letters']['total']} ({s['dead_letters']['not_replayed']} not replayed)",
        f"gaps        {s['stale_event_gaps']} stale event(s), {s['lease_expiries']} lease expiry(ies)",
        _not_observed(s.get("observation_gaps")),
        "workers     " + render_workers(s["workers"]),
        _subscribed(s["subscriptions"]),
        _drafted(s.get("drafter")),
    ])


def _waiting(oldest):
    if not oldest:
        return "waiting     no task waits for a decision"
    return "waiting     oldest per monitor: " + ", ".join(
        f"{fmt(m)} {w['age_s']:.0f}s" for m, w in oldest.items())


def _drafted(d):
    if not d or not d["calls"]:
        return "drafter     no model calls"
    exhausted = ", ".join(fmt(m) for m in d["budget_exhausted"]) or "none"
    limit = "no limit" if d["tokens_per_hour"] is None else f"{d['tokens_per_hour']}/hour"
    return (f"drafter     calls {_pairs(d['calls'])}; tokens {d['tokens']['input']} in, "
            f"{d['tokens']['output']} out; budget {limit}, exhausted: {exhausted}")


def render_workers(w):
    """The ``workers`` line of ``stats``: how many are live, and the freshest beat."""
    if not w["workers"]:
        return "none running"
    return (f"{w['live']} live of {len(w['workers'])} (freshest beat "
            f"{w['freshest_age_s']:.1f}s ago; live = beat within {w['max_age_s']:g}s)")


def render_health(report):
    """``healthcheck`` for people: one line per check."""
    lines = []
    for name, c in report["checks"].items():
        if not c["ok"]:
            lines.append(f"{name:<9} FAILED {c['code']}: {safe(c['message'])}")
        elif name == "workers":
            lines.append(f"{name:<9} ok, {render_workers(c)}")
        else:
            lines.append(f"{name:<9} ok")
    return "\n".join(lines)


def _subscribed(sub):
    if not any(sub["states"].values()):
        return "subscribed  no MCP Events subscription"
    states = _pairs({k: v for k, v in sub["states"].items() if v})
    waiting = f", {sub['unsubscribe_pending']} to unsubscribe" if sub["unsubscribe_pending"] else ""
    return f"subscribed  {states}{waiting}; requests {_pairs(sub['requests'])}"


def _not_observed(g):
    if not g or not (g["resume_gaps"] or g["lapse_gaps"]):
        return "unobserved  no resume gap recorded"
    lapses = f", {g['lapse_gaps']} lapsed subscription(s)" if g["lapse_gaps"] else ""
    return (f"unobserved  {g['resume_gaps']} resume gap(s){lapses}, {g['not_observed_s']:.0f}s "
            "not observed (see `signoff gaps`)")


def _pairs(counts):
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"




def render_gaps(g):
    """``gaps`` for people: every span nobody observed, never "no changes"."""
    lines = [f"resume gaps ({len(g['resume_gaps'])}, {g['not_observed_s']:.0f}s not observed):"]
    for r in g["resume_gaps"]:
        lines.append(f"  {when(r['from'])} → {when(r['to'])}  {r['previous']} → {r['monitor']}  "
                     f"{r['document']}  {r['mode']}: {r['observed']}")
    if not g["resume_gaps"]:
        lines.append("  (none recorded)")
    stale = g["stale_events"]
    lines.append(f"stale events ({stale['total']}; the latest {len(stale['latest'])} here):")
    for r in stale["latest"]:
        lines.append(f"  {when(r['occurred'])}  {r['monitor']}  {r['event_id']}  "
                     f"{r['record_id']}: not observed in time")
    if not stale["latest"]:
        lines.append("  (none recorded)")
    lapses = g["lapse_gaps"]
    lines.append(f"lapsed subscriptions ({len(lapses)}):")
    for r in lapses:
        lines.append(f"  {when(r['from'])} → {when(r['to'])}  {r['monitor']}  {r['document']}  "
                     f"{r['mode']}: {r['observed']}")
    if not lapses:
        lines.append("  (none recorded)")
    return "\n".join(lines)
