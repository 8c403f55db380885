"""Fake desktop services on a private D-Bus: notifications, the portal, the file
manager, as the tests' own dbus-daemon serves them (the real ones are the desktop's)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Annotated

from dbus_fast.aio import MessageBus
from dbus_fast.annotations import (
    DBusDict,
    DBusInt32,
    DBusObjectPath,
    DBusSignature,
    DBusStr,
    DBusUInt32,
    DBusUnixFd,
)
from dbus_fast.service import ServiceInterface, dbus_method, dbus_signal

StrList = Annotated[list[str], DBusSignature("as")]


class FakeNotifications(ServiceInterface):
    """Ids as the specification has them: a new one for each new notification (101,
    102, ...), the same one back for an update in place (replaces_id)."""

    def __init__(self, capabilities: list[str]) -> None:
        super().__init__("org.freedesktop.Notifications")
        self.capabilities = capabilities
        self.sent: list[dict] = []
        self.closed: list[int] = []  # CloseNotification's ids, in order
        self.last_id = 100
        # A button clicked on an update in place as soon as it shows, before the reply to
        # its Notify leaves: the click's signal reaches the app first.
        self.click_on_update: str | None = None
        self.click_on_show: str | None = None  # the same, on a new notification

    @dbus_method()
    def GetCapabilities(self) -> StrList:
        return self.capabilities

    @dbus_method()
    def Notify(self, app_name: DBusStr, replaces_id: DBusUInt32, app_icon: DBusStr,
               summary: DBusStr, body: DBusStr, actions: StrList, hints: DBusDict,
               expire_timeout: DBusInt32) -> DBusUInt32:
        self.sent.append({"app_name": app_name, "replaces_id": replaces_id,
                          "app_icon": app_icon, "summary": summary, "body": body,
                          "actions": actions, "hints": hints, "expire_timeout": expire_timeout})
        if replaces_id:
            if self.click_on_update is not None:
                self.ActionInvoked(replaces_id, self.click_on_update)
            return replaces_id
        self.last_id += 1
        if self.click_on_show is not None:
            self.ActionInvoked(self.last_id, self.click_on_show)
        return self.last_id

    @dbus_method()
    def CloseNotification(self, notification_id: DBusUInt32):
        self.closed.append(notification_id)
        self.NotificationClosed(notification_id, 3)  # 3: closed by CloseNotification

    @dbus_signal()
    def ActionInvoked(self, notification_id: int, key: str) -> Annotated[
            list, DBusSignature("us")]:
        return [notification_id, key]

    @dbus_signal()
    def NotificationClosed(self, notification_id: int, reason: int) -> Annotated[
            list, DBusSignature("uu")]:
        return [notification_id, reason]


class FakePortal(ServiceInterface):
    def __init__(self) -> None:
        super().__init__("org.freedesktop.portal.OpenURI")
        self.calls: list[tuple[str, str]] = []
        self.options: list[dict] = []  # each call's, in order

    @dbus_method()
    def OpenURI(self, parent_window: DBusStr, uri: DBusStr, options: DBusDict) -> DBusObjectPath:
        self.calls.append(("OpenURI", uri))
        self.options.append(options)
        return "/org/freedesktop/portal/desktop/request/1/t"

    @dbus_method()
    def OpenFile(self, parent_window: DBusStr, fd: DBusUnixFd,
                 options: DBusDict) -> DBusObjectPath:
        return self._given("OpenFile", fd, options)

    @dbus_method()
    def OpenDirectory(self, parent_window: DBusStr, fd: DBusUnixFd,
                      options: DBusDict) -> DBusObjectPath:
        return self._given("OpenDirectory", fd, options)

    def _given(self, method: str, fd: int, options: dict) -> str:
        """A call handed a file descriptor: recorded as the path it is open on."""
        self.options.append(options)
        try:
            self.calls.append((method, os.readlink(f"/proc/self/fd/{fd}")))
        finally:
            os.close(fd)
        return "/org/freedesktop/portal/desktop/request/1/t"


class FakeFileManager(ServiceInterface):
    def __init__(self) -> None:
        super().__init__("org.freedesktop.FileManager1")
        self.calls: list[tuple[str, list[str]]] = []
        self.startup_ids: list[str] = []  # each call's, in order

    @dbus_method()
    def ShowFolders(self, uris: StrList, startup_id: DBusStr):
        self.calls.append(("ShowFolders", uris))
        self.startup_ids.append(startup_id)

    @dbus_method()
    def ShowItems(self, uris: StrList, startup_id: DBusStr):
        self.calls.append(("ShowItems", uris))
        self.startup_ids.append(startup_id)


class Desktop:
    """The fake services' side of the bus: a connection on a thread of its own."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.bus = self.run(self._connect(address))

    @staticmethod
    async def _connect(address: str) -> MessageBus:
        return await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    def call(self, function, *args) -> None:
        async def go():
            function(*args)
        self.run(go())

    def offer(self, name: str, path: str, service: ServiceInterface):
        async def go():
            self.bus.export(path, service)
            await self.bus.request_name(name)
        self.run(go())
        return service

    def notifications(self, capabilities: list[str]) -> FakeNotifications:
        return self.offer("org.freedesktop.Notifications", "/org/freedesktop/Notifications",
                          FakeNotifications(capabilities))

    def portal(self) -> FakePortal:
        return self.offer("org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop",
                          FakePortal())

    def file_manager(self) -> FakeFileManager:
        return self.offer("org.freedesktop.FileManager1", "/org/freedesktop/FileManager1",
                          FakeFileManager())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.bus.disconnect)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
