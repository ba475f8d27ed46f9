"""Alerts, as the agent runs them: rules from three sources, evaluated on what it stores, acted on.

A component of the agent, handed its journal, liveness and command desk.  Rules come from the ``--alerts`` TOML file
(re-read when it changes; a bad file is reported and the previous rules stay), from a trainer's
hello (``pilothouse.init(alerts=[...])``) and from clients (`pilothouse alerts add`, the app); the
last two are kept in the journal database so they survive a restart.  Each edge of an episode is
an ``alert`` event in the run's journal, committed with the data that caused it, so every
connected app sees it in its stream; a firing rule may pause the run through the same
acknowledged command path as a human, and run a local hook.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from pilothouse.node.alert_engine import Alert, AlertEngine, RunView
from pilothouse.node.command_desk import CommandDesk
from pilothouse.node.hooks import HookRunner
from pilothouse.node.journal import Store
from pilothouse.node.liveness import Liveness
from pilothouse.node.rules_file import load_rules
from pilothouse.security import SecurityError
from pilothouse.wire.alert_rules import Rule, RuleError, check_rule, check_rules
from pilothouse.wire.entries import KIND_METRIC, Entry

log = logging.getLogger("pilothouse.alerts")

RECENT = 200  # alerts `pilothouse alerts` lists


class AlertDesk:
    def __init__(self, store: Store, liveness: Liveness, commands: CommandDesk, system_run: str,
                 rules_file: str | Path | None, file_rules: list[Rule]):
        """``file_rules``: the file's rules, already loaded (a bad file stopped the start earlier)."""
        self.store = store
        self.liveness = liveness
        self.commands = commands
        self.system_run = system_run
        self.engine = AlertEngine()
        self.hooks = HookRunner()
        self.rules_file = Path(rules_file) if rules_file is not None else None
        self._rules_stamp = _stamp(self.rules_file)
        self._names: dict[str, str] = {}
        db = self.store.db
        db["alert_rules"].create({"source": str, "scope": str, "name": str, "spec": bytes},
                                 pk=("source", "scope", "name"), if_not_exists=True)
        db["alerts"].create({"id": int, "time": float, "run": str, "rule": str, "kind": str, "state": str,
                             "metric": str, "step": int, "value": float, "detail": str, "source": str,
                             "scope": str, "ref": float}, pk="id", if_not_exists=True)
        for source, scope, spec in db.execute("SELECT source, scope, spec FROM alert_rules"):
            try:
                self.engine.add(source, scope, check_rule(msgpack.unpackb(spec, raw=False)))
            except (RuleError, ValueError) as exc:
                log.warning("a stored %s rule no longer loads and is skipped: %s", source, exc)
        self.engine.replace("file", "", file_rules)
        if self.rules_file is not None:
            log.info("%d alert rule(s) from %s", len(file_rules), self.rules_file)
        self._restore_episodes()

    def _restore_episodes(self) -> None:
        """Episodes firing when the agent stopped go on firing: their clearing is reported, their
        start is not reported again."""
        rules = dict(self.engine.rules())
        for row in self.store.db.query(
                "SELECT * FROM alerts WHERE id IN (SELECT MAX(id) FROM alerts "
                "GROUP BY source, scope, rule, run, metric) AND state='firing'"):
            key = (row["source"], row["scope"] or "", row["rule"])
            rule = rules.get(key)
            if rule is not None and rule.kind == row["kind"]:
                self.engine.restore(Alert(key, rule, row["run"], row["metric"], "firing", row["step"],
                                          row["value"], row["detail"], row["time"]), row["ref"])

    # --- rule sources ------------------------------------------------------------------------

    def _reload_rules_file(self) -> None:
        """A changed file is read again; a bad edit, or a file or folder others may now write (their
        programs would run as the owner), is reported and the previous rules stay."""
        assert self.rules_file is not None
        stamp = _stamp(self.rules_file)
        if stamp == self._rules_stamp:
            return
        self._rules_stamp = stamp
        try:
            rules = load_rules(self.rules_file)
        except (RuleError, SecurityError) as exc:  # a bad edit, or a file others may now have edited
            log.error("alert rules not reloaded, the previous ones stay: %s", exc)
            self.store.event(self.system_run, "rules", {"ok": False, "file": str(self.rules_file),
                                                         "detail": str(exc)})
            return
        self.engine.replace("file", "", rules)
        log.info("%d alert rule(s) from %s", len(rules), self.rules_file)
        self.store.event(self.system_run, "rules", {"ok": True, "file": str(self.rules_file),
                                                     "detail": f"{len(rules)} rule(s) loaded"})

    def rules_from_hello(self, run: str, specs: list[dict]) -> None:
        """A trainer's own rules (validated by the protocol check): they replace its previous ones."""
        rules = check_rules(specs, f"run {run} alerts")
        self.engine.replace("run", run, rules)
        self.store.db.execute("DELETE FROM alert_rules WHERE source='run' AND scope=?", [run])
        for rule in rules:
            self._persist("run", run, rule.spec)

    def _persist(self, source: str, scope: str, spec: dict) -> None:
        self.store.db.execute("INSERT OR REPLACE INTO alert_rules VALUES (?,?,?,?)",
                              [source, scope, spec["name"], msgpack.packb(spec, use_bin_type=True)])

    def forget(self, run: str) -> None:
        """A removed run: its rules, its alerts and its episodes go with it."""
        self.engine.forget(run)
        self.store.db.execute("DELETE FROM alert_rules WHERE source IN ('run', 'user') AND scope=?", [run])
        self.store.db.execute("DELETE FROM alerts WHERE run=?", [run])
        self._names.pop(run, None)

    # --- evaluation --------------------------------------------------------------------------

    def on_entries(self, entries: list[Entry]) -> None:
        """Every metric chunk just stored, in the same transaction: an alert commits with its cause."""
        for entry in entries:
            if entry.kind != KIND_METRIC:
                continue
            name = self._run_name(entry.run)
            if not self.engine.watches(entry.run, name, entry.metric):
                continue  # no rule looks at it: not decoded
            fired = self.engine.observe(entry.run, name, entry.metric,
                                        np.frombuffer(entry.steps, np.int64), np.frombuffer(entry.vals, np.float64))
            if fired:
                self._act(fired)

    def tick(self) -> None:
        """Once a second: liveness rules, a changed rules file, finished hooks."""
        if self.rules_file is not None:
            self._reload_rules_file()
        self._act(self.engine.tick(self._run_views()))
        while self.hooks.results:
            result = self.hooks.results.popleft()
            if self.store.has_run(result.run):
                self.store.event(result.run, "alert_hook", result.body())

    def on_sample(self, values: dict[str, float], now: float) -> None:
        host = self.liveness.host
        running = [v for v in self._run_views() if v.status == "running" and self.liveness.runs[v.id].host == host]
        self._act(self.engine.observe_gpus(values, now, running))

    def _run_views(self) -> list[RunView]:
        now = time.time()
        return [RunView(run, self._run_name(run), live.status, now - live.seen) for run, live in self.liveness]

    def _run_name(self, run: str) -> str:
        """Rules match run names too; a name never changes, so it is read once."""
        name = self._names.get(run)
        if name is None:
            row = self.store.run_row(run)
            name = self._names[run] = row["name"] if row else run
        return name

    def _act(self, fired: list[Alert]) -> None:
        for alert in fired:
            if alert.step is None:  # a liveness or GPU alert: placed at the run's last step
                row = self.store.run_row(alert.run)
                alert.step = row["last_step"] if row else None
            body = alert.body()
            self.store.event(alert.run, "alert", body)
            self.store.db.execute(
                "INSERT INTO alerts (time, run, rule, kind, state, metric, step, value, detail, source, scope, ref) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [alert.time, alert.run, alert.rule.name, alert.rule.kind, alert.state, alert.metric, alert.step,
                 alert.value, alert.detail, alert.key[0], alert.key[1], self.engine.carry(alert)])
            log.warning("alert %s %s on %s: %s", alert.rule.name, alert.state, alert.run, alert.detail)
            if alert.state == "firing" and alert.rule.pause:
                live = self.liveness.get(alert.run)
                if live is not None and live.status in ("running", "stale"):
                    self.commands.issue(uuid.uuid4().hex[:20], alert.run, "pause", None, None,
                                {"via": "alert", "rule": alert.rule.name, "source": alert.key[0]})
            if alert.rule.exec:
                self.hooks.submit(alert.run, alert.rule.name, alert.rule.exec, {**body, "run": alert.run,
                                                                                 "host": self.liveness.host},
                                  alert.rule.exec_timeout)

    # --- queries -----------------------------------------------------------------------------

    def op_alerts(self, args: dict) -> dict:
        rules = [{"name": rule.name, "kind": rule.kind, "run": scope or None, "source": source, "spec": rule.spec}
                 for (source, scope, _), rule in self.engine.rules()]
        recent = [dict(r) for r in self.store.db.query(
            f"SELECT time, run, rule, kind, state, metric, step, value, detail, source FROM alerts "
            f"ORDER BY id DESC LIMIT {RECENT}")]
        firing = [{**a.body(), "run": a.run} for a in self.engine.firing()]
        return {"rules": rules, "firing": firing, "recent": recent}

    def op_alert_add(self, args: dict) -> dict:
        scope = self._scope(args.get("run"))
        rule = check_rule(args.get("rule"))
        self.engine.add("user", scope, rule)
        self._persist("user", scope, rule.spec)
        return {"name": rule.name, "kind": rule.kind, "run": scope or None, "source": "user", "spec": rule.spec}

    def op_alert_rm(self, args: dict) -> dict:
        scope = self._scope(args.get("run"))
        name = args.get("name")
        if not isinstance(name, str):
            raise TypeError("name must be a rule name")
        for source in ("user", "run"):
            if self.engine.remove(source, scope, name):
                self.store.db.execute("DELETE FROM alert_rules WHERE source=? AND scope=? AND name=?",
                                      [source, scope, name])
                return {"name": name, "run": scope or None, "source": source}
        if any(k[0] == "file" and k[2] == name for k, _ in self.engine.rules()):
            raise ValueError(f"rule {name!r} comes from {self.rules_file}: edit that file to remove it")
        where = f" for run {scope}" if scope else ""
        raise LookupError(f"no rule named {name[:64]!r}{where}")

    def _scope(self, run: Any) -> str:
        if run is None:
            return ""
        if not isinstance(run, str):
            raise TypeError("run must be a run id or name")
        return self.store.resolve(run)


def _stamp(path: Path | None) -> tuple[int, int, int, int] | None:
    """Identity of a file's version: a save replaces the inode or changes the time or size; a chmod
    or chown changes the ctime, so a file opened to others is refused at once, and one fixed is read."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
