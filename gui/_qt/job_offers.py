"""The window's multi-node jobs: the bar offering a job's other agents, and Agents → Jobs.

A job's nodes each run their own agent; the app offers, once per job, to follow the ones it lacks
(what to add and how is ``pilothouse.gui.jobs``'s), remembers the user's answer in its store, and
adds or removes a job's agents as one.  Which agents the window follows, and what following one
means there (links, health, panels), stay the window's: it is this controller's ``Agents``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Protocol

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QMenu

from pilothouse.text import printable

from ..jobs import JobPlan, app_keys, job_ids, offers, plan_job
from ..local_store import LocalStore
from .jobs import JobBar
from .store_dialogs import Ask, ask_user


class Agents(Protocol):
    """The agents the window follows; after ``follow``/``unfollow`` it is told ``agents_changed``."""

    def followed(self) -> list[str]: ...

    def follow(self, url: str) -> None: ...

    def unfollow(self, url: str) -> None: ...

    def agents_changed(self) -> None: ...


class JobOffers:
    """Offers each multi-node job whose other agents are not followed, once (a job decided on before,
    or offered this session, is not offered again; Agents → Jobs offers it on request)."""

    def __init__(self, window: QMainWindow, store: LocalStore, agents: Agents, menu: QMenu):
        self.window, self.store, self.agents, self.menu = window, store, agents, menu
        self.bar = JobBar()
        self.bar.accepted.connect(self.add)
        self.bar.declined.connect(self.decline)
        self.menu.aboutToShow.connect(self._fill_menu)
        self._offered: set[str] = set()  # jobs offered this session (or decided before): never offered twice

    def runs_listed(self, runs: Iterable[Mapping]) -> None:
        """An agent's run list came: a job in it not seen yet may need offering."""
        if job_ids(runs) - self._offered:
            self._offer_new()

    def _offer_new(self) -> None:
        self._offered |= {j["id"] for j in self.store.jobs()}
        runs = self.store.runs()
        for plan in offers(runs, self.agents.followed(), self._offered, socket.gethostname(), *app_keys()):
            self._offered.add(plan.run)
            self.bar.offer(plan)
        self._offered |= job_ids(runs)  # the rest need nothing: every node is followed

    def plan(self, run_id: str) -> JobPlan | None:
        """The job's nodes and how to reach each, as of now (Agents → Jobs → offer again)."""
        followed = self.agents.followed()
        copies = {r["agent"]: r for r in self.store.runs() if r["id"] == run_id and r["agent"] in followed}
        job = next((j for j in self.store.jobs() if j["id"] == run_id), None)
        return plan_job(run_id, copies, socket.gethostname(), *app_keys(),
                        remembered=job["members"] if job else (), used_urls=followed)

    def add(self, plan: JobPlan) -> None:
        """Accepted: follow every agent of the job that can be added, and remember them as one job."""
        for node in plan.addable:
            self.agents.follow(node.url)
        self.store.remember_job(plan.run, plan.title, plan.members())
        n = len(plan.addable)
        text = f"job {printable(plan.title)}: following {n} more agent{'s' * (n != 1)}"
        if plan.tunnels:
            self.bar.copy_tunnels()
            text += f"; open {len(plan.tunnels)} SSH tunnel{'s' * (len(plan.tunnels) != 1)} (copied to the clipboard)"
        if len(plan.addable) < len(plan.missing):
            text += f"; {len(plan.missing) - len(plan.addable)} not added (Agents → Jobs says why)"
        self.window.statusBar().showMessage(text, 15000)
        self.agents.agents_changed()

    def decline(self, plan: JobPlan) -> None:
        """Declined: remembered, so this job is not offered again (Agents → Jobs can still add it)."""
        self.store.decline_job(plan.run, plan.title)

    def remove(self, run_id: str, ask: Ask | None = None) -> bool:
        """Stop following a job's agents (those no other job holds), after one yes; its runs stay browsable."""
        job = next((j for j in self.store.jobs() if j["id"] == run_id), None)
        if job is None:
            return False
        urls = [u for u, _, _ in job["members"]]
        text = f"Stop following the {len(urls)} agents of job {printable(job['title'])}?\n" + "\n".join(urls)
        if urls and not (ask or ask_user(self.window))("Remove job", text + "\n\nIts runs stay browsable."):
            return False
        for url in self.store.forget_job(run_id):
            self.agents.unfollow(url)
        self.agents.agents_changed()
        return True

    def offer_again(self, run_id: str) -> None:
        """Agents → Jobs → Add its agents…: the bar offers the job as it is now."""
        plan = self.plan(run_id)
        if plan is None or not plan.missing:
            self.window.statusBar().showMessage("every agent of this job is followed" if plan else
                                                "no agent followed has this job", 8000)
            return
        self.bar.offer(plan)

    def _fill_menu(self) -> None:
        self.menu.clear()
        jobs = self.store.jobs()
        if not jobs:
            self.menu.addAction(QAction("no multi-node jobs yet", self.menu, enabled=False))
        for job in jobs:
            n = len(job["members"])
            title = printable(f"{job['title']} ({job['id']})") + (" · declined" if job["declined"] else
                                                                 f" · {n} agent{'s' * (n != 1)}")
            sub = self.menu.addMenu(title)
            sub.addAction(QAction("Add its agents…", sub, triggered=lambda _=False, j=job["id"]: self.offer_again(j)))
            if n:
                sub.addAction(QAction("Remove job (stop following its agents)…", sub,
                                      triggered=lambda _=False, j=job["id"]: self.remove(j)))
