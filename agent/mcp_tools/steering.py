"""The steering tools: ``pause``, ``resume``, ``checkpoint``, ``stop`` and ``set_hyperparameters``.

They take the CLI's path (`pilothouse pause|set ...`: ``Client.command``): the agent checks the values
against the run's schema and the trainer answers at its next step boundary, so the answer is the
trainer's own ("lr=0.0005 applied at step 412") or the rejection, never a guess.  Each command says
it comes through MCP (``who``: client "mcp"), so `pilothouse events` and the app's Events name it.

Off unless the owner started the server with ``--allow-steer``: then nothing is sent, and the answer
says how to turn it on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pilothouse.client import AgentUnavailable
from pilothouse.mcp_tools.reach import Answer, Reach, ToolFailure
from pilothouse.mcp_tools.shape import plain
from pilothouse.text import printable

WHO = {"client": "mcp"}
WAIT = 30.0  # seconds a command waits for the trainer's answer, as the CLI's
OFF = ("steering is off: this MCP server was started without --allow-steer, so it only reads. The owner turns it "
       "on by adding --allow-steer to the server's arguments in the MCP client's configuration "
       "(`pilothouse mcp --allow-steer`) and restarting the server")


class Steering:
    """Sends commands when ``allowed``; else refuses every one, sending nothing."""

    def __init__(self, reach: Reach, allowed: bool, wait: float = WAIT):
        self.reach = reach
        self.allowed = allowed
        self.wait = wait

    def command(self, run: str, cmd: str, values: Mapping[str, Any] | None = None, at_step: int | None = None,
                agent: str | None = None) -> Answer:
        if not self.allowed:
            raise ToolFailure(OFF)
        if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0):
            raise ToolFailure(f"at_step must be a step (a whole number, 0 or more), got {at_step!r}")
        if values is not None and (not isinstance(values, Mapping) or not values):
            raise ToolFailure("changes must map each hyperparameter to its new value, like {\"lr\": 0.0005}")
        url, run_id = self.reach.locate(run, agent)
        with self.reach.client(url, timeout=min(self.reach.timeout, 5.0)) as client:
            try:
                row = client.command(run_id, cmd, values=dict(values) if values else None, at_step=at_step,
                                     wait=self.wait, who=WHO)
            except AgentUnavailable as exc:
                raise ToolFailure(printable(f"{cmd} not confirmed: {exc}")) from None
        state, detail = row.get("state"), printable(row.get("detail") or "")
        data = {"run": run_id, "agent": url, "command": cmd, "id": row.get("cid"), "state": state,
                "detail": detail, "step": row.get("step"), "applied": plain(row.get("applied"))}
        if state in ("applied", "scheduled"):
            return Answer(f"{detail} (run {run_id}, command {row.get('cid')})", data)
        if state == "rejected":
            return Answer(f"{cmd} rejected: {detail}", data, error=True)
        return Answer(f"no acknowledgement within {self.wait:g} s; the command stays queued (id {row.get('cid')}) "
                      f"and applies at the trainer's next sync: the events tool shows when", data, error=True)

    def pause(self, run: str, agent: str | None = None) -> Answer:
        return self.command(run, "pause", agent=agent)

    def resume(self, run: str, agent: str | None = None) -> Answer:
        return self.command(run, "resume", agent=agent)

    def checkpoint(self, run: str, agent: str | None = None) -> Answer:
        return self.command(run, "checkpoint", agent=agent)

    def stop(self, run: str, agent: str | None = None) -> Answer:
        return self.command(run, "stop", agent=agent)

    def set_hyperparameters(self, run: str, changes: Mapping[str, Any], at_step: int | None = None,
                            agent: str | None = None) -> Answer:
        if not isinstance(changes, Mapping) or not changes:
            if not self.allowed:
                raise ToolFailure(OFF)
            raise ToolFailure("changes must map each hyperparameter to its new value, like {\"lr\": 0.0005}")
        return self.command(run, "set", values=changes, at_step=at_step, agent=agent)
