"""A real ``pilothouse mcp`` server process, talked to by the official MCP client over stdio, for
synchronous tests: ``McpSession(args).call(tool, arguments)``.

The SDK's client is async and must live in the task that opened it; the session keeps it on an event
loop of its own thread for the test's whole module, so one server serves every test of a mode."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from .paths import ROOT


class McpSession:
    def __init__(self, args: list[str], env: dict[str, str] | None = None, timeout: float = 60.0):
        self.params = StdioServerParameters(command=sys.executable, args=["-m", "pilothouse", "mcp", *args],
                                            env={**os.environ, **(env or {})}, cwd=ROOT)
        self.timeout = timeout
        self.loop = asyncio.new_event_loop()
        self._client: Client | None = None
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise AssertionError("the MCP server did not start")
        if self._error is not None:
            raise AssertionError(f"the MCP server did not start: {self._error!r}")

    async def _serve(self) -> None:
        self._done = asyncio.Event()
        try:
            async with Client(self.params) as client:
                self._client = client
                self._ready.set()
                await self._done.wait()
        except BaseException as exc:  # noqa: BLE001 (said by the constructor or the next call)
            self._error = exc
            self._ready.set()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout)

    def tools(self) -> list[str]:
        assert self._client is not None
        return [t.name for t in self._run(self._client.list_tools()).tools]

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        assert self._client is not None, self._error
        return self._run(self._client.call_tool(tool, arguments or {}))

    def close(self) -> None:
        if self._done is not None:
            self.loop.call_soon_threadsafe(self._done.set)
        self._thread.join(30)


def text(result: CallToolResult) -> str:
    """The answer's first text (its sentence; the second holds the data as JSON)."""
    return result.content[0].text
