"""Lanes in a real StatusNotifier host (xfce4-panel, as xfce_host.py runs it): two
lanes each running a long job show both in the panel's menu; the `net` lane's Pause,
clicked in the Lanes submenu, holds that lane; each running job's Stop stops that job
and no other; a lane's Resume, Open folder and Retry failed, and Pause and Resume at
the top, each do what they say. The test acts as the panel over D-Bus (GetLayout,
then Event "clicked"), as KDE's and GNOME's hosts do. Every process started here is
killed by pid at the end.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass

import pytest
from helpers.opener import recording_opener
from helpers.processes import alive, wait_for
from test_sni_panel import (
    missing,
    start_app,
)
from xfce_host import registered_items

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")

MENU = "com.canonical.dbusmenu"
LONG = "#!/bin/sh\necho $$ > {started}\nexec sleep 300\n"  # its pid, then minutes of work


@dataclass(frozen=True)
class Row:
    id: int
    label: str
    rows: tuple[Row, ...]

    def find(self, *labels: str) -> Row | None:
        """The row reached through rows whose labels start with each of `labels`."""
        here: Row | None = self
        for start in labels:
            here = next((row for row in here.rows if row.label.startswith(start)), None)
            if here is None:
                return None
        return here

    def at(self, *labels: str) -> Row:
        found = self.find(*labels)
        assert found is not None, f"no row {' > '.join(labels)} in {self}"
        return found


def menu_call(env, bus_name: str, member: str, signature: str, body: list):
    """One call on the app's menu, as a host makes it, on the panel's bus."""
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus

    async def call():
        bus = await MessageBus(bus_address=env["DBUS_SESSION_BUS_ADDRESS"]).connect()
        try:
            reply = await bus.call(Message(destination=bus_name, path="/MenuBar",
                                           interface=MENU, member=member,
                                           signature=signature, body=body))
            assert reply.message_type == MessageType.METHOD_RETURN, reply.body
            return reply.body
        finally:
            bus.disconnect()

    return asyncio.run(call())


def as_row(node) -> Row:
    node_id, props, children = node
    label = props["label"].value.replace("__", "_") if "label" in props else "-"
    return Row(node_id, label, tuple(as_row(child.value) for child in children))


def menu(env, bus_name: str) -> Row:
    """The whole menu as a host sees it when it opens (AboutToShow, then GetLayout)."""
    menu_call(env, bus_name, "AboutToShow", "i", [0])
    _revision, root = menu_call(env, bus_name, "GetLayout", "iias", [0, -1, ["label"]])
    return as_row(root)


def click(env, bus_name: str, row: Row) -> None:
    from dbus_fast import Variant

    menu_call(env, bus_name, "Event", "isvu", [row.id, "clicked", Variant("s", ""), 0])


def drop(home, lane_folder, name: str, text: str) -> None:
    """A whole file renamed into a lane's folder, as the README advises."""
    staged = home.root.parent / f"staged-{name}"
    staged.write_text(text)
    os.rename(staged, lane_folder / name)


def job_named(home, name: str):
    with Queue(home.db) as queue:  # one read: a job moving between states is not missed
        return next((job for job in queue.jobs() if job.name == name), None)


def state_of(home, name: str) -> State | None:
    job = job_named(home, name)
    return job.state if job else None


def test_two_lanes_run_side_by_side_and_the_net_lanes_pause_holds_it(
        panel, pids, tmp_path):
    home = locate(tmp_path / "home").ensure()
    net = home.lane_folder("net")
    net.mkdir()
    bin_dir, opened = recording_opener(tmp_path)  # the desktop's opener
    start_app(home, {**panel, "PATH": f"{bin_dir}:{panel['PATH']}"}, pids)
    [bus_name] = re.findall(r"(:[0-9.]+)/StatusNotifierItem", registered_items(panel))

    started = {name: tmp_path / f"{name}.pid" for name in ("backup", "fetch_mail")}
    drop(home, home.jobs, "backup.sh", LONG.format(started=started["backup"]))
    drop(home, net, "fetch_mail.sh", LONG.format(started=started["fetch_mail"]))
    children = {name: pids.add(int(wait_for(lambda path=path: path.exists()
                                            and path.read_text().strip(),
                                            what=f"{name} to start")))
                for name, path in started.items()}

    # Both run at once, each with its own line naming its lane
    def running_lines() -> list[str]:
        return [row.label.split(" (")[0] for row in menu(panel, bus_name).rows
                if "Running" in row.label]

    wait_for(lambda: running_lines() == ["main: Running backup", "net: Running fetch_mail"],
             what="the menu to show both running jobs", every=0.1)

    # Lanes > net > Pause holds that lane, and only that lane
    click(panel, bus_name, menu(panel, bus_name).at("Lanes", "net", "Pause"))
    with Queue(home.db) as queue:
        wait_for(lambda: queue.paused("net"), what="the net lane to pause")
        assert not queue.paused("main") and not queue.paused()
    wait_for(lambda: menu(panel, bus_name).find("Lanes", "net (paused)", "Resume"),
             what="the net lane's row to offer Resume", every=0.1)

    # Each running job's Stop stops that job, and no other
    click(panel, bus_name, menu(panel, bus_name).at("net: Running fetch_mail", "Stop"))
    wait_for(lambda: state_of(home, "fetch_mail") == State.CANCELLED, what="net's Stop")
    wait_for(lambda: not alive(children["fetch_mail"]), what="fetch_mail's process to end")
    assert state_of(home, "backup") == State.RUNNING and alive(children["backup"])
    click(panel, bus_name, menu(panel, bus_name).at("main: Running backup", "Stop"))
    wait_for(lambda: state_of(home, "backup") == State.CANCELLED, what="main's Stop")

    # Both lanes free now: a drop into net waits, one into the jobs folder runs
    drop(home, net, "held.sh", "#!/bin/sh\necho held\n")
    wait_for(lambda: state_of(home, "held") == State.PENDING, what="net's drop to be queued")
    drop(home, home.jobs, "free.sh", "#!/bin/sh\necho free\n")
    wait_for(lambda: state_of(home, "free") == State.DONE, what="main's drop to run")
    assert job_named(home, "held").lane == "net"
    assert state_of(home, "held") == State.PENDING, "a paused lane started a job"
    wait_for(lambda: menu(panel, bus_name).find("net: 1 waiting · paused"),
             what="the net lane's line to say it holds a job", every=0.1)

    # Lanes > net > Resume lets its job run; Open folder opens that lane's folder
    click(panel, bus_name, menu(panel, bus_name).at("Lanes", "net (paused)", "Resume"))
    wait_for(lambda: state_of(home, "held") == State.DONE, what="the resumed lane's job")
    click(panel, bus_name, menu(panel, bus_name).at("Lanes", "net", "Open folder"))
    wait_for(lambda: opened.exists() and str(net) in opened.read_text().splitlines(),
             what="Open folder to open the net lane's folder")

    # A failure in net: that lane's Retry failed runs it again
    drop(home, net, "broken.sh", "#!/bin/sh\n# sloth: max_attempts=1\nexit 3\n")
    wait_for(lambda: menu(panel, bus_name).find("Failed jobs (1)"),
             what="the failure in the menu", every=0.1)
    click(panel, bus_name, menu(panel, bus_name).at("Lanes", "net", "Retry failed"))
    with Queue(home.db) as queue:
        broken = job_named(home, "broken").id
        wait_for(lambda: "retried" in [e.kind for e in queue.history(broken)],
                 what="Retry failed to retry net's failed job")

    # Pause and Resume at the top act on every lane
    click(panel, bus_name, menu(panel, bus_name).at("Pause"))
    with Queue(home.db) as queue:
        wait_for(queue.paused, what="the top Pause to pause every lane")
        assert queue.paused("net") and queue.paused("main")
    wait_for(lambda: menu(panel, bus_name).find("Resume"), what="the top row to say Resume",
             every=0.1)
    click(panel, bus_name, menu(panel, bus_name).at("Resume"))
    with Queue(home.db) as queue:
        wait_for(lambda: not queue.paused(), what="the top Resume to resume every lane")
        assert not queue.paused("net") and not queue.paused("main")
