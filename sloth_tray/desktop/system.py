"""AC power and the network, from UPower and NetworkManager on the system bus.

Event-driven: the properties are read once at start and then followed through their
PropertiesChanged signals (and NameOwnerChanged, for a service that starts or stops
later), on one thread of its own blocked on the bus socket. Nothing is polled.

A service that is not there (or no system bus at all) is said once in the log, and
its conditions are read from the machine instead (probes.py: at most once a minute,
only while a job waits) or, where nothing can read them, taken as holding: require=
must never keep jobs waiting forever on a machine without UPower or NetworkManager.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from sloth_tray.desktop.probes import Reading, fall_back
from sloth_tray.jobs.conditions import CONDITIONS, Conditions

log = logging.getLogger("sloth_tray")

SYSTEM_BUS = "unix:path=/var/run/dbus/system_bus_socket"
PROPERTIES = "org.freedesktop.DBus.Properties"
CALL_TIMEOUT = 10.0  # a service that does not answer in this long is taken as absent

UPOWER = "org.freedesktop.UPower"
UPOWER_PATH = "/org/freedesktop/UPower"
NM = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
NM_CONNECTED_GLOBAL = 70  # State: connected, with access to the internet
NM_CONNECTIVITY_FULL = 4
NM_METERED_NO = (2, 4)  # NM_METERED_NO, NM_METERED_GUESS_NO

# Each service, its object, and the conditions it tells.
SERVICES = {UPOWER: (UPOWER_PATH, ("ac",)), NM: (NM_PATH, ("network", "unmetered"))}


def system_bus_address() -> str:
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or SYSTEM_BUS


def ac_holds(properties: dict[str, Any]) -> bool | None:
    on_battery = properties.get("OnBattery")
    return None if on_battery is None else not on_battery


def network_holds(properties: dict[str, Any]) -> bool | None:
    state, connectivity = properties.get("State"), properties.get("Connectivity")
    if state is None and connectivity is None:
        return None
    return (state or 0) >= NM_CONNECTED_GLOBAL or connectivity == NM_CONNECTIVITY_FULL


def unmetered_holds(properties: dict[str, Any]) -> bool | None:
    metered = properties.get("Metered")
    return None if metered is None else metered in NM_METERED_NO


class PowerSource:
    """Feeds `conditions` from the system bus until stop()."""

    def __init__(self, conditions: Conditions, address: str | None = None,
                 readings: dict[str, Reading] | None = None) -> None:
        """`readings`: what stands in for a missing service (probes.readings())."""
        self.conditions = conditions
        self.readings = readings
        self.address = address or system_bus_address()
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._bus: Any = None
        self._known: dict[str, dict[str, Any]] = {UPOWER: {}, NM: {}}  # last values read
        self._said: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.ready = threading.Event()  # set once the first reading is in

    def start(self) -> PowerSource:
        self._thread = threading.Thread(target=self._run, name="power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return

        def end() -> None:
            if self._bus is not None:
                self._bus.disconnect()
            self.loop.stop()

        try:
            self.loop.call_soon_threadsafe(end)
        except RuntimeError:
            return  # the loop has closed already
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()

    # -- the source's thread -----------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.create_task(self._begin())
        self.loop.run_forever()
        # stop() came: end what is still under way (a connection being made, a
        # reading), so no task is left pending when the loop closes.
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    async def _begin(self) -> None:
        # The first look at every condition is told as one: never a moment of it (UPower
        # read, NetworkManager not yet) that says "not met" of what was not read yet.
        with self.conditions.reading():
            try:
                await self._connect()
            except Exception as exc:
                instead = fall_back(self.conditions, CONDITIONS, self.readings)
                self._say_once("bus", f"no system D-Bus at {self.address} "
                               f"({exc or type(exc)}), so UPower and NetworkManager cannot "
                               f"tell what require= waits for: {instead}")
            finally:
                self.ready.set()

    async def _connect(self) -> None:
        from dbus_fast.aio import MessageBus

        from sloth_tray.desktop.bus import add_match, name_owner_rule

        bus = await asyncio.wait_for(MessageBus(bus_address=self.address).connect(),
                                     CALL_TIMEOUT)
        self._bus = bus
        bus.add_message_handler(self._on_message)
        for name, (path, _) in SERVICES.items():
            # Listen first, then read: a change in between is never lost.
            await add_match(bus, f"type='signal',sender='{name}',interface='{PROPERTIES}',"
                                 f"member='PropertiesChanged',path='{path}'")
            await add_match(bus, name_owner_rule(name))
        for name in SERVICES:
            await self._read(name)

    async def _read(self, name: str) -> None:
        from dbus_fast import DBusError

        from sloth_tray.desktop.bus import call

        path, _ = SERVICES[name]
        try:
            [values] = await call(self._bus, name, path, PROPERTIES, "GetAll", "s", [name],
                                  timeout=CALL_TIMEOUT)
        except (DBusError, TimeoutError) as exc:
            self._missing(name, str(exc) or "no answer")
            return
        self._update(name, {key: variant.value for key, variant in values.items()})

    def _missing(self, name: str, why: str) -> None:
        self._known[name] = {}
        # Read now (or taken as met where nothing can read them): never a moment of
        # "holds" before a reading that says otherwise, which a claim could act on.
        instead = fall_back(self.conditions, SERVICES[name][1], self.readings)
        self._say_once(name, f"{name} is not on the system bus ({why}); {instead}")

    def _update(self, name: str, changed: dict[str, Any]) -> None:
        self.conditions.stop_probing(SERVICES[name][1])  # the service tells again
        known = self._known[name]
        known.update(changed)
        if name == UPOWER:
            readings = {"ac": ac_holds(known)}
        else:
            readings = {"network": network_holds(known), "unmetered": unmetered_holds(known)}
        with self.conditions.reading():  # the network and its metering: one change
            for condition, holds in readings.items():
                self.conditions.set(condition, True if holds is None else holds)

    def _on_message(self, message: Any) -> None:
        from dbus_fast import MessageType

        if message.message_type is not MessageType.SIGNAL:
            return
        if message.member == "PropertiesChanged" and message.interface == PROPERTIES:
            interface, changed = message.body[0], message.body[1]
            if interface in SERVICES and message.path == SERVICES[interface][0]:
                self._update(interface, {key: v.value for key, v in changed.items()})
        elif message.member == "NameOwnerChanged" and message.body[0] in SERVICES:
            name, new_owner = message.body[0], message.body[2]
            if new_owner:  # it started (again): read it afresh
                self._said.discard(name)
                task = self.loop.create_task(self._read(name))
                self._tasks.add(task)  # the loop keeps only a weak reference to a task
                task.add_done_callback(self._tasks.discard)
            else:
                self._missing(name, "it stopped")

    def _say_once(self, kind: str, sentence: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            log.warning("%s", sentence)


def start_power_source(conditions: Conditions, address: str | None = None) -> PowerSource:
    """Follow AC power and the network into `conditions`, on a thread of its own."""
    return PowerSource(conditions, address).start()
