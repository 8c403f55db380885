"""A private D-Bus: a dbus-daemon of the test's own, with nothing on it but what the
test puts there."""

from __future__ import annotations

import subprocess

# Only what a test puts on it: the stock configs would let the bus start
# whatever notification daemon, portal or system service this machine has.
PRIVATE_BUS_CONFIG = """<busconfig>
  <type>{kind}</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>{extra}
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def start_private_bus(pids, folder, kind: str = "session", *, extra: str = "",
                      env: dict[str, str] | None = None) -> str:
    """A dbus-daemon of the test's own (killed by `pids`); its address. `extra`: more
    of its config (a <servicedir>, a <limit>); `env`: the environment of what it starts."""
    config = folder / f"{kind}-bus.conf"
    config.write_text(PRIVATE_BUS_CONFIG.format(kind=kind, extra=extra))
    daemon = pids.popen(["dbus-daemon", f"--config-file={config}", "--nofork",
                         "--print-address=1"], stdout=subprocess.PIPE, text=True, env=env)
    address = daemon.stdout.readline().strip()
    assert address, "dbus-daemon printed no address"
    return address
