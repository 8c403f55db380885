"""What a job that waits for AC power costs, and how soon it starts once plugged in.

    python tests/bench/condition_latency.py [--runs 10] [--idle 30]

A private dbus-daemon plays the system bus, with a fake UPower on it; a real
`sloth-tray run --headless` daemon follows it. It measures:
- idle cost over --idle seconds with one job waiting for AC power and one due
  tomorrow: the daemon's wake-ups (context switches of all its threads) and CPU;
- the condition-to-start latency: from UPower's PropertiesChanged(OnBattery:
  false) to the waiting job's first instruction, --runs times; median and range.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dbus_fast.aio import MessageBus
from dbus_fast.annotations import DBusBool
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_property

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


class FakeUPower(ServiceInterface):
    def __init__(self) -> None:
        super().__init__("org.freedesktop.UPower")
        self.on_battery = True

    @dbus_property(access=PropertyAccess.READ)
    def OnBattery(self) -> DBusBool:
        return self.on_battery


class UPowerOnABus:
    """The fake UPower, served on a thread of its own."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.upower = FakeUPower()

        async def serve() -> MessageBus:
            bus = await MessageBus(bus_address=address).connect()
            bus.export("/org/freedesktop/UPower", self.upower)
            await bus.request_name("org.freedesktop.UPower")
            return bus

        self.bus = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(10)

    def set_on_battery(self, value: bool) -> float:
        """Change it, as UPower does; returns the moment the signal went out."""
        async def change() -> float:
            self.upower.on_battery = value
            self.upower.emit_properties_changed({"OnBattery": value})
            return time.time()

        return asyncio.run_coroutine_threadsafe(change(), self.loop).result(10)


def sloth(home: Path, env: dict[str, str], *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home)],
                          env=env, capture_output=True, text=True, check=True)
    return done.stdout


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.01)


def switches_and_cpu(pid: int) -> tuple[int, float]:
    """Context switches of every thread, and CPU seconds, of `pid` so far."""
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                switches += int(line.split()[1])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return switches, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sloth-conditions-"))
    config = work / "system.conf"
    config.write_text(BUS_CONFIG)
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork",
                            "--print-address=1"], stdout=subprocess.PIPE, text=True)
    daemon = None
    try:
        address = bus.stdout.readline().strip()
        upower = UPowerOnABus(address)
        env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": address}
        home = work / "home"
        sloth(home, env, "status")
        daemon = subprocess.Popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                                   "--home", str(home)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def waiting() -> bool:
            return json.loads(sloth(home, env, "status", "--json")).get(
                "waiting_on", {}).get("ac") == 1

        started = work / "started"
        script = work / "plugged.sh"
        script.write_text(f"# sloth: require=ac\ndate +%s.%N > {started}\n")
        tomorrow = work / "tomorrow.sh"
        tomorrow.write_text("echo tomorrow\n")
        sloth(home, env, "add", str(tomorrow), "--delay", "1d")
        sloth(home, env, "add", str(script))
        wait_for(waiting)
        time.sleep(2)  # let start-up settle before the window opens
        before = switches_and_cpu(daemon.pid)
        time.sleep(args.idle)  # the measurement window itself
        after = switches_and_cpu(daemon.pid)
        wakeups, cpu = after[0] - before[0], after[1] - before[1]
        print(f"idle {args.idle:g} s, one job waiting for AC and one due tomorrow: "
              f"{wakeups} wake-ups ({wakeups * 60 / args.idle:.1f}/min), "
              f"{cpu * 1000:.0f} ms CPU")

        latencies = []
        for run in range(args.runs):
            if run:
                started.unlink(missing_ok=True)
                upower.set_on_battery(True)
                sloth(home, env, "add", str(script))
                wait_for(waiting)
            sent = upower.set_on_battery(False)
            wait_for(lambda: started.exists() and started.read_text().strip())
            latencies.append(float(started.read_text()) - sent)
        ms = sorted(x * 1000 for x in latencies)
        print(f"condition to start, {len(ms)} runs: median {statistics.median(ms):.1f} ms "
              f"(min {ms[0]:.1f}, max {ms[-1]:.1f})")
    finally:
        for proc in (daemon, bus):
            if proc is not None:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
