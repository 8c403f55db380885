"""require=ac,network,unmetered: a due job waits (pending, no attempt used) while its
condition does not hold, and starts as soon as it does. The queue's claim filter with an
injected clock; the header; and UPower and NetworkManager faked on a private bus."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
import threading
import time

import pytest
from dbus_fast.annotations import DBusBool, DBusUInt32
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_property
from helpers.bus import start_private_bus
from helpers.processes import mapped, wait_for

from sloth_tray import cli
from sloth_tray.daemon.alarm import Alarm, make_alarm
from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.snapshot import Snapshot
from sloth_tray.errors import SlothError
from sloth_tray.jobs.conditions import Conditions, parse_require, waiting_for
from sloth_tray.jobs.header import BadJobFile, parse_options
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State
from sloth_tray.tray.presenter import waiting_label

AC = frozenset({"ac"})


# -- the header ------------------------------------------------------------------------

def test_require_reads_known_conditions_in_one_order():
    assert parse_options(b"# sloth: require=network,AC") == {"require": "ac,network"}
    assert parse_options(b"# sloth: require=unmetered,ac,ac") == {"require": "ac,unmetered"}


@pytest.mark.parametrize("header", [b"# sloth: require=solar", b"# sloth: require=ac,",
                                    b"# sloth: require=,"])
def test_an_unknown_condition_is_one_sentence_naming_what_is_accepted(header):
    with pytest.raises(BadJobFile) as caught:
        parse_options(header, "backup.sh")
    sentence = str(caught.value)
    assert sentence.startswith("backup.sh, line 1: bad value ")
    assert "for require: use ac, network or unmetered" in sentence
    assert "\n" not in sentence


def test_require_without_a_value_says_how_to_write_it():
    with pytest.raises(BadJobFile, match="require needs a value, as in require="):
        parse_options(b"# sloth: require=", "backup.sh")


def test_a_program_may_push_require_as_a_list_and_it_is_stored_canonical(queue):
    job_id = queue.push("a", options={"require": ["network", "ac"]})
    assert queue.get(job_id).options["require"] == "ac,network"
    with pytest.raises(SlothError, match="bad value .* for require"):
        queue.push("b", options={"require": ["ac", 3]})
    with pytest.raises(ValueError):
        parse_require("")


# -- the queue: claim passes waiting jobs over ---------------------------------------------

def test_a_due_job_waiting_on_ac_is_passed_over_and_keeps_its_attempts(queue, clock):
    waiting = queue.push("backup", options={"require": "ac"})
    clock.advance(1)
    other = queue.push("tidy")
    claimed = queue.claim("me", AC)
    assert claimed is not None and claimed.id == other
    assert queue.complete(other, "me")
    assert queue.claim("me", AC) is None
    job = queue.get(waiting)
    assert (job.state, job.attempts, job.runs) == (State.PENDING, 0, 0)
    assert [e.kind for e in queue.history(waiting)] == ["pushed"]
    # Once AC power is back, it is the next one out.
    claimed = queue.claim("me")
    assert claimed is not None and claimed.id == waiting and claimed.attempts == 1


def test_only_an_unmet_condition_holds_a_job_back(queue):
    net = queue.push("sync", options={"require": "network,unmetered"})
    assert queue.claim("me", AC).id == net  # it needs no AC power
    assert queue.complete(net, "me")
    both = queue.push("upload", options={"require": "ac,unmetered"})
    assert queue.claim("me", frozenset({"unmetered"})) is None
    assert queue.claim("me", frozenset({"network"})).id == both


def test_a_waiting_job_is_passed_over_on_the_expired_lease_path_too(queue, clock):
    stale = queue.push("stale")
    assert queue.claim("gone").id == stale
    waiting = queue.push("backup", options={"require": "ac"})
    clock.advance(11)  # the lease of 10 s has run out
    assert queue.claim("me", AC).id == stale  # taken back
    assert queue.claim("me", AC) is None
    assert queue.get(waiting).attempts == 0


def test_next_wakeup_ignores_jobs_that_wait_on_an_unmet_condition(queue, clock):
    queue.push("backup", options={"require": "ac"})
    later = queue.push("report", delay=60, options={"require": "network"})
    assert queue.next_wakeup(AC) == queue.get(later).not_before
    assert queue.next_wakeup(frozenset({"ac", "network"})) is None  # nothing but a change
    assert queue.next_wakeup() == clock()


def test_a_late_calendar_run_waiting_on_ac_is_not_settled_while_it_waits(queue, clock):
    job_id = queue.push("nightly", options={"at": "03:00", "require": "ac"})
    clock.advance(3 * 86400)  # three nights missed
    assert queue.claim("me", AC) is None
    assert [e.kind for e in queue.history(job_id)] == ["pushed"]
    assert queue.claim("me").id == job_id  # judged (caught up) once it may start


def test_summary_counts_due_jobs_per_unmet_condition_and_none_when_all_hold(queue, clock):
    queue.push("a", options={"require": "ac"})
    queue.push("b", options={"require": "ac,network"})
    queue.push("c", options={"require": "unmetered"})
    queue.push("d", options={"require": "ac"}, delay=600)  # not due: not waiting yet
    queue.push("e")
    assert "waiting_on" not in queue.summary()
    queue.set_unmet({"ac", "network"})
    summary = queue.summary()
    assert summary["waiting_on"] == {"ac": 2, "network": 1}
    assert summary["due_now"] == 2  # c and e
    assert queue.unmet() == frozenset({"ac", "network"})
    queue.set_unmet(())
    assert queue.unmet() == frozenset() and "waiting_on" not in queue.summary()


def test_a_paused_queue_says_what_due_jobs_wait_for_and_nothing_else(queue, clock):
    queue.push("a", options={"require": "ac"})
    queue.push("b", options={"require": "ac,network"})
    queue.set_unmet({"ac", "network"})
    queue.set_paused(True)
    summary = queue.summary()
    assert summary["waiting_on"] == {"ac": 2, "network": 1}  # no row for "any"
    assert summary["due_now"] == 0


def test_the_command_line_shows_what_a_due_job_waits_for(tmp_path, monkeypatch, capsys):
    home = locate(tmp_path / "home").ensure()
    monkeypatch.setenv("SLOTH_TRAY_HOME", str(home.root))
    with Queue(home.db) as queue:
        waiting = queue.push("backup", options={"require": "ac"})
        queue.push("tidy")
        queue.set_unmet({"ac"})
    assert cli.main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["waiting_on"] == {"ac": 1} and status["due_now"] == 1
    assert status["next"]["name"] == "tidy"  # the one a claim would take
    assert cli.main(["list"]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["backup"].rstrip().endswith("waiting for AC power")
    assert "waiting" not in rows["tidy"]
    assert cli.main(["show", waiting]) == 0
    assert "pending (due now), waiting for AC power" in capsys.readouterr().out


def test_the_menu_says_what_a_due_job_waits_for():
    from sloth_tray.daemon.snapshot import WaitingJob

    assert waiting_label(WaitingJob("a", "backup", 100.0, "AC power"), 200.0) == \
        "Waiting for AC power"
    assert waiting_label(WaitingJob("a", "backup", 300.0, "AC power"), 200.0) == "in 2 min"  # 100 s
    assert waiting_for({"require": "ac,network"}, {"network"}) == "a network connection"
    assert waiting_for({"require": "ac"}, set()) is None


# -- fake UPower and NetworkManager on a private bus ---------------------------------------

needs_dbus = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon")



class FakeUPower(ServiceInterface):
    def __init__(self, on_battery: bool) -> None:
        super().__init__("org.freedesktop.UPower")
        self.on_battery = on_battery

    @dbus_property(access=PropertyAccess.READ)
    def OnBattery(self) -> DBusBool:
        return self.on_battery


class FakeNetworkManager(ServiceInterface):
    def __init__(self, state: int, connectivity: int, metered: int) -> None:
        super().__init__("org.freedesktop.NetworkManager")
        self.state, self.connectivity, self.metered = state, connectivity, metered

    @dbus_property(access=PropertyAccess.READ)
    def State(self) -> DBusUInt32:
        return self.state

    @dbus_property(access=PropertyAccess.READ)
    def Connectivity(self) -> DBusUInt32:
        return self.connectivity

    @dbus_property(access=PropertyAccess.READ)
    def Metered(self) -> DBusUInt32:
        return self.metered


class SystemServices:
    """The fake services' side of the private bus, on a thread of its own."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        async def connect():
            from dbus_fast.aio import MessageBus

            return await MessageBus(bus_address=address).connect()

        self.bus = self.run(connect())

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    def offer(self, name: str, path: str, service) -> None:
        async def go():
            self.bus.export(path, service)
            await self.bus.request_name(name)
        self.run(go())

    def upower(self, on_battery: bool):
        upower = FakeUPower(on_battery)
        self.offer("org.freedesktop.UPower", "/org/freedesktop/UPower", upower)
        return upower

    def network_manager(self, state: int = 70, connectivity: int = 4, metered: int = 4):
        nm = FakeNetworkManager(state, connectivity, metered)
        self.offer("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", nm)
        return nm

    def change(self, service, **values) -> None:
        """Set properties and emit PropertiesChanged, as the real services do."""
        async def go():
            for attribute, value in values.items():
                setattr(service, attribute, value)
            names = {"on_battery": "OnBattery", "state": "State",
                     "connectivity": "Connectivity", "metered": "Metered"}
            service.emit_properties_changed(
                {names[attribute]: value for attribute, value in values.items()})
        self.run(go())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.bus.disconnect)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture
def system_bus(pids, tmp_path):
    address = start_private_bus(pids, tmp_path, "system")
    services = SystemServices(address)
    services.address = address
    try:
        yield services
    finally:
        services.close()


@pytest.fixture
def source_for(system_bus):
    from sloth_tray.desktop.system import PowerSource

    made = []

    def start(conditions: Conditions, readings=None) -> PowerSource:
        """`readings` stand in for a missing service; by default none can tell."""
        source = PowerSource(conditions, system_bus.address, readings or {}).start()
        made.append(source)
        assert source.ready.wait(10), "the source never finished its first reading"
        return source

    yield start
    for source in made:
        source.stop()


def power_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "sloth_tray" and "system bus" in r.getMessage()]


@needs_dbus
def test_the_source_follows_on_battery_and_metered_as_they_change(system_bus, source_for):
    upower = system_bus.upower(on_battery=True)
    nm = system_bus.network_manager(state=70, connectivity=4, metered=1)  # YES: metered
    conditions = Conditions()
    changes: list[frozenset[str]] = []
    conditions.subscribe(changes.append)
    source_for(conditions)
    assert conditions.unmet() == {"ac", "unmetered"}
    system_bus.change(upower, on_battery=False)
    wait_for(lambda: conditions.holds("ac"), timeout=2, what="AC power to be seen")
    system_bus.change(nm, metered=4)  # GUESS_NO
    wait_for(lambda: conditions.holds("unmetered"), timeout=2, what="an unmetered network")
    system_bus.change(nm, state=20, connectivity=1)  # DISCONNECTED, NONE
    wait_for(lambda: not conditions.holds("network"), timeout=2, what="the network to go")
    system_bus.change(nm, connectivity=4)  # FULL alone is enough
    wait_for(lambda: conditions.holds("network"), timeout=2, what="the network to return")
    assert changes[-1] == frozenset()


@needs_dbus
def test_a_missing_service_is_one_log_line_and_its_conditions_are_read_instead(
        system_bus, source_for, caplog):
    caplog.set_level(logging.INFO, logger="sloth_tray")
    nm = system_bus.network_manager(state=20, connectivity=1, metered=1)
    conditions = Conditions()
    source_for(conditions, {"ac": lambda: False})  # what the machine says: on battery
    assert conditions.unmet() == {"ac", "network", "unmetered"}
    assert conditions.probed == {"ac"}  # NetworkManager answered: its events rule
    lines = power_lines(caplog)
    assert lines == ["org.freedesktop.UPower is not on the system bus (The name "
                     "org.freedesktop.UPower was not provided by any .service files); AC "
                     "power is read from this machine instead, once a minute while a job "
                     "waits for it"]
    system_bus.change(nm, metered=2)
    wait_for(lambda: conditions.holds("unmetered"), timeout=2, what="unmetered")
    # UPower starts: its answer, not the reading, says what holds from now on.
    system_bus.upower(on_battery=False)
    wait_for(lambda: conditions.holds("ac"), timeout=2, what="UPower's AC power")
    assert conditions.probed == frozenset()
    assert len(power_lines(caplog)) == 1


def test_no_system_bus_at_all_is_one_log_line_and_the_machine_is_read(tmp_path, caplog):
    from sloth_tray.desktop.system import PowerSource

    caplog.set_level(logging.INFO, logger="sloth_tray")
    conditions = Conditions()
    source = PowerSource(conditions, f"unix:path={tmp_path}/no-such-socket",
                         {"ac": lambda: None, "network": lambda: False}).start()
    try:
        assert source.ready.wait(10)
    finally:
        source.stop()
    assert conditions.unmet() == {"network"}
    assert conditions.probed == {"ac", "network"}
    lines = [r.getMessage() for r in caplog.records if r.name == "sloth_tray"]
    assert len(lines) == 1 and lines[0].startswith("no system D-Bus at unix:path=")
    assert lines[0].endswith("), so UPower and NetworkManager cannot tell what require= "
                             "waits for: AC power and a network connection are read from "
                             "this machine instead, once a minute while a job waits for "
                             "them; an unmetered network cannot be known here: "
                             "require=unmetered is taken as met")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the system bus is Linux's")
def test_a_daemon_with_no_system_bus_says_once_how_it_reads_conditions_and_acts_on_it(
        pids, tmp_path, monkeypatch):
    """A real daemon told the system bus is at a socket that is not there: one line says
    the conditions cannot be told by the bus and are read from this machine (or taken as
    met), then one line says what that reading found, which the job's start agrees with.
    Never a moment's reading before the first look ("not met: network, unmetered")."""
    from helpers.processes import start_daemon

    from sloth_tray.desktop import probes

    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={tmp_path}/nowhere")
    home = locate(tmp_path / "home").ensure()
    (home.jobs / "fetch.sh").write_text("# sloth: require=network\necho fetched\n")
    start_daemon(pids, home)
    unmet = sorted(name for name, read in probes.readings().items() if read() is False)
    log = home.logs / "sloth-tray.log"

    def lines() -> list[str]:
        return [line.split(" ", 3)[3] for line in log.read_text().splitlines()
                if "D-Bus" in line or "conditions" in line]

    said = wait_for(lambda: log.exists() and len(lines()) >= 2 and lines(),
                    what="the daemon to say how it reads the conditions")
    assert said[0] == (
        f"no system D-Bus at unix:path={tmp_path}/nowhere ([Errno 2] No such file or "
        "directory), so UPower and NetworkManager cannot tell what require= waits for: AC "
        "power and a network connection are read from this machine instead, once a minute "
        "while a job waits for them; an unmetered network cannot be known here: "
        "require=unmetered is taken as met")
    assert said[1:] == [f"conditions not met now: {', '.join(unmet) or 'none'}"]
    with Queue(home.db) as queue:
        if "network" in unmet:  # this machine has no default route: the job waits
            wait_for(lambda: queue.summary().get("waiting_on") == {"network": 1},
                     what="status to say the job waits for the network")
        else:
            wait_for(lambda: queue.jobs() and queue.jobs()[0].state == State.DONE,
                     what="the job to run: the machine says the network is up")
    assert lines() == said  # said once


class CountingAlarm(Alarm):
    """The real alarm, telling each deadline the loop waits for."""

    def __init__(self) -> None:
        self.inner = make_alarm(time.time)
        self.waits: list[float | None] = []

    def wait(self, deadline: float | None) -> None:
        self.waits.append(deadline)
        self.inner.wait(deadline)

    def ring(self) -> None:
        self.inner.ring()

    def close(self) -> None:
        self.inner.close()


@needs_dbus
def test_a_job_needing_ac_waits_on_battery_and_starts_within_2s_of_ac(
        system_bus, source_for, tmp_path):
    upower = system_bus.upower(on_battery=True)
    system_bus.network_manager()
    home = locate(tmp_path / "home").ensure()
    queue = Queue(home.db)
    conditions = Conditions()
    alarm = CountingAlarm()
    engine = Engine(queue, home, alarm=alarm, conditions=conditions)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    source_for(conditions)
    engine.recover()
    assert queue.unmet() == AC

    def push(name: str, text: str, **options) -> str:
        path = home.spool / name
        path.write_text(text)
        return queue.push(path.stem, script=str(path), options=options)

    backup = push("backup.sh", "echo backed up", require="ac")
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        tidy = push("tidy.sh", "echo tidied")
        engine.wake()
        wait_for(lambda: queue.get(tidy).state == State.DONE, what="the other job to run")
        wait_for(lambda: seen[-1].running is None and seen[-1].done == 1,
                 what="the loop to settle")
        job = queue.get(backup)
        assert (job.state, job.attempts) == (State.PENDING, 0)
        assert queue.summary()["waiting_on"] == {"ac": 1}
        assert [w.waiting_for for w in seen[-1].waiting] == ["AC power"]
        assert seen[-1].next_wakeup is None and seen[-1].due_now == 0
        # While it waits the loop sleeps with no deadline: nothing wakes it but a change.
        wait_for(lambda: alarm.waits and alarm.waits[-1] is None, timeout=5,
                 what="an untimed wait")
        system_bus.change(upower, on_battery=False)
        changed = time.monotonic()
        wait_for(lambda: queue.get(backup).state != State.PENDING, timeout=2,
                 what="the job to start once on AC power")
        assert time.monotonic() - changed < 2
        wait_for(lambda: queue.get(backup).state == State.DONE, what="the job to finish")
        assert "waiting_on" not in queue.summary()
    finally:
        engine.stop()
        thread.join(timeout=10)
        queue.close()
    assert not thread.is_alive()


@needs_dbus
def test_the_app_on_a_fake_upower_interrupts_an_interruptible_job_when_unplugged(
        system_bus, pids, tmp_path, monkeypatch):
    """The whole path: a real daemon, told the private bus is the system bus; UPower's
    OnBattery flips under a running `interrupt=yes` job, then back."""
    from helpers.processes import alive, start_daemon

    upower = system_bus.upower(on_battery=False)
    system_bus.network_manager()
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", system_bus.address)
    home = locate(tmp_path / "home").ensure()
    runs = tmp_path / "runs"
    (home.jobs / "backup.sh").write_text(
        f"# sloth: require=ac interrupt=yes\necho $$ >> {runs}\nsleep 300\n")
    daemon = start_daemon(pids, home)
    first = pids.add(int(wait_for(lambda: runs.exists() and runs.read_text().split(),
                                  what="the job to start on AC power")[0]))
    system_bus.change(upower, on_battery=True)
    wait_for(lambda: not alive(first), timeout=10, what="the job's process to be stopped")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.jobs()[0].state == State.PENDING, what="the job to go back")
        (job,) = queue.jobs()
        assert job.attempts == 0
        released = queue.history(job.id)[-1]
        assert released.kind == "released" and "AC power was lost" in released.detail
        wait_for(lambda: queue.summary().get("waiting_on") == {"ac": 1},
                 what="status to say it waits for AC power")
    system_bus.change(upower, on_battery=False)
    wait_for(lambda: len(runs.read_text().split()) == 2, timeout=2,
             what="the job to start again within 2 s of AC power")
    pids.add(int(runs.read_text().split()[1]))
    assert daemon.poll() is None


@needs_dbus
def test_a_job_due_at_start_waits_for_the_first_reading_and_never_runs_on_battery(
        system_bus, pids, tmp_path, monkeypatch):
    from helpers.processes import start_daemon

    upower = system_bus.upower(on_battery=True)
    system_bus.network_manager()
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", system_bus.address)
    home = locate(tmp_path / "home").ensure()
    ran = tmp_path / "ran"
    script = tmp_path / "backup.sh"
    script.write_text(f"# sloth: require=ac\ntouch {ran}\n")
    with Queue(home.db) as queue:  # queued before the start: due at the very first claim
        queue.push("backup", script=str(script), options={"require": "ac"})
    start_daemon(pids, home)
    with Queue(home.db) as queue:
        wait_for(lambda: queue.unmet() == AC,
                 what="the first reading: on battery")
        (job,) = queue.jobs()
        assert (job.state, job.attempts) == (State.PENDING, 0)
    assert not ran.exists()
    system_bus.change(upower, on_battery=False)
    wait_for(ran.exists, timeout=2, what="the job to run within 2 s of AC power")


@needs_dbus
def test_a_queue_without_require_never_loads_the_d_bus_layer(system_bus, pids, tmp_path,
                                                              monkeypatch):
    from helpers.processes import start_daemon

    system_bus.upower(on_battery=True)
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", system_bus.address)
    home = locate(tmp_path / "home").ensure()
    ran = tmp_path / "ran"
    (home.jobs / "tidy.sh").write_text(f"touch {ran}\n")
    daemon = start_daemon(pids, home)
    wait_for(ran.exists, what="the job to run")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.jobs()[0].state == State.DONE, what="the job to be done")
    assert not mapped(daemon.pid, "dbus_fast") and not mapped(daemon.pid, "_asyncio")
    # The first job that requires something starts the system bus.
    (home.jobs / "backup.sh").write_text("# sloth: require=ac\necho backed up\n")
    wait_for(lambda: mapped(daemon.pid, "dbus_fast"), what="the D-Bus layer to load")


@needs_dbus
def test_a_missing_service_never_says_holds_before_the_reading_that_says_not(
        system_bus, source_for):
    system_bus.network_manager()
    conditions = Conditions(start=lambda: None)  # unknown, so unmet, until told
    heard: list[frozenset[str]] = []
    conditions.subscribe(heard.append)
    source_for(conditions, {"ac": lambda: False})  # no UPower; the machine: on battery
    assert conditions.unmet() == {"ac"}
    assert heard and all("ac" in unmet for unmet in heard), heard


@needs_dbus
def test_a_job_needing_an_unmetered_network_starts_within_2s_of_metered_turning_off(
        system_bus, pids, tmp_path, monkeypatch):
    from helpers.processes import start_daemon

    system_bus.upower(on_battery=False)
    nm = system_bus.network_manager(state=70, connectivity=4, metered=1)  # YES: metered
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", system_bus.address)
    home = locate(tmp_path / "home").ensure()
    ran = tmp_path / "ran"
    (home.jobs / "sync.sh").write_text(f"# sloth: require=unmetered\ntouch {ran}\n")
    start_daemon(pids, home)
    with Queue(home.db) as queue:
        wait_for(lambda: queue.unmet() == {"unmetered"} and queue.jobs(),
                 what="the job to wait for an unmetered network")
        assert queue.summary().get("waiting_on") == {"unmetered": 1}
    assert not ran.exists()
    system_bus.change(nm, metered=4)  # GUESS_NO
    wait_for(ran.exists, timeout=2, what="the job to start within 2 s of an unmetered network")
