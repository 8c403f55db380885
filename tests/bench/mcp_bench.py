"""`sloth-tray mcp`, measured over its own wire (JSON-RPC lines on a pipe, no client
library in the way): start -> the `initialize` reply, the `add_job` round trip, and a
server with a `wait_job` in flight left idle (its wake-ups are read by compare.py).

Used by compare.py's `mcp` section; tests/bench is not a package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROTOCOL = "2025-06-18"  # a handshake version, as Claude Desktop and Claude Code speak
START_GOAL_MS = 1500.0
ADD_P50_GOAL_MS = 20.0


class Wire:
    """One `sloth-tray mcp` process and the lines to and from it."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.started = time.perf_counter()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "sloth_tray", "mcp", "--home", str(home)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self._next = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def send(self, method: str, params: dict[str, Any] | None = None, *,
             notify: bool = False) -> int | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self._next += 1
            message["id"] = self._next
        self.popen.stdin.write(json.dumps(message).encode() + b"\n")
        self.popen.stdin.flush()
        return message.get("id")

    def reply(self, request: int) -> dict[str, Any]:
        while True:
            line = self.popen.stdout.readline()
            if not line:
                raise RuntimeError("sloth-tray mcp closed its stdout")
            message = json.loads(line)
            if message.get("id") == request:
                if "error" in message:
                    raise RuntimeError(f"sloth-tray mcp: {message['error']}")
                return message["result"]

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.reply(self.send(method, params))

    def initialize(self) -> float:
        """The handshake; the ms from the process's start to the initialize reply."""
        self.call("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        took = 1000 * (time.perf_counter() - self.started)
        self.send("notifications/initialized", notify=True)
        return took

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.call("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{name}: {result['content'][0]['text']}")
        return result["structuredContent"]


def add_round_trips(home: Path, env: dict[str, str], reaper: Any, adds: int,
                    key: str = "bench") -> list[float]:
    """`adds` add_job round trips, ms each, through a server of its own on `home`,
    stopped after."""
    wire = Wire(home, env)
    reaper.add(wire.pid, wire.popen)
    try:
        wire.initialize()
        return timed_adds(wire, adds, key)
    finally:
        reaper.stop(wire.pid)


def timed_adds(wire: Wire, adds: int, key: str) -> list[float]:
    """`adds` add_job round trips on `wire`, ms each: a command due in an hour, keyed."""
    times = []
    for n in range(adds):
        began = time.perf_counter()
        wire.tool("add_job", {"command": ["true"], "key": f"{key}-{n}", "delay": "1h"})
        times.append(1000 * (time.perf_counter() - began))
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def measure(root: Path, reaper: Any, *, starts: int, adds: int) -> tuple[dict[str, Any], Wire]:
    """Start -> initialize (median of `starts`), `adds` add_job round trips, then a
    server left with a wait_job in flight on a job due in an hour: the caller samples
    it idle and stops it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_TRAY_")}
    home = root / "home"
    root.mkdir(parents=True, exist_ok=True)
    start_ms = []
    for _ in range(starts):
        wire = Wire(home, env)
        reaper.add(wire.pid, wire.popen)
        start_ms.append(wire.initialize())
        reaper.stop(wire.pid)
    wire = Wire(home, env)
    reaper.add(wire.pid, wire.popen)
    wire.initialize()
    times = timed_adds(wire, adds, "bench")
    later = wire.tool("add_job", {"command": ["true"], "key": "bench-wait", "delay": "1h"})
    wire.send("tools/call", {"name": "wait_job", "arguments": {"ids": [later["id"]],
                                                               "timeout_s": 55}})
    start = sorted(start_ms)[len(start_ms) // 2]
    p50 = percentile(times, 0.5)
    return {"start_ms": start, "start_runs": start_ms, "add_p50_ms": p50,
            "add_p99_ms": percentile(times, 0.99), "adds": adds, "add_runs_ms": times,
            "goals": {"start_ms": START_GOAL_MS, "add_p50_ms": ADD_P50_GOAL_MS},
            "met": {"start": start <= START_GOAL_MS, "add_p50": p50 <= ADD_P50_GOAL_MS}}, wire
