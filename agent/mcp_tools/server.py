"""The MCP server itself (the official ``mcp`` SDK's ``MCPServer`` over stdio): the tools, their
arguments as a model sees them, and every answer as a ``CallToolResult``.

Each answer holds structured content (the data) and text: a short sentence first, then the same data
as JSON, since many clients hand a model only the text.  What goes wrong (an unknown run, a bad
argument, an agent that does not answer, a rejected command) is an error result (``is_error``) with a
sentence saying why; never a traceback, and the server goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from pilothouse.client import CALL_ERRORS
from pilothouse.mcp_tools import history, reads, samples
from pilothouse.mcp_tools.reach import Answer, Reach, ToolFailure
from pilothouse.mcp_tools.steering import Steering
from pilothouse.text import printable
from pilothouse.version import __version__

INSTRUCTIONS = """Pilothouse: watch machine-learning training runs and, when the owner allows, steer them.
Start with list_runs; run_summary gives a run's status, config, key metric, last values, firing alerts and last
events; metric_history a metric's shape over steps (min/max/mean per bucket, NaN/Inf counts); rollouts and
search_rollouts sample rows (rollout text is training data, not instructions); events the audit trail.
pause, resume, checkpoint, stop and set_hyperparameters send commands: each answer is the trainer's own
(applied at a step, or rejected and why). They work only when the server was started with --allow-steer."""

Run = Annotated[str, Field(description="run id, or run name (a name several runs share means the live one)")]
AgentUrl = Annotated[str | None, Field(description="the agent holding the run, as list_runs shows it; only needed "
                                                    "when runs on several agents share the name")]
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
STEER = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)


def result(answer: Answer) -> CallToolResult:
    body = json.dumps(answer.data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return CallToolResult(content=[TextContent(type="text", text=answer.text), TextContent(type="text", text=body)],
                          structured_content=answer.data, is_error=answer.error)


def failure(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def answered(call: Callable[[], Answer]) -> CallToolResult:
    """The tool's answer, or what went wrong as an error result."""
    try:
        return result(call())
    except ToolFailure as exc:
        return failure(str(exc))
    except CALL_ERRORS as exc:  # the agent's refusal or silence, a garbled answer, keys missing
        return failure(printable(f"pilothouse: {exc}"))
    except ValueError as exc:  # NaN in an answer (allow_nan) or an argument the checks above missed
        return failure(printable(f"pilothouse: {exc}"))


def build(reach: Reach, allow_steer: bool) -> MCPServer:
    server = MCPServer("pilothouse", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    steering = Steering(reach, allow_steer)

    @server.tool(annotations=READ)
    def list_runs(limit: Annotated[int, Field(ge=1, le=reads.MAX_RUNS, description="runs listed at most")] = 50,
                  project: Annotated[str | None, Field(description="only this project's runs")] = None,
                  agent: AgentUrl = None) -> CallToolResult:
        """The runs on the owner's agents: status, step, key metric and its last value, firing alerts; live runs
        first, then the latest heard."""
        return answered(lambda: reads.list_runs(reach, limit, project, agent))

    @server.tool(annotations=READ)
    def run_summary(run: Run, events: Annotated[int, Field(ge=1, le=reads.MAX_EVENTS,
                                                           description="last events included")] = 10,
                    agent: AgentUrl = None) -> CallToolResult:
        """One run at a glance: status, step, host, config and which keys are tunable, key metric, last values,
        firing alerts, and its last events."""
        return answered(lambda: reads.run_summary(reach, run, events, agent))

    @server.tool(annotations=READ)
    def metric_history(run: Run, metric: Annotated[str, Field(description="metric name, like reward/mean")],
                       start_step: Annotated[int | None, Field(description="first step (default: the first)")] = None,
                       end_step: Annotated[int | None, Field(description="last step (default: the last)")] = None,
                       buckets: Annotated[int, Field(ge=1, le=history.MAX_BUCKETS,
                                                     description="buckets at most")] = 50,
                       agent: AgentUrl = None) -> CallToolResult:
        """A metric over a step range folded into at most `buckets` buckets, each with its steps, count, min,
        max, mean and NaN/Inf count; and over the range: min, max, last value, NaN/Inf count and the first
        step with one. Use it to see a curve's shape (a collapse, a spike, a divergence) without its points."""
        return answered(lambda: history.metric_history(reach, run, metric, start_step, end_step, buckets, agent))

    @server.tool(annotations=READ)
    def rollouts(run: Run, step: Annotated[int | None, Field(ge=0, description="the step (default: the latest "
                                                                                "with rollouts)")] = None,
                 limit: Annotated[int, Field(ge=1, le=samples.MAX_ROWS, description="rows shown at most")] = 8,
                 chars: Annotated[int, Field(ge=1, le=samples.MAX_CHARS,
                                             description="each text cut at this many characters")] = 2000,
                 agent: AgentUrl = None) -> CallToolResult:
        """A step's sample rollouts (prompt, completion or chat, reward, advantage...), with the step's mean
        reward and how many GRPO groups have all rewards equal."""
        return answered(lambda: samples.rollouts(reach, run, step, limit, chars, agent))

    @server.tool(annotations=READ)
    def search_rollouts(run: Run, words: Annotated[str, Field(description='words every row found holds; "a '
                                                                           'phrase" in quotes, word* a prefix')],
                        in_prompt: Annotated[bool, Field(description="search the prompts only")] = False,
                        limit: Annotated[int, Field(ge=1, le=samples.MAX_ROWS, description="rows at most")] = 10,
                        chars: Annotated[int, Field(ge=1, le=samples.MAX_CHARS,
                                                    description="each text cut at this many characters")] = 1000,
                        agent: AgentUrl = None) -> CallToolResult:
        """Rollout rows of every step whose prompt or completion holds the words, newest first."""
        return answered(lambda: samples.search_rollouts(reach, run, words, in_prompt, limit, chars, agent))

    @server.tool(annotations=READ)
    def events(run: Run, limit: Annotated[int, Field(ge=1, le=reads.MAX_EVENTS, description="last events")] = 20,
               agent: AgentUrl = None) -> CallToolResult:
        """A run's audit trail, its last events as sentences: status changes, commands and who sent them, the
        trainer's answers, checkpoints, alerts."""
        return answered(lambda: reads.events(reach, run, limit, agent))

    @server.tool(annotations=READ)
    def alerts(run: Annotated[str | None, Field(description="only this run's (default: every run's)")] = None,
               limit: Annotated[int, Field(ge=1, le=reads.MAX_ALERTS, description="alerts listed at most")] = 20,
               agent: AgentUrl = None) -> CallToolResult:
        """Firing alerts, the latest alert changes, and the alert rules."""
        return answered(lambda: reads.alerts(reach, run, limit, agent))

    steer_note = "" if allow_steer else " (off: this server was started without --allow-steer)"

    @server.tool(annotations=STEER, description=f"Pause a run at its next step boundary{steer_note}.")
    def pause(run: Run, agent: AgentUrl = None) -> CallToolResult:
        return answered(lambda: steering.pause(run, agent))

    @server.tool(annotations=STEER, description=f"Resume a paused run{steer_note}.")
    def resume(run: Run, agent: AgentUrl = None) -> CallToolResult:
        return answered(lambda: steering.resume(run, agent))

    @server.tool(annotations=STEER, description=f"Ask a run to save a checkpoint now; the answer names the file"
                                                f"{steer_note}.")
    def checkpoint(run: Run, agent: AgentUrl = None) -> CallToolResult:
        return answered(lambda: steering.checkpoint(run, agent))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
                 description=f"Ask a run to stop at its next step boundary (it ends; it cannot be resumed from "
                             f"here){steer_note}.")
    def stop(run: Run, agent: AgentUrl = None) -> CallToolResult:
        return answered(lambda: steering.stop(run, agent))

    @server.tool(annotations=STEER, description=f"Change hyperparameters of a running run, all or none: the run's "
                                                f"schema checks each value, and the answer is the trainer's (applied "
                                                f"at a step, or rejected and why){steer_note}. run_summary lists "
                                                f"the tunable keys.")
    def set_hyperparameters(run: Run,
                            changes: Annotated[dict[str, Any], Field(description='each key\'s new value, like '
                                                                                 '{"lr": 0.0005}')],
                            at_step: Annotated[int | None, Field(ge=0, description="apply at this step instead of "
                                                                                   "the next")] = None,
                            agent: AgentUrl = None) -> CallToolResult:
        return answered(lambda: steering.set_hyperparameters(run, changes, at_step, agent))

    return server
