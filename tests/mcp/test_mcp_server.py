"""`sloth-tray mcp` through the SDK's own client (ClientSession over stdio_client), against
a real server process and a real headless app running real jobs. One app and one
client for the module; the tests that need more start their own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from helpers.processes import Pids, start_daemon, wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client, types  # noqa: E402

CLIENT = types.Implementation(name="claude-ai", title="Claude Desktop", version="1.0")


@asynccontextmanager
async def connected(home, client=CLIENT, notes=None):
    """An initialized session with a `sloth-tray mcp` process on `home`."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "sloth_tray", "mcp", "--home", str(home.root)],
                                   env=dict(os.environ))

    async def heard(message):
        if notes is not None:
            notes.append(getattr(message, "root", message))

    async with stdio_client(params) as (read, write), \
            ClientSession(read, write, client_info=client, message_handler=heard) as session:
        await session.initialize()
        yield session


class Client:
    """A session driven from the test's thread through a portal."""

    def __init__(self, portal, session, notes):
        self.portal, self.session, self.notes = portal, session, notes

    def call(self, tool, arguments=None, **options):
        return self.portal.call(lambda: self.session.call_tool(tool, arguments or {},
                                                               **options))

    def ok(self, tool, arguments=None, **options):
        result = self.call(tool, arguments, **options)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    def error(self, tool, arguments=None):
        result = self.call(tool, arguments)
        assert result.is_error, result.structured_content
        sentence = result.content[0].text
        assert "\n" not in sentence and "Traceback" not in sentence
        return sentence


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(home, the app, a client): one for the module; every process killed at the end."""
    home = locate(tmp_path_factory.mktemp("mcp") / "home").ensure()
    pids = Pids()
    notes: list = []
    try:
        app = start_daemon(pids, home)
        with start_blocking_portal() as portal, \
                portal.wrap_async_context_manager(connected(home, notes=notes)) as session:
            yield home, pids, app, Client(portal, session, notes)
    finally:
        pids.cleanup()


def jobs_in(home):
    with Queue(home.db) as queue:
        return queue.jobs()


def test_a_command_added_runs_and_wait_job_returns_as_it_ends(world, tmp_path):
    home, _, _, client = world
    added = client.ok("add_job", {"command": ["sh", "-c", "echo hello; echo oops >&2"],
                                  "name": "greet", "key": "greet-1", "cwd": str(tmp_path)})
    assert added["state"] in ("pending", "running", "done") and added["app_running"] is True
    assert added["starts"].startswith(("now", "no more")) and not added["already_added"]
    started = time.monotonic()
    waited = client.ok("wait_job", {"ids": [added["id"]], "timeout_s": 30})
    assert waited["all_ended"] and time.monotonic() - started < 10
    assert [job["state"] for job in waited["jobs"]] == ["done"]
    got = client.ok("get_job", {"id": added["id"]})
    assert got["state"] == "done" and "hello" in got["log_tail"] and "oops" in got["log_tail"]
    assert got["source"] == "Claude Desktop" and got["key"] == "greet-1"
    assert got["run"]["started_at"] <= got["run"]["ended_at"]
    log = client.ok("job_log", {"id": "greet"})  # a name names its newest job
    assert "hello" in log["text"] and log["run"] == 1
    listed = client.ok("list_jobs", {"name": "greet", "state": "done"})["jobs"]
    assert [job["id"] for job in listed] == [added["id"]]
    shell = subprocess.run([sys.executable, "-m", "sloth_tray", "list", "--json", "--home",
                            str(home.root)], capture_output=True, text=True, check=True)
    assert {job["id"]: job["source"] for job in json.loads(shell.stdout)}[added["id"]] == \
        "Claude Desktop"


def test_a_run_that_printed_nothing_has_an_empty_log_and_one_that_never_began_says_why(
        world, tmp_path):
    home, _, _, client = world
    quiet = client.ok("add_job", {"command": ["true"], "name": "quiet", "cwd": str(tmp_path)})
    gone = tmp_path / "gone"
    gone.mkdir()
    never = client.ok("add_job", {"command": ["true"], "name": "never", "cwd": str(gone),
                                  "delay": "1h"})
    gone.rmdir()  # before it runs: then it cannot start
    subprocess.run([sys.executable, "-m", "sloth_tray", "run-now", never["id"], "--home",
                    str(home.root)], capture_output=True, check=True)
    ended = client.ok("wait_job", {"ids": [quiet["id"], never["id"]], "timeout_s": 30})
    assert [job["state"] for job in ended["jobs"]] == ["done", "failed"]
    log = client.ok("job_log", {"id": quiet["id"]})
    assert (log["text"], log["size"], log["run"]) == ("", 0, 1)
    assert client.ok("get_job", {"id": quiet["id"]})["log_tail"] == ""
    said = client.error("job_log", {"id": never["id"]})
    assert said.startswith(f"run 1 of never ({never['id']}) left no log: cannot start the "
                           "job: its working folder "), said


def test_wait_job_ends_on_time_with_each_state_and_tells_its_progress(world, tmp_path):
    _, _, _, client = world
    flag = tmp_path / "go"
    slow = client.ok("add_job", {"command": ["sh", "-c", f"while [ ! -e {flag} ]; do "
                                                         "sleep 0.05; done"],
                                 "lane": "slow", "key": "slow-1"})["id"]
    heard = []

    async def progress(done, total, message):
        heard.append((done, total, message))

    started = time.monotonic()
    waited = client.ok("wait_job", {"ids": [slow], "timeout_s": 1.5}, progress_callback=progress)
    took = time.monotonic() - started
    assert waited["timed_out"] and not waited["all_ended"] and 1.4 < took < 5
    assert waited["jobs"][0]["state"] in ("pending", "running")
    assert heard and heard[0][:2] == (0, 1) and "0 of 1 ended" in heard[0][2]
    flag.touch()
    heard.clear()
    waited = client.ok("wait_job", {"ids": [slow]}, progress_callback=progress)
    assert waited["all_ended"] and waited["jobs"][0]["state"] == "done"
    assert heard[-1][:2] == (1, 1) and heard[-1][2].startswith("1 of 1 ended")


def test_a_cancelled_wait_ends_the_wait_never_the_job(world, tmp_path):
    _, _, _, client = world
    flag = tmp_path / "go"
    job = client.ok("add_job", {"command": ["sh", "-c", f"while [ ! -e {flag} ]; do "
                                                        "sleep 0.05; done"],
                                "lane": "held", "key": "held-1"})["id"]
    waiting = client.portal.start_task_soon(
        lambda: client.session.call_tool("wait_job", {"ids": [job], "timeout_s": 50}))
    time.sleep(0.3)  # the call is in flight (nothing to wait on from here)
    waiting.cancel()
    started = time.monotonic()
    assert client.ok("queue_status")["app_running"] is True  # the server answers at once
    assert time.monotonic() - started < 5
    assert client.ok("get_job", {"id": job})["state"] in ("pending", "running")
    flag.touch()
    assert client.ok("wait_job", {"ids": [job], "timeout_s": 30})["jobs"][0]["state"] == "done"


STEPS = """#!/bin/sh
sloth-tray step fetch -- sh -c 'echo fetched >> {count}; echo thread'
sloth-tray step --ask summarise -- sh -c 'while [ ! -e {flag} ]; do sleep 0.05; done; echo summary'
sloth-tray step post -- echo posted
"""


def test_a_keyed_job_survives_a_kill_of_the_app_and_its_steps_run_once(world, tmp_path):
    home, pids, app, client = world
    count, flag = tmp_path / "fetches", tmp_path / "go"
    hand_off = {"script": STEPS.format(count=count, flag=flag), "name": "summarise the thread",
                "key": "thread-1234", "lane": "agent", "max_attempts": 3}
    job = client.ok("add_job", hand_off)["id"]
    wait_for(lambda: client.ok("get_job", {"id": job})["steps"][-1:]
             and client.ok("get_job", {"id": job})["steps"][-1]["name"] == "summarise",
             what="the job to reach its second step")
    again = client.ok("add_job", hand_off)  # the agent's call timed out: it adds again
    assert again["id"] == job and again["already_added"]
    os.kill(app.pid, signal.SIGKILL)  # the lid closed, the battery died
    app.wait(timeout=10)
    start_daemon(pids, home)
    failed = client.ok("wait_job", {"ids": [job], "timeout_s": 30})["jobs"][0]
    assert (failed["state"], failed["reason"]) == ("failed", "step_unsure")
    assert client.ok("add_job", hand_off)["id"] == job  # after the restart too
    client.error("answer_step", {"id": job, "happened": True, "step": "fetch"})
    flag.touch()
    answered = client.ok("answer_step", {"id": job, "happened": False})
    assert answered["step"] == "summarise"
    done = client.ok("wait_job", {"ids": [job], "timeout_s": 30})["jobs"][0]
    assert done["state"] == "done"
    assert count.read_text() == "fetched\n"  # the step done before the kill never ran again
    steps = {step["name"]: step["state"] for step in client.ok("get_job", {"id": job})["steps"]}
    assert steps == {"fetch": "done", "summarise": "done", "post": "done"}
    assert [j.id for j in jobs_in(home) if j.key == "thread-1234"] == [job]


def test_a_jobs_question_is_read_with_get_job_and_answered_with_answer_step(world, tmp_path):
    _, _, _, client = world
    said = tmp_path / "said"
    asks = client.ok("add_job", {"lane": "asks", "script": (
        "#!/bin/sh\n"
        f"sloth-tray ask 'Pay for the model call?' --choices go,stop > {said}\n")})["id"]
    wait_for(lambda: client.ok("get_job", {"id": asks})["waiting_for"], timeout=30,
             what="the job to ask")
    job = client.ok("get_job", {"id": asks})
    assert job["state"] == "pending"
    assert job["waiting_for"] == {"kind": "answer", "until": None, "default": None,
                                  "question": "Pay for the model call?",
                                  "choices": ["go", "stop"]}
    # Not a choice, both kinds of answer, or neither: one sentence, nothing changes.
    assert "not an answer" in client.error("answer_step", {"id": asks, "choice": "maybe"})
    assert "one of the two" in client.error("answer_step", {"id": asks, "choice": "go",
                                                            "happened": True})
    assert "one of the two" in client.error("answer_step", {"id": asks})
    answered = client.ok("answer_step", {"id": asks, "choice": "stop"})
    assert (answered["id"], answered["choice"]) == (asks, "stop")
    done = client.ok("wait_job", {"ids": [asks], "timeout_s": 30})["jobs"][0]
    assert done["state"] == "done" and said.read_text() == "stop\n"
    assert client.ok("get_job", {"id": asks})["waiting_for"] is None
    assert "not asking" in client.error("answer_step", {"id": asks, "choice": "go"})


def test_retry_and_cancel_and_their_refusals(world, tmp_path):
    _, _, _, client = world
    failing = client.ok("add_job", {"command": ["sh", "-c", "exit 3"], "max_attempts": 1,
                                    "key": "fails-1", "lane": "retry"})["id"]
    ended = client.ok("wait_job", {"ids": [failing], "timeout_s": 30})["jobs"][0]
    assert (ended["state"], ended["reason"]) == ("failed", "exit_code")
    assert client.ok("retry_job", {"ids": [failing], "fresh": True})["results"][0]["ok"]
    client.ok("wait_job", {"ids": [failing], "timeout_s": 30})
    assert client.ok("cancel_job", {"ids": [failing]})["results"][0]["ok"]
    sentence = client.error("cancel_job", {"ids": [failing]})
    assert sentence.endswith("is cancelled; nothing to cancel")
    later = client.ok("add_job", {"command": ["true"], "delay": "1h", "key": "later-1"})["id"]
    assert "run-now" in client.error("retry_job", {"ids": [later]})
    client.ok("cancel_job", {"ids": [later]})
    assert "one of" in client.error("retry_job", {"ids": [later], "fresh": True,
                                                  "from_step": "x"})


@pytest.mark.parametrize("arguments, said", [
    ({"command": ["true"], "script": "#!/bin/sh\ntrue\n"}, "not both"),
    ({}, "give `command`"),
    ({"command": ["true"], "every": "sometimes"}, "every"),
    ({"command": ["true"], "cron": "61 * * * *"}, "cron"),
    ({"script": "#!/bin/sh\n" + "#" * (1024 * 1024)}, "at most 1 MiB"),
    ({"script": "echo no shebang"}, "#! line"),
    ({"command": ["true"], "lane": "../up"}, "cannot name a lane"),
    ({"command": ["true"], "key": "k" * 201}, "a key is at most 200 characters"),
    ({"command": "true"}, "`command` is a list"),
    ({"command": ["true"], "max_attempts": "three"}, "a whole number"),
    ({"command": ["true"], "colour": "red"}, "takes no argument 'colour'"),
    ({"command": ["true"], "cwd": "/no/such/folder"}, "is not a folder"),
])
def test_bad_input_is_one_sentence_and_the_server_stays_up(world, arguments, said):
    home, _, _, client = world
    before = len(jobs_in(home))
    assert said in client.error("add_job", arguments)
    assert len(jobs_in(home)) == before
    assert client.ok("queue_status")["app_running"] is True


@pytest.mark.parametrize("tool, arguments, said", [
    ("get_job", {"id": "0123456789ab"}, "no job has the id or name"),
    ("wait_job", {"ids": ["nope"]}, "no job has the id or name"),
    ("wait_job", {"ids": ["nope"], "timeout_s": 56}, "between 0 and 55"),
    ("job_log", {"id": 12}, "`id` is text"),
    ("list_jobs", {"limit": 201}, "between 1 and 200"),
    ("list_jobs", {"state": "sleeping"}, "one of pending"),
    ("answer_step", {"id": "x"}, "`choice` (for a job that asks a question) or `happened`"),
    ("no_such_tool", {}, "there is no tool"),
])
def test_every_tools_bad_input_is_a_tool_error(world, tool, arguments, said):
    _, _, _, client = world
    assert said in client.error(tool, arguments)
    assert client.ok("list_jobs", {"limit": 1}) is not None


def test_ten_megabytes_of_binary_output_leave_the_stream_valid(world, tmp_path):
    _, _, _, client = world
    noisy = client.ok("add_job", {"command": ["sh", "-c", "head -c 10000000 /dev/urandom; "
                                                          "printf '\\033[2J\\000end'"],
                                  "key": "noisy-1", "lane": "noisy"})["id"]
    assert client.ok("wait_job", {"ids": [noisy], "timeout_s": 50})["jobs"][0]["state"] == "done"
    got = client.ok("get_job", {"id": noisy, "log_tail_bytes": 65536})
    assert got["log_tail"].endswith("\x1b[2J\x00end") and got["log_truncated"]
    log = client.ok("job_log", {"id": noisy, "tail_bytes": 65536})
    assert len(log["text"].encode("utf-8")) <= 3 * 65536 and log["size"] > 10_000_000
    read = client.portal.call(lambda: client.session.read_resource(f"sloth://jobs/{noisy}/log"))
    assert read.contents[0].text.endswith("end")
    assert client.ok("queue_status")["running"] >= 0  # the stream still carries calls


# resources/subscribe is the handshake era's way (Claude Desktop's, Claude Code's); the SDK
# warns that the 2026-07-28 era replaces it with subscriptions/listen.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_resources_and_a_subscription_told_of_each_change(world, tmp_path):
    _, _, _, client = world
    flag = tmp_path / "go"
    job = client.ok("add_job", {"command": ["sh", "-c", f"while [ ! -e {flag} ]; do "
                                                        "sleep 0.05; done; echo finished"],
                                "key": "watched-1", "lane": "watched"})["id"]
    uri = f"sloth://jobs/{job}"
    read = client.portal.call(lambda: client.session.read_resource(uri))
    assert json.loads(read.contents[0].text)["id"] == job
    templates = client.portal.call(client.session.list_resource_templates)
    assert {t.uri_template for t in templates.resource_templates} == \
        {"sloth://jobs/{id}", "sloth://jobs/{id}/log"}
    client.notes.clear()
    client.portal.call(lambda: client.session.subscribe_resource(uri))

    def told():
        return [note for note in client.notes
                if isinstance(note, types.ResourceUpdatedNotification) and note.params.uri == uri]

    flag.touch()
    wait_for(lambda: json.loads(client.portal.call(
        lambda: client.session.read_resource(uri)).contents[0].text)["state"] == "done",
        what="the job to end")
    wait_for(told, what="notifications/resources/updated")
    log = client.portal.call(lambda: client.session.read_resource(uri + "/log"))
    assert "finished" in log.contents[0].text
    with pytest.raises(mcp.MCPError):
        client.portal.call(lambda: client.session.read_resource("sloth://jobs/0123456789ab"))


def test_two_clients_adding_one_key_at_once_make_one_job(world):
    home, _, _, _ = world

    async def both():
        found = []

        async def one(name):
            client = types.Implementation(name=name, version="1")
            async with connected(home, client) as session:
                result = await session.call_tool("add_job", {"command": ["true"],
                                                             "key": "raced-1"})
                found.append(result.structured_content["id"])

        async with anyio.create_task_group() as group:
            group.start_soon(one, "cursor")
            group.start_soon(one, "vscode")
        return found

    ids = anyio.run(both)
    assert len(set(ids)) == 1
    assert [job.id for job in jobs_in(home) if job.key == "raced-1"] == ids[:1]


def test_a_server_killed_between_the_add_and_its_reply_leaves_one_job(world):
    home, pids, _, client = world
    server = pids.popen([sys.executable, "-m", "sloth_tray", "mcp", "--home", str(home.root)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "crashy", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "add_job", "arguments": {"command": ["true"],
                                                         "key": "killed-1"}}}):
        server.stdin.write(json.dumps(message).encode() + b"\n")
    server.stdin.flush()
    first = wait_for(lambda: [job.id for job in jobs_in(home) if job.key == "killed-1"],
                     what="the add to commit")
    os.kill(server.pid, signal.SIGKILL)  # its reply never read: the agent will add again
    server.wait(timeout=10)
    again = client.ok("add_job", {"command": ["true"], "key": "killed-1"})
    assert again["id"] == first[0] and again["already_added"]
    assert [job.id for job in jobs_in(home) if job.key == "killed-1"] == first


def test_without_the_extra_it_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['mcp'] = None; sys.argv = ['sloth-tray', 'mcp', "
            f"'--home', {str(tmp_path / 'home')!r}]\nfrom sloth_tray.cli import main\n"
            "sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("sloth-tray mcp: the MCP server needs the mcp extra: "
                           "pip install 'sloth-tray[mcp]'\n")
    assert not Path(tmp_path / "home").exists()


def readme_servers() -> list[tuple[str, list[str]]]:
    """(command, args) of each MCP config snippet in the README's Agents section."""
    import re

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Agents (MCP)", 1)[1].split("\n## ", 1)[0]
    found = []
    for block in re.findall(r"```json\n(.*?)```", section, re.S):
        config = json.loads(block)
        for entry in (config.get("mcpServers") or config.get("servers") or {}).values():
            found.append((entry["command"], entry["args"]))
    for line in re.findall(r"^claude mcp add .*$", section, re.M):
        words = line.split(" -- ", 1)[1].split()
        found.append((words[0], words[1:]))
    return found


def test_each_config_snippet_in_the_readme_starts_the_server_as_written(tmp_path):
    snippets = readme_servers()
    assert len(snippets) == 3  # Claude Desktop (and Cursor), Claude Code, VS Code
    env = {**os.environ, "SLOTH_TRAY_HOME": str(tmp_path / "home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    async def start(command, args):
        params = StdioServerParameters(command=command, args=args, env=env)
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, client_info=CLIENT) as session:
            info = await session.initialize()
            return info.server_info.name, len((await session.list_tools()).tools)

    for command, args in snippets:
        assert anyio.run(start, command, args) == ("sloth-tray", 9)


def switches(pid: int) -> int:
    """Context switches of every thread of the process so far (its wake-ups)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as status:
            total += sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_wait_in_flight_with_no_app_costs_nothing(tmp_path, pids):
    """No app holds the file: each look of the wait, were it to open and close the
    last connection, would delete and make the WAL again, a change of its own: a loop."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    import mcp_bench

    home = locate(tmp_path / "home").ensure()
    wire = mcp_bench.Wire(home.root, dict(os.environ))
    pids.procs.append(wire.popen)
    pids.add(wire.pid)
    wire.initialize()
    later = wire.tool("add_job", {"command": ["true"], "key": "later", "delay": "1h"})["id"]
    threads = len(os.listdir(f"/proc/{wire.pid}/task"))
    wire.send("tools/call", {"name": "wait_job", "arguments": {"ids": [later],
                                                               "timeout_s": 30}})
    wait_for(lambda: len(os.listdir(f"/proc/{wire.pid}/task")) > threads,
             what="the wait's watch to start")
    time.sleep(0.5)  # its first looks after the start (follow.SETTLE's) are behind it
    before = switches(wire.pid)
    time.sleep(1.0)  # the window measured, not a wait for a condition
    assert switches(wire.pid) - before < 20
