"""The read tools: ``list_runs``, ``run_summary``, ``events`` and ``alerts``; what `pilothouse runs`,
`events` and `alerts` print, as bounded data.

Events read as the same sentences `pilothouse events` prints (``pilothouse.event_text``): an
acknowledgement names who asked for it, a command names who sent it (``(mcp)`` for this server's).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pilothouse.client import AgentUnavailable, Client
from pilothouse.event_text import Narrator, when
from pilothouse.mcp_tools.reach import Answer, Reach, ToolFailure
from pilothouse.mcp_tools.shape import plain, plural
from pilothouse.text import fmt_value, printable
from pilothouse.wire.entries import KIND_EVENT, entry_body
from pilothouse.wire.watched import USER_KINDS, WATCHED

MAX_RUNS = 500
MAX_EVENTS = 200
MAX_ALERTS = 200
VALUES = 20  # last values a summary holds (the most important first, as the agent orders them)
LIVE = ("running", "paused")


def bounded(value: int, name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ToolFailure(f"{name} must be a whole number from 1 to {most}, got {value!r}")
    return value


def said(lines: list[str]) -> str:
    """Lines as one text, each made printable (a newline a trainer put in a detail shows as an escape)."""
    return "\n".join(map(printable, lines))


def run_row(client: Client, run_id: str) -> dict:
    row = next((r for r in client.runs() if r["id"] == run_id), None)
    if row is None:  # removed between resolve and now
        raise ToolFailure(printable(f"run {run_id} is no longer on {client.url}"))
    return row


def headline(row: dict) -> dict[str, Any]:
    """The run's key metric (the project's choice, else a reward, else the loss) and its last value."""
    key, summary = row.get("key"), row.get("summary") or {}
    return {"name": key, "value": plain(summary[key]) if key in summary else None}


def brief(url: str, row: dict) -> dict[str, Any]:
    """One run as ``list_runs`` shows it."""
    return {"agent": url, "id": row["id"], "project": row["project"], "name": row["name"],
            "status": row["status"], "step": row["last_step"], "host": row.get("host"),
            "key_metric": headline(row), "alerts_firing": list(row.get("alerts") or []),
            "attempts": row.get("attempts") or 1, "steerable": row.get("kind") != WATCHED}


def _line(run: dict) -> str:
    key = run["key_metric"]
    value = f" {key['name']}={_fmt(key['value'])}" if key["value"] is not None else ""
    names = [a["rule"] if isinstance(a, dict) else a for a in run["alerts_firing"]]  # a summary's are whole alerts
    alerts = f" alerts firing: {', '.join(map(str, names))}" if names else ""
    step = "-" if run["step"] is None else run["step"]
    return printable(f"{run['project']}/{run['name']} ({run['id']}) {run['status']} at step {step}{value}{alerts}")


def _fmt(value: Any) -> str:
    return fmt_value(value) if isinstance(value, float) else str(value)


def list_runs(reach: Reach, limit: int = 50, project: str | None = None, agent: str | None = None) -> Answer:
    """Every run of every agent (of one project, of one agent), live ones first, then the latest heard."""
    bounded(limit, "limit", MAX_RUNS)
    found: list[tuple[float, dict]] = []
    silent: list[dict] = []
    urls = reach.choose(agent)
    for url in urls:
        with reach.client(url, reach.probe_timeout() if len(urls) > 1 else None) as client:
            try:
                rows = client.runs()
            except AgentUnavailable as exc:
                silent.append({"agent": url, "error": str(exc)})
                continue
        for row in rows:
            if row.get("kind") in USER_KINDS and (project is None or row["project"] == project):
                found.append((row.get("last_seen") or 0.0, brief(url, row)))
    if len(silent) == len(urls) and not found:
        raise ToolFailure(printable("no agent answers: " + "; ".join(f"{s['agent']}: {s['error']}" for s in silent)))
    found.sort(key=lambda pair: (pair[1]["status"] not in LIVE, -pair[0]))
    runs = [run for _, run in found[:limit]]
    data: dict[str, Any] = {"runs": runs, "total": len(found)}
    if silent and reach.given:  # the user's default address without an agent is no news
        data["unreachable"] = silent
    more = f" (the first {len(runs)}: raise limit for more)" if len(found) > len(runs) else ""
    head = f"{plural(len(found), 'run')}{more}" + (f" of project {project}" if project else "")
    return Answer("\n".join([head + (":" if runs else ""), *map(_line, runs)]), data)


def recent_events(client: Client, run_id: str, limit: int) -> tuple[list[dict], int]:
    """The run's last ``limit`` events as sentences, oldest first, and how many it has."""
    narrator = Narrator()  # reads them all in order: an acknowledgement names the command before it
    kept: deque[dict] = deque(maxlen=limit)
    total = 0
    for page in client.history(run_id, [KIND_EVENT]):
        for entry in page.entries:
            body = entry_body(entry)
            kind = body.get("event") if isinstance(body, dict) else None
            kept.append({"time": when(body), "event": kind if isinstance(kind, str) else "event",
                         "text": narrator.sentence(body)})
            total += 1
    return list(kept), total


def events(reach: Reach, run: str, limit: int = 20, agent: str | None = None) -> Answer:
    """The run's audit trail, its last ``limit`` entries: status changes, commands and who sent them,
    the trainer's acknowledgements, checkpoints, alerts."""
    bounded(limit, "limit", MAX_EVENTS)
    url, run_id = reach.locate(run, agent)
    with reach.client(url) as client:
        kept, total = recent_events(client, run_id, limit)
    lines = [f"{e['time']}  {e['text']}" for e in kept]
    head = f"run {run_id}: {plural(total, 'event')}" + (f", the last {len(kept)}" if total > len(kept) else "")
    return Answer(said([head, *lines]), {"run": run_id, "agent": url, "events": kept, "total": total})


def _firing(client: Client, run_id: str | None) -> tuple[list[dict], list[dict], list[dict]]:
    data = client.alerts()
    def mine(a: dict) -> bool:
        return run_id is None or a.get("run") == run_id
    rules = [r for r in data["rules"] if run_id is None or r.get("run") in (None, run_id)]
    return [a for a in data["firing"] if mine(a)], [a for a in data["recent"] if mine(a)], rules


def _alert(url: str, alert: dict) -> dict:
    return {"agent": url, "run": alert.get("run"), "rule": alert.get("rule"), "state": alert.get("state"),
            "metric": alert.get("metric"), "step": alert.get("step"), "value": plain(alert.get("value")),
            "detail": plain(alert.get("detail")), "time": when(alert)}


def run_summary(reach: Reach, run: str, events_limit: int = 10, agent: str | None = None) -> Answer:
    """A run at a glance: status, step, config, key metric, last values, firing alerts, last events."""
    bounded(events_limit, "events", MAX_EVENTS)
    url, run_id = reach.locate(run, agent)
    with reach.client(url) as client:
        row = run_row(client, run_id)
        firing, _, _ = _firing(client, run_id)
        kept, total = recent_events(client, run_id, events_limit)
    summary = row.get("summary") or {}
    values = dict(list(summary.items())[:VALUES])
    data = {**brief(url, row), "config": plain(row.get("config") or {}),
            "tunable": sorted(row.get("schema") or {}), "metrics": row.get("metrics"),
            "last_values": plain(values), "alerts_firing": [_alert(url, a) for a in firing],
            "last_events": kept, "events_total": total,
            "lost_records": max(row.get("dropped_records") or 0, row.get("lost_records") or 0)}
    key = data["key_metric"]
    lines = [_line(data) + (f" on {row['host']}" if row.get("host") else "")]
    if len(summary) > len(values):
        lines.append(f"last values (the {len(values)} most important of {len(summary)}): "
                     + ", ".join(f"{k}={_fmt(v)}" for k, v in data["last_values"].items()))
    elif values:
        lines.append("last values: " + ", ".join(f"{k}={_fmt(v)}" for k, v in data["last_values"].items()))
    if key["value"] is None and key["name"]:
        lines.append(f"key metric {key['name']}: no value yet")
    for alert in data["alerts_firing"]:
        lines.append(f"ALERT {alert['rule']} firing: {alert['detail']}")
    if kept:
        lines.append(f"last event: {kept[-1]['time']}  {kept[-1]['text']}")
    return Answer(said(lines), data)


def alerts(reach: Reach, run: str | None = None, limit: int = 20, agent: str | None = None) -> Answer:
    """Firing alerts and the latest alert changes (of one run, or of every run), and the rules."""
    bounded(limit, "limit", MAX_ALERTS)
    if run is not None:
        url, run_id = reach.locate(run, agent)
        urls, only = [url], run_id
    else:
        urls, only = reach.choose(agent), None
    firing: list[dict] = []
    recent: list[dict] = []
    rules: list[dict] = []
    for url in urls:
        with reach.client(url, reach.probe_timeout() if len(urls) > 1 else None) as client:
            try:
                f, r, rs = _firing(client, only)
            except AgentUnavailable:
                continue
        firing += [_alert(url, a) for a in f]
        recent += [_alert(url, a) for a in r]
        rules += [{"agent": url, "name": x.get("name"), "kind": x.get("kind"), "run": x.get("run"),
                   "spec": plain(x.get("spec"))} for x in rs]
    recent.sort(key=lambda a: a["time"], reverse=True)
    data = {"firing": firing[:limit], "recent": recent[:limit], "rules": rules[:limit],
            "firing_total": len(firing), "recent_total": len(recent), "rules_total": len(rules)}
    scope = f"run {only}" if only else "all runs"
    lines = [f"{scope}: {plural(len(firing), 'alert')} firing, {plural(len(rules), 'rule')}"]
    lines += [f"FIRING {a['rule']} on run {a['run']}: {a['detail']}" for a in data["firing"]]
    lines += [f"{a['time']}  {a['run']}  {a['rule']} {a['state']}: {a['detail']}" for a in data["recent"][:5]]
    return Answer(said(lines), data)
