"""Conditions read from the machine where no service tells of them (no UPower or
NetworkManager; macOS and Windows): the readings on real sysfs- and procfs-shaped
trees, and the engine reading them at most once a minute, waking for it only while
a due job waits on one."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading

import pytest
from helpers.processes import wait_for

from sloth_tray.daemon.alarm import Alarm
from sloth_tray.daemon.engine import PROBE_EVERY, Engine
from sloth_tray.desktop.probes import ac_from_pmset, fall_back, linux_ac, linux_network
from sloth_tray.jobs.conditions import Conditions
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

# -- AC power from /sys/class/power_supply ------------------------------------------------


def supply(sys_root, name: str, **files: str) -> None:
    folder = sys_root / "class/power_supply" / name
    folder.mkdir(parents=True)
    for key, value in files.items():
        (folder / key).write_text(value + "\n")


def test_a_laptop_on_its_charger_is_on_ac(tmp_path):
    supply(tmp_path, "AC", type="Mains", online="1")
    supply(tmp_path, "BAT0", type="Battery", status="Charging", scope="System")
    assert linux_ac(tmp_path) is True


def test_a_laptop_unplugged_is_not(tmp_path):
    supply(tmp_path, "ADP1", type="Mains", online="0")
    supply(tmp_path, "BAT0", type="Battery", status="Discharging")
    assert linux_ac(tmp_path) is False


def test_a_usb_c_charger_counts_as_ac(tmp_path):
    supply(tmp_path, "ucsi-source-psy-USBC000:001", type="USB", online="1")
    supply(tmp_path, "BAT1", type="Battery", status="Charging")
    assert linux_ac(tmp_path) is True


@pytest.mark.parametrize("make", [
    lambda root: None,  # no power_supply folder at all (a container, a VM)
    lambda root: (root / "class/power_supply").mkdir(parents=True),  # a desktop
    lambda root: supply(root, "hidpp_battery_0", type="Battery", scope="Device"),  # a mouse
])
def test_a_machine_with_no_battery_of_its_own_cannot_tell(tmp_path, make):
    make(tmp_path)
    assert linux_ac(tmp_path) is None


# -- the network from /proc/net ---------------------------------------------------------------

ROUTE_HEADER = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU"
                "\tWindow\tIRTT\n")
DEFAULT_V4 = "eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
LAN_ONLY_V4 = "eth0\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"
ZEROS = "0" * 32
DEFAULT_V6 = f"{ZEROS} 00 {ZEROS} 00 fe800000000000000000000000000001 00000400 " \
             "00000001 00000000 00000003 wlan0\n"
UNREACHABLE_V6 = f"{ZEROS} 00 {ZEROS} 00 {ZEROS} ffffffff 00000001 00000000 00200200 lo\n"


def routes(proc_root, v4: str | None, v6: str | None) -> None:
    (proc_root / "net").mkdir(parents=True)
    if v4 is not None:
        (proc_root / "net/route").write_text(ROUTE_HEADER + v4)
    if v6 is not None:
        (proc_root / "net/ipv6_route").write_text(v6)


@pytest.mark.parametrize(("v4", "v6", "expected"), [
    (DEFAULT_V4, "", True),
    (LAN_ONLY_V4, UNREACHABLE_V6, False),  # a LAN but no way out
    ("", DEFAULT_V6, True),  # IPv6 only
    ("", "", False),
    (None, None, None),  # neither table readable
    (DEFAULT_V4.replace("\t0003\t", "\t0002\t"), None, False),  # a default route that is down
])
def test_a_network_is_a_default_route_that_is_up(tmp_path, v4, v6, expected):
    routes(tmp_path, v4, v6)
    assert linux_network(tmp_path) is expected


def in_a_network_of_its_own(setup: str) -> subprocess.CompletedProcess[str]:
    """`linux_network()` with its own /proc, read in a network namespace of its own
    (`unshare -rn`: no root needed) after `setup` made its routes there."""
    probe = "from sloth_tray.desktop.probes import linux_network; print(linux_network())"
    script = f"{setup} && exec \"$0\" -c '{probe}'" if setup else f"exec \"$0\" -c '{probe}'"
    return subprocess.run(["unshare", "-rn", "sh", "-c", script, sys.executable],
                          capture_output=True, text=True, timeout=30)


def network_namespaces() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not network_namespaces(), reason="no unprivileged network namespaces here")
@pytest.mark.parametrize(("setup", "expected"), [
    ("", "False"),  # a new namespace: no route at all (its route table is empty)
    ("ip link set lo up && ip route add 10.0.0.0/8 dev lo", "False"),  # a LAN, no way out
    ("ip link set lo up && ip route add default dev lo", "True"),
])
def test_the_kernels_own_tables_read_as_the_routes_it_has(setup, expected):
    """The real /proc (the default root) in the kernel's own format, its routes set up
    by the test rather than whatever this machine has."""
    done = in_a_network_of_its_own(setup)
    assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr


# -- macOS ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("Now drawing from 'AC Power'\n -InternalBattery-0 (id=1)\t100%; charged;\n", True),
    ("Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1)\t87%; discharging;\n",
     False),
    ("", None),
    ("Now drawing from 'UPS Power'\n", None),
])
def test_pmset_says_where_the_power_comes_from(text, expected):
    assert ac_from_pmset(text) is expected


# -- falling back to readings -------------------------------------------------------------------


def test_fall_back_probes_what_it_can_read_and_says_what_holds_without_a_reading():
    conditions = Conditions(start=lambda: None)  # unknown, so unmet, until told
    assert conditions.unmet() == {"ac", "network", "unmetered"}
    heard: list[frozenset[str]] = []
    conditions.subscribe(heard.append)
    said = fall_back(conditions, ("ac", "network", "unmetered"),
                     {"ac": lambda: False, "network": lambda: None})
    assert heard == [{"ac"}]  # the look's outcome, once: never "not met: network, unmetered"
    assert conditions.probed == {"ac", "network"}
    assert conditions.unmet() == {"ac"}  # read at once; the network cannot tell: holds
    assert said == ("AC power and a network connection are read from this machine instead, "
                    "once a minute while a job waits for them; an unmetered network cannot "
                    "be known here: require=unmetered is taken as met")


def test_a_reading_that_raises_counts_as_holding():
    conditions = Conditions(start=lambda: None)  # unmet until told: the reading must tell
    assert not conditions.holds("ac")

    def broken():
        raise OSError("no such file")

    conditions.probe_with({"ac"}, lambda: {"ac": broken()})
    assert conditions.holds("ac")


def test_a_service_that_answers_again_ends_the_probing():
    conditions = Conditions()
    conditions.probe_with({"ac", "network"}, lambda: {"ac": False, "network": True})
    conditions.stop_probing({"ac"})
    assert conditions.probed == {"network"}


# -- the engine: once a minute, only while a job waits ------------------------------------------


class HeldAlarm(Alarm):
    """The engine's alarm in the test's hands: every wait is recorded (its deadline)
    and lasts until a ring, whoever rings."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []
        self._rung = threading.Event()

    def wait(self, deadline: float | None) -> None:
        self.waits.append(deadline)
        self._rung.wait()
        self._rung.clear()

    def ring(self) -> None:
        self._rung.set()


def test_a_probed_condition_is_read_once_a_minute_while_a_job_waits_and_never_else(
        tmp_path, clock, caplog):
    caplog.set_level(logging.INFO, logger="sloth_tray")
    home = locate(tmp_path / "home").ensure()
    queue = Queue(home.db, clock=clock)
    on_ac = {"now": False}
    reads: list[float] = []

    def read_ac() -> dict[str, bool]:
        reads.append(clock())
        return {"ac": on_ac["now"]}

    conditions = Conditions()
    conditions.probe_with({"ac"}, read_ac)
    alarm = HeldAlarm()
    engine = Engine(queue, home, alarm=alarm, conditions=conditions)
    engine.recover()
    thread = threading.Thread(target=engine.run)
    thread.start()

    def next_wait(after: int) -> float | None:
        wait_for(lambda: len(alarm.waits) > after, what="the loop to wait again")
        return alarm.waits[-1]

    try:
        # Nothing waits: an untimed wait, whatever the probe said.
        assert next_wait(0) is None
        t0, seen = clock(), len(alarm.waits)

        script = home.spool / "backup.sh"
        script.write_text("echo backed up\n")
        backup = queue.push("backup", script=str(script), options={"require": "ac"})
        engine.wake()
        # Due and waiting for AC power: read again a minute after the last reading.
        assert next_wait(seen) == t0 + PROBE_EVERY
        reads_before = len(reads)

        clock.advance(PROBE_EVERY)
        seen = len(alarm.waits)
        alarm.ring()
        assert next_wait(seen) == t0 + 2 * PROBE_EVERY  # read, still on battery
        assert reads[reads_before:] == [t0 + PROBE_EVERY]
        assert queue.get(backup).attempts == 0

        on_ac["now"] = True  # plugged in; the next reading sees it
        clock.advance(PROBE_EVERY)
        alarm.ring()
        wait_for(lambda: queue.get(backup).state == State.DONE,
                 what="the job to run once the reading says AC power")

        # Nothing waits any more: on battery again, and a job due tomorrow that
        # requires nothing. The loop waits for that job, never for a reading.
        on_ac["now"] = False
        clock.advance(PROBE_EVERY)
        tomorrow = queue.push("tidy", delay=86400)
        seen = len(alarm.waits)
        engine.wake()
        wait_for(lambda: len(alarm.waits) > seen and alarm.waits[-1] == queue.get(
            tomorrow).not_before, what="a wait for tomorrow's job alone")
        assert not conditions.holds("ac")
    finally:
        engine.stop()
        thread.join(timeout=10)
        queue.close()
    assert not thread.is_alive()


def test_a_require_job_due_later_wakes_the_loop_before_anything_tells_the_conditions(
        tmp_path, clock):
    """Untold, every condition is unmet; that must not hide a job due later from the
    loop's deadline, or nothing would ever start telling them."""
    home = locate(tmp_path / "home").ensure()
    queue = Queue(home.db, clock=clock)
    told: list[float] = []
    conditions = Conditions(start=lambda: told.append(clock()))
    alarm = HeldAlarm()
    engine = Engine(queue, home, alarm=alarm, conditions=conditions)
    engine.recover()
    backup = queue.push("backup", delay=600, options={"require": "ac"})
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: alarm.waits, what="the loop to wait")
        assert alarm.waits[-1] == queue.get(backup).not_before  # not an untimed wait
        assert told == []  # nothing waits yet: nothing to tell
        clock.advance(600)
        seen = len(alarm.waits)
        alarm.ring()
        wait_for(lambda: len(alarm.waits) > seen, what="the loop to wait again")
        assert told == [clock()]  # due and waiting: the conditions are asked for now
        assert queue.get(backup).attempts == 0
    finally:
        engine.stop()
        thread.join(timeout=10)
        queue.close()
