"""The MCP server on stdio (the `mcp` SDK's low-level Server): the tools of schemas.py
done by tools.py, the jobs as resources, and their changes told to subscribers.

stdout is the protocol's alone: the SDK's stdio transport moves fd 1 onto stderr while
it serves, writing the protocol through a copy of its own, so nothing printed (and no
process started) can reach it; this process's log goes to stderr and logs/mcp.log.

Waiting costs nothing: `wait_job` and the subscriptions sleep on the queue's change
signal, daemon/follow.py's `Changes` (what `sloth-tray wait` blocks on: inotify on the
queue file, no timeout), blocked in a thread of its own and told to the event loop.
A client's cancellation of a wait ends the wait (the SDK cancels the call), never a job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from sloth_tray import __version__
from sloth_tray.errors import SlothError
from sloth_tray.mcp import schemas, tools
from sloth_tray.paths import Home
from sloth_tray.text import printable

log = logging.getLogger("sloth_tray")

RESOURCE_NOT_FOUND = -32002  # the protocol's code for a resource that is not there
LOG_BYTES, LOG_BACKUPS = 1024 * 1024, 2
UNNAMED_CLIENT = "an MCP client"
INSTRUCTIONS = (
    "sloth-tray runs long jobs in the background on this computer, one at a time per "
    "lane, and they survive sleep, crashes and restarts. Hand a job over with add_job "
    "(always with a key: the same key again returns the same job, never a second one), "
    "then wait_job or get_job with its id. A job id stays valid until the job is pruned.")


class QueueSignal:
    """The queue file's changes as a number that grows with each (`generation`), for
    the event loop to wait on. Started by the first wait or subscription: its watch is
    set before that caller's first look, so no change between the two is missed."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.generation = 0
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        from sloth_tray.daemon.follow import Changes
        from sloth_tray.store import reads

        # Held open from now on: when the last connection to the file closes, SQLite
        # checkpoints and deletes its WAL, and the next opening makes it again. With no
        # app holding it, each look after a change (a connection opened and closed)
        # would be a change of its own: a loop. `wait` holds its queue open the same way.
        self._held = reads.reader(self.home.db)
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        changes = Changes(self.home)
        self._thread = threading.Thread(target=self._watch, args=(changes,),
                                        name="queue-changes", daemon=True)
        self._thread.start()

    def _watch(self, changes: Any) -> None:
        while True:
            changes.wait()  # blocked with no timeout while nothing changes
            try:
                self._loop.call_soon_threadsafe(self._bump)
            except RuntimeError:  # the loop has closed: the server is ending
                return

    def _bump(self) -> None:
        self.generation += 1
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def after(self, generation: int) -> None:
        """Return once the queue changed after `generation` was read."""
        while self.generation == generation:
            await self._event.wait()


def source_of(ctx: Any) -> str:
    """The client's name as `initialize` gave it (its title, else its name)."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    name = (getattr(info, "title", None) or getattr(info, "name", None)) if info else None
    name = " ".join(str(name or "").split())[:100]
    return name or UNNAMED_CLIENT


def _text_result(data: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data, is_error=error)


def _error(sentence: str, **more: Any) -> types.CallToolResult:
    """A tool's error: one sentence, for the model to read and act on."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=sentence)],
                                structured_content={"error": sentence, **more}, is_error=True)


def _progress_message(jobs: list[dict[str, Any]], ended: int) -> str:
    def one(job: dict[str, Any]) -> str:
        step = f" in step {job['step']}" if job.get("step") else ""
        return f"{job['name']}: {job['state']}{step}"

    return f"{ended} of {len(jobs)} ended; " + "; ".join(one(job) for job in jobs)


class Agents:
    """One server's state: its home, the change signal, the subscriptions."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.signal = QueueSignal(home)
        # uri -> [job id, the session to tell, the job's fingerprint when last told]
        self.subscriptions: dict[str, list[Any]] = {}
        self._task_group: Any = None
        self._telling = False

    def server(self) -> Server:
        server = Server("sloth-tray", version=__version__, title="sloth-tray",
                        instructions=INSTRUCTIONS, lifespan=self._lifespan,
                        on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                        on_list_resources=self.list_resources,
                        on_list_resource_templates=self.list_templates,
                        on_read_resource=self.read_resource,
                        on_subscribe_resource=self.subscribe,
                        on_unsubscribe_resource=self.unsubscribe)
        server.middleware = []  # no tracing: nothing here exports spans
        return server

    @asynccontextmanager
    async def _lifespan(self, server: Server) -> Any:
        async with anyio.create_task_group() as group:
            self._task_group = group
            yield {}
            group.cancel_scope.cancel()

    # -- tools -------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=name, description=tool["description"],
                       input_schema=tool["input_schema"],
                       annotations=types.ToolAnnotations(
                           read_only_hint=tool["read_only"],
                           destructive_hint=name == "cancel_job",
                           idempotent_hint=tool["read_only"] or name == "add_job"))
            for name, tool in schemas.TOOLS.items()])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        name = params.name
        try:
            args = schemas.checked(name, params.arguments)
            if name == "wait_job":
                return _text_result(await self.wait_job(ctx, args))
            if name == "add_job":
                data = tools.add_job(self.home, args, source_of(ctx))
                if not data["already_added"]:
                    log.info("added %s (%s) for %s", data["name"], data["id"], source_of(ctx))
                return _text_result(data)
            return _text_result(tools.TOOLS[name](self.home, args))
        except tools.Partly as exc:
            return _error(printable(exc), results=exc.results)
        except SlothError as exc:
            return _error(printable(exc))
        except Exception as exc:  # a fault of ours: one sentence to the client, logged here
            log.error("%s failed: %s: %s", name, type(exc).__name__, exc)
            return _error(f"{name} could not be done: {type(exc).__name__}: {printable(exc)}")

    async def wait_job(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        ids = tools.resolve(self.home, args["ids"])
        timeout = float(args.get("timeout_s", schemas.WAIT_DEFAULT))
        self.signal.start()  # watched before the first look
        started = anyio.current_time()
        deadline = started + timeout
        said = None
        while True:
            generation = self.signal.generation
            jobs = tools.job_states(self.home, ids)
            ended = sum(job["state"] not in ("pending", "running") for job in jobs)
            message = _progress_message(jobs, ended)
            if message != said:  # a look after a change that changed nothing says nothing
                await ctx.session.report_progress(ended, len(jobs), message)
                said = message
            left = deadline - anyio.current_time()
            if ended == len(jobs) or left <= 0:
                break
            with anyio.move_on_after(left):
                await self.signal.after(generation)
        done = ended == len(jobs)
        return {"all_ended": done, "timed_out": not done, "jobs": jobs,
                "waited_s": round(anyio.current_time() - started, 3),
                "said": f"{ended} of {len(jobs)} ended" + ("" if done else
                                                          f" after {timeout:g} s; wait again")}

    # -- resources ----------------------------------------------------------------------

    async def list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=f"sloth://jobs/{job.id}", name=f"{job.name} ({job.id})",
                           description=f"the job, {job.state.value}, as JSON",
                           mime_type="application/json")
            for job in tools.recent(self.home)])

    async def list_templates(self, ctx: Any, params: Any
                             ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template="sloth://jobs/{id}", name="job",
                                   description="a job as JSON (as `sloth-tray show --json`)",
                                   mime_type="application/json"),
            types.ResourceTemplate(uri_template="sloth://jobs/{id}/log", name="job log",
                                   description="the output of a job's last run",
                                   mime_type="text/plain")])

    def _job_of(self, uri: str) -> tuple[str, bool]:
        """The job id a resource URI names (resolved), and whether it is the log."""
        match = tools.JOB_URI.fullmatch(str(uri))
        if match is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"no resource {str(uri)!r}: sloth-tray's are "
                                               "sloth://jobs/ID and sloth://jobs/ID/log")
        try:
            return tools.resolve(self.home, [match.group(1)])[0], bool(match.group(2))
        except SlothError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, printable(exc)) from None

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams
                            ) -> types.ReadResourceResult:
        job_id, is_log = self._job_of(params.uri)
        try:
            text = (tools.log_resource if is_log else tools.job_resource)(self.home, job_id)
        except SlothError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, printable(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=params.uri, text=text,
            mime_type="text/plain" if is_log else "application/json")])

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams
                        ) -> types.EmptyResult:
        job_id, _ = self._job_of(params.uri)
        self.signal.start()  # watched before the fingerprint is read
        mark = tools.fingerprints(self.home, {job_id}).get(job_id)
        self.subscriptions[str(params.uri)] = [job_id, ctx.session, mark]
        if not self._telling:
            self._telling = True
            self._task_group.start_soon(self._tell_subscribers)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams
                          ) -> types.EmptyResult:
        self.subscriptions.pop(str(params.uri), None)
        return types.EmptyResult()

    async def _tell_subscribers(self) -> None:
        """notifications/resources/updated for each subscribed job that changed, after
        each change of the queue file: nothing is looked at while nothing changes."""
        while True:
            generation = self.signal.generation
            await self.signal.after(generation)
            if not self.subscriptions:
                continue
            now = tools.fingerprints(self.home, {job for job, _, _ in
                                                 self.subscriptions.values()})
            for uri, entry in list(self.subscriptions.items()):
                job_id, session, mark = entry
                if now.get(job_id) == mark:
                    continue
                entry[2] = now.get(job_id)
                try:
                    await session.send_resource_updated(uri)
                except Exception as exc:  # that client is gone: it hears no more
                    log.info("stopped telling %s: %s", uri, exc)
                    self.subscriptions.pop(uri, None)


def setup_logging(home: Home) -> None:
    """This process's log: stderr (the client keeps it) and logs/mcp.log, never stdout."""
    from sloth_tray.daemon.logfile import QuietRotatingFileHandler

    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handlers = [logging.StreamHandler(sys.stderr)]
    if home.logs.is_dir():
        handlers.append(QuietRotatingFileHandler(home.logs / "mcp.log", max_bytes=LOG_BYTES,
                                                 backups=LOG_BACKUPS,
                                                 errors="backslashreplace"))
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)  # the SDK's own: its warnings only
    log.setLevel(logging.INFO)


def serve(home: Home) -> int:
    """Serve MCP on stdin and stdout until the client closes them."""
    from sloth_tray.store.access import sound_home

    try:
        sound_home(home)  # the home the tools write to; a problem is each tool's sentence
    except SlothError as exc:
        print(f"sloth-tray mcp: {printable(exc)}", file=sys.stderr)
    setup_logging(home)
    log.info("mcp server on %s", home.root)

    async def run() -> None:
        server = Agents(home).server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
    return 0
