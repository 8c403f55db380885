"""Lanes in the tray, without a display: one icon for every lane, the state that most
needs the user leading; a tooltip naming each running job with its lane; a status line
per busy lane; a `Lanes` submenu whose rows reach the engine with their lane; a
failure's notification naming its lane, and a lane done with a burst said once when
asked for. With main alone, everything is as it was before lanes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC
from itertools import combinations

import pytest
from helpers.controls import Recorder
from helpers.snapshots import BUSY

from sloth_tray import config
from sloth_tray.daemon.snapshot import FailedJob, Lane, RunningJob, Snapshot, WaitingJob
from sloth_tray.errors import SlothError
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.paths import locate
from sloth_tray.tray import presenter
from sloth_tray.tray.announce import Announcer, LaneBursts, LaneDone
from sloth_tray.tray.icons import Look, leading
from sloth_tray.tray.presenter import has_lanes, state

NOW = 1_000_000.0

BACKUP = RunningJob("m0000000001", "backup", 1, 5, NOW - 42)
FETCH = RunningJob("n0000000001", "fetch_mail", 1, 5, NOW - 42, lane="net")
BROKEN = FailedJob("p0000000009", "resize", "exit status 1", NOW - 5, lane="photos")


def in_lanes(*lanes: Lane, **more) -> Snapshot:
    """A snapshot as the engine makes one with lanes: its totals the lanes' sums, its
    `running` main's (else the first lane's)."""
    runs = tuple(lane.running for lane in lanes if lane.running)
    totals = {"pending": sum(lane.pending for lane in lanes),
              "due_now": sum(lane.due_now for lane in lanes),
              "failed_count": sum(lane.failed for lane in lanes)}
    return Snapshot(**{**totals, **more}, running=runs[0] if runs else None,
                    lanes=lanes)


# main and net each run a job; photos is paused with work waiting and a failure; spare
# has nothing to do.
LANES = in_lanes(
    Lane("main", BACKUP, pending=1),
    Lane("net", FETCH, pending=2, due_now=2),
    Lane("photos", pending=3, failed=1, paused=True),
    Lane("spare"),
    failed_jobs=(BROKEN,),
    waiting=(WaitingJob("w0000000001", "later", NOW + 240),),
)


def labels(items) -> list[str]:
    return [item.label for item in items]


def keys(items) -> list[str]:
    return [item.key for item in items]


def row(items, label: str):
    return next(item for item in items if item.label == label)


def top_rows(items) -> list:
    """The rows above the first separator: the status lines."""
    return list(items[:keys(items).index("sep-1")])


# -- one icon: the state that most needs the user, whichever lane it is in ----------------

ORDER = (Look.FAILED, Look.OVERDUE, Look.RUNNING, Look.PAUSED, Look.IDLE)


def holding(name: str, look: Look) -> tuple[Lane, dict]:
    """Lane `name` in state `look`, and what the snapshot carries for it."""
    if look == Look.FAILED:
        job = FailedJob(f"{name}-f", "broken", "exit status 1", NOW, lane=name)
        return Lane(name, failed=1), {"failed_jobs": (job,)}
    if look == Look.OVERDUE:  # a recurring series overdue (a series has no lane of its own)
        return Lane(name, pending=1), {"overdue": (OverdueJob("nightly", NOW - 86400, ""),)}
    if look == Look.RUNNING:
        return Lane(name, RunningJob(f"{name}-r", "busy", 1, 5, NOW, lane=name)), {}
    if look == Look.PAUSED:  # paused while it has work waiting
        return Lane(name, pending=2, paused=True), {}
    return Lane(name), {}


@pytest.mark.parametrize("higher, lower", list(combinations(ORDER, 2)))
def test_the_icon_leads_with_the_state_that_most_needs_the_user_in_any_lane(higher, lower):
    for first, second in ((higher, lower), (lower, higher)):  # whichever lane holds which
        main, main_parts = holding("main", first)
        net, net_parts = holding("net", second)
        snapshot = in_lanes(main, net, **main_parts, **net_parts)
        assert state(snapshot) == higher, (first, second)
        assert leading(presenter.look(snapshot)) == higher
        # The others still show, each a badge of its own
        assert presenter.look(snapshot) == higher | lower


def test_a_paused_lane_shows_paused_only_while_it_holds_work_back():
    assert state(in_lanes(Lane("main"), Lane("net", paused=True))) == Look.IDLE
    assert state(in_lanes(Lane("main"), Lane("net", pending=1, paused=True))) == Look.PAUSED
    # The whole queue paused is paused, waiting work or not (as before lanes)
    everything = in_lanes(Lane("main", paused=True), Lane("net", paused=True), paused=True)
    assert state(everything) == Look.PAUSED


def test_quit_says_a_job_running_in_a_lane_paused_on_its_own_runs_again_once_resumed():
    """Given back by the quit, the job waits for its lane's resume, not for the next
    start: one running job is told as several are."""
    net_paused = in_lanes(Lane("main"), Lane("net", FETCH, paused=True))
    assert presenter.quit_label(net_paused) == \
        "Quit (stops fetch_mail; it runs again once resumed)"
    main_paused = in_lanes(Lane("main", paused=True), Lane("net", FETCH))
    assert presenter.quit_label(main_paused) == \
        "Quit (stops fetch_mail; it runs again at the next start)"


def test_a_job_running_in_a_lane_alone_runs_the_icon():
    """A snapshot whose main is idle: `running` is the first lane's job."""
    snapshot = in_lanes(Lane("main"), Lane("net", FETCH))
    assert snapshot.running == FETCH and state(snapshot) == Look.RUNNING


# -- the tooltip ---------------------------------------------------------------------------


def test_the_tooltip_names_each_running_job_with_its_lane():
    assert presenter.title(LANES, NOW) == \
        "sloth: Running: backup (main), fetch_mail (net) · 6 waiting · 1 failed · photos paused"
    alone = in_lanes(Lane("main"), Lane("net", FETCH, pending=2))
    assert presenter.title(alone, NOW) == "sloth: Running: fetch_mail (net) · 2 waiting"
    assert presenter.title(in_lanes(Lane("main"), Lane("net")), NOW) == "sloth: idle"


# -- the menu: a status line per busy lane --------------------------------------------------


def test_each_busy_lane_has_a_status_line_with_its_running_job_and_waiting_count():
    items = presenter.menu(LANES, Recorder(), NOW)
    assert labels(top_rows(items)) == [
        "main: Running backup (0:42) · 1 waiting",
        "net: Running fetch_mail (0:42) · 2 waiting",
        "photos: 3 waiting · paused",  # spare, with nothing to do, has no line
    ]
    assert [row.enabled for row in top_rows(items)] == [True, True, False]


def test_a_lanes_line_moves_its_time_and_keeps_its_key():
    at_start, later = (presenter.menu(LANES, Recorder(), NOW + seconds) for seconds in (0, 10))
    assert labels(top_rows(later))[:2] == ["main: Running backup (0:52) · 1 waiting",
                                          "net: Running fetch_mail (0:52) · 2 waiting"]

    def key_tree(items):
        return [(item.key, key_tree(item.submenu)) for item in items]

    assert key_tree(at_start) == key_tree(later)
    # A lane's line is its lane's, whatever the other lanes do
    main_done = in_lanes(Lane("main"), Lane("net", FETCH, pending=2))
    assert top_rows(presenter.menu(main_done, Recorder(), NOW))[0].key == \
        top_rows(at_start)[1].key


def test_in_a_host_a_lanes_line_keeps_its_id_while_its_time_and_other_lanes_move():
    from sloth_tray.tray.dbusmenu import ROOT_ID, MenuModel

    model = MenuModel()
    model.update(presenter.menu(LANES, Recorder(), NOW))

    def ids_by_key() -> dict[str, int]:
        return {model.nodes[node_id].item.key: node_id
                for node_id in model.nodes[ROOT_ID].children}

    before = ids_by_key()
    change = model.update(presenter.menu(LANES, Recorder(), NOW + 1))
    assert ids_by_key() == before and not change.layout  # relabels only
    assert {before["lane:main"], before["lane:net"]} <= {node for node, _ in change.updated}
    main_done = replace(LANES, lanes=(Lane("main"), *LANES.lanes[1:]), running=FETCH)
    model.update(presenter.menu(main_done, Recorder(), NOW + 2))
    assert ids_by_key()["lane:net"] == before["lane:net"]
    assert "lane:main" not in ids_by_key()


def test_a_stop_in_a_menu_still_showing_a_lanes_last_job_never_stops_its_next():
    """The lane's row stays; its Stop is the job's, so a click on the Stop a host
    still shows (its submenu open while the lane moved on) stops the job it showed."""
    from sloth_tray.tray.dbusmenu import ROOT_ID, MenuModel

    controls = Recorder()
    model = MenuModel()
    model.update(presenter.menu(LANES, controls, NOW))
    [net_id] = [node_id for node_id in model.nodes[ROOT_ID].children
                if model.nodes[node_id].item.key == "lane:net"]
    old_stop = model.nodes[net_id].children[0]
    following = RunningJob("n0000000002", "fetch_news", 1, 5, NOW, lane="net")
    moved_on = replace(LANES,
                       lanes=(LANES.lanes[0], replace(LANES.lanes[1], running=following),
                              *LANES.lanes[2:]))
    model.update(presenter.menu(moved_on, controls, NOW + 1), open_ids={net_id})
    model.clickable(old_stop).item.action()
    model.update(presenter.menu(moved_on, controls, NOW + 2))  # the submenu closed
    new_stop = model.nodes[net_id].children[0]
    assert new_stop != old_stop
    model.clickable(new_stop).item.action()
    assert controls.calls == [("stop", FETCH.id), ("stop", following.id)]


def test_a_lanes_line_names_the_step_and_an_attempt_after_the_first():
    fetch = replace(FETCH, attempt=2, step=(2, "upload"))
    items = presenter.menu(in_lanes(Lane("main"), Lane("net", fetch)), Recorder(), NOW)
    assert labels(top_rows(items)) == ["net: Running fetch_mail — step 2 upload "
                                       "(attempt 2, 0:42)"]


def test_each_running_job_has_its_own_row_whose_stop_stops_that_job():
    controls = Recorder()
    main_row, net_row, _photos = top_rows(presenter.menu(LANES, controls, NOW))
    for each in (net_row, main_row):
        assert labels(each.submenu) == ["Stop", "Show log"]
        for item in each.submenu:
            item.action()
    assert controls.calls == [("stop", FETCH.id), ("show_log", FETCH.id),
                              ("stop", BACKUP.id), ("show_log", BACKUP.id)]


def test_with_no_lane_busy_the_status_line_is_as_before():
    idle = in_lanes(Lane("main"), Lane("net"), next_wakeup=NOW + 240)
    [status] = top_rows(presenter.menu(idle, Recorder(), NOW))
    assert (status.label, status.key, status.enabled) == ("Idle — next job in 4 min",
                                                          "status", False)


def test_failed_and_waiting_entries_work_with_lanes():
    controls = Recorder()
    items = presenter.menu(LANES, controls, NOW)
    [failed] = row(items, "Failed jobs (1)").submenu
    [waiting] = row(items, "Waiting (6)").submenu
    for item in (row(failed.submenu, "Retry"), row(waiting.submenu, "Run now")):
        item.action()
    assert controls.calls == [("retry", BROKEN.id), ("run_now", "w0000000001")]


# -- the menu: Pause or Resume for every lane, and the Lanes submenu -------------------------


def test_the_lanes_submenu_has_each_lanes_pause_or_resume_folder_and_retry():
    items = presenter.menu(LANES, Recorder(), NOW)
    lanes = row(items, "Lanes")
    assert labels(lanes.submenu) == ["main", "net", "photos (paused)", "spare"]
    for lane in lanes.submenu:
        toggle = "Resume" if lane.label.endswith("(paused)") else "Pause"
        assert labels(lane.submenu) == [toggle, "Open folder", "Retry failed"]
        retry = lane.submenu[2]
        assert retry.enabled == (lane.label == "photos (paused)"), lane.label
    # Below Pause, among the rows that act on the app
    assert keys(items)[keys(items).index("sep-2"):][:3] == ["sep-2", "pause-all", "lanes"]


def test_the_top_pause_acts_on_every_lane_and_says_resume_once_nothing_starts():
    controls = Recorder()
    row(presenter.menu(LANES, controls, NOW), "Pause").action()
    everything = in_lanes(Lane("main", paused=True), Lane("net", pending=1, paused=True),
                          paused=True)
    items = presenter.menu(everything, controls, NOW)
    assert "Pause" not in labels(items)
    row(items, "Resume").action()
    one_by_one = in_lanes(Lane("main", paused=True), Lane("net", paused=True))
    row(presenter.menu(one_by_one, controls, NOW), "Resume").action()
    assert controls.calls == [("pause",), ("resume",), ("resume",)]


class FakeEngine(Recorder):
    """The engine as the tray calls it: every call recorded (lanes as given)."""

    recovered_at = NOW
    paused = False


class FakeSurface:
    name = "fake"
    has_default_action = True

    def set_menu(self, build) -> None:
        self.build = build

    def show(self, appearance) -> None:
        self.appearance = appearance

    def menu_changed(self) -> None:
        pass


class FakeDaemon:
    first_run = False

    def __init__(self, home, **settings) -> None:
        self.home, self.engine = home, FakeEngine()
        defaults = {key: spec.default for key, spec in config.KEYS.items()}
        self.settings = config.Settings(values={**defaults, **settings})


class Told:
    """A notifier that keeps what it was asked to show."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def notify(self, title: str, body: str, *_, **__) -> None:
        self.told.append((title, body))

    def withdraw(self, key: str) -> None:
        pass


def make_tray(tmp_path, **settings):
    from sloth_tray.tray.tray import Tray

    tmp_path.mkdir(exist_ok=True)
    home = locate(tmp_path / "home").ensure()
    opened: list = []
    tray = Tray(FakeDaemon(home, **settings), notifications=False, surface=FakeSurface(),
                opener=opened.append)
    return tray, opened


def test_each_lanes_row_calls_the_engine_with_its_lane(tmp_path):
    tray, opened = make_tray(tmp_path)
    (tray.home.jobs / "net").mkdir()
    lanes = {lane.label: lane for lane in row(presenter.menu(LANES, tray, NOW), "Lanes").submenu}
    net, photos = lanes["net"], lanes["photos (paused)"]
    row(net.submenu, "Pause").action()
    row(photos.submenu, "Resume").action()
    row(photos.submenu, "Retry failed").action()
    assert not row(net.submenu, "Retry failed").enabled
    row(net.submenu, "Open folder").action()
    row(lanes["main"].submenu, "Open folder").action()
    assert tray.engine.calls == [("pause", "net"), ("resume", "photos"),
                                 ("retry_all_failed", "photos")]
    assert opened == [tray.home.jobs / "net", tray.home.jobs]
    # every lane at once: the engine's calls with no lane
    items = presenter.menu(LANES, tray, NOW)
    row(items, "Pause").action()
    row(items, "Retry all failed").action()
    net_row = top_rows(items)[1]
    row(net_row.submenu, "Stop").action()
    assert tray.engine.calls[3:] == [("pause",), ("retry_all_failed",),
                                     ("stop_run", FETCH.id)]


def test_open_folder_of_a_lane_whose_folder_went_opens_the_jobs_folder(tmp_path):
    tray, opened = make_tray(tmp_path)
    tray.open_lane("gone")
    assert opened == [tray.home.jobs]


# -- with main alone, nothing changes ---------------------------------------------------------

# The menu for snapshots.BUSY before lanes (read in UTC): label [key], greyed, checked, default.
BEFORE_LANES = [
    'Running backup_home (attempt 2, 0:42) [a1]',
    '  Stop [stop]',
    '  Show log [show-log]',
    '- [sep-1]',
    'Failed jobs (4) [failed]',
    '  disk_check — disk 82% full [f1]',
    '    disk 82% full [error] off',
    '    - [sep-1]',
    '    Retry [retry]',
    '    Show log [show-log]',
    '    Cancel [cancel]',
    '  evil_link — refused: it is a symbolic link [r1]',
    '    refused: it is a symbolic link [error] off',
    '    - [sep-1]',
    '    Remove [remove]',
    '  tidy — failed 2 times since 12:45 [series:/spool/s1/tidy.sh]',
    '    Retry latest [retry-latest]',
    '    Cancel all 2 [cancel-all]',
    '    - [sep-1]',
    '    today 13:45 — exit 1 [s2]',
    '      exit 1 [error] off',
    '      - [sep-1]',
    '      Retry [retry]',
    '      Show log [show-log]',
    '      Cancel [cancel]',
    '    today 12:45 — exit 1 [s1]',
    '      exit 1 [error] off',
    '      - [sep-1]',
    '      Retry [retry]',
    '      Show log [show-log]',
    '      Cancel [cancel]',
    'Retry all failed [retry-all] default',
    'Schedules (1) [schedules]',
    '  tidy — every 1h · next 13:56 · last failed 13:45 [schedule:/spool/s1/tidy.sh]',
    '    Run now [run-now]',
    '    Pause this schedule [pause]',
    '    Show last log [show-last-log]',
    '    Cancel schedule [cancel-schedule]',
    'Waiting (1) [waiting]',
    '  tidy_downloads — in 4 min [w1]',
    '    Run now [run-now]',
    '    Cancel [cancel]',
    '- [sep-2]',
    'Pause [pause] checked=False',
    'Open jobs folder [open-jobs]',
    'Open logs [open-logs]',
    'Start at login [autostart] checked=False',
    '- [sep-3]',
    'Quit (stops backup_home; it runs again at the next start) [quit]',
]


def flat(items, depth: int = 0):
    for item in items:
        flags = (("" if item.enabled else " off")
                 + ("" if item.checked is None else f" checked={item.checked}")
                 + (" default" if item.default else ""))
        yield f"{'  ' * depth}{item.label} [{item.key}]{flags}"
        yield from flat(item.submenu, depth + 1)


def test_with_main_alone_the_menu_icon_and_tooltip_are_as_before_lanes():
    main_only = replace(BUSY,
                        lanes=(Lane("main", BUSY.running, pending=1, failed=4),))
    assert not has_lanes(main_only)
    for snapshot in (BUSY, main_only):
        assert list(flat(presenter.menu(snapshot, Recorder(), NOW, tz=UTC))) == BEFORE_LANES
        assert presenter.title(snapshot, NOW) == \
            "sloth: running backup_home · 1 waiting · 4 failed"
        assert presenter.look(snapshot) == Look.FAILED | Look.RUNNING
    idle = Snapshot(lanes=(Lane("main"),))
    assert list(flat(presenter.menu(idle, Recorder(), NOW))) == \
        list(flat(presenter.menu(Snapshot(), Recorder(), NOW)))
    assert presenter.title(idle, NOW) == "sloth: idle"


# -- notifications ----------------------------------------------------------------------------


def test_a_failures_notification_names_its_lane_unless_it_is_main():
    fetch = FailedJob("n1", "fetch_mail", "connection refused", NOW, lane="net")
    [notice] = Announcer().failures(Snapshot(), Snapshot(failed_count=1,
                                                         failed_jobs=(fetch,)), NOW)
    assert notice.body == "fetch_mail failed (lane net): connection refused"
    main = FailedJob("m1", "backup", "exit status 1", NOW)
    [notice] = Announcer().failures(Snapshot(), Snapshot(failed_count=1,
                                                         failed_jobs=(main,)), NOW)
    assert notice.body == "backup: exit status 1"
    both = Snapshot(failed_count=2, failed_jobs=(main, replace(fetch, at=NOW - 1)))
    [notice] = Announcer().failures(Snapshot(), both, NOW)  # in the order they failed
    assert notice.body == "fetch_mail (lane net), backup"


def burst(lane: str, count: int, **lane_more) -> list[Snapshot]:
    """`count` jobs dropped at once into `lane` run one after the other, then it is
    quiet; main stays idle."""
    shots = []
    for n in range(count):
        job = RunningJob(f"{lane}-{n}", f"job{n}", 1, 5, NOW + n, lane=lane)
        waiting = count - n - 1
        shots.append(in_lanes(Lane("main"), Lane(lane, job, pending=waiting,
                                                 due_now=waiting, **lane_more)))
    shots.append(in_lanes(Lane("main"), Lane(lane, **lane_more)))
    return shots


def told_by(bursts: LaneBursts, snapshots) -> list[LaneDone]:
    return [done for snapshot in snapshots for done in bursts.update(snapshot)]


def test_a_lane_done_with_a_burst_says_so_once():
    bursts = LaneBursts()
    quiet = in_lanes(Lane("main"), Lane("net"))
    [done] = told_by(bursts, [quiet, *burst("net", 5), quiet, quiet])
    assert done.body == "lane net: all 5 jobs done"
    assert told_by(bursts, burst("net", 1)) == []  # one job is no burst
    [again] = told_by(bursts, burst("net", 2))  # a new burst, once more
    assert again.body == "lane net: all 2 jobs done"


def test_a_lane_is_not_done_while_its_burst_retries_or_its_pause_holds_work():
    bursts = LaneBursts()
    *running, _quiet = burst("net", 3)
    retrying = in_lanes(Lane("main"), Lane("net", pending=1),
                        waiting=(WaitingJob("net-2", "job2", NOW + 60, lane="net"),))
    held = in_lanes(Lane("main"), Lane("net", pending=2, paused=True),
                    waiting=(WaitingJob("w1", "a", NOW, lane="net"),
                             WaitingJob("w2", "b", NOW, lane="net")))
    assert told_by(bursts, [*running, retrying, held]) == []
    # done: only the series' next run waits, due tomorrow (no part of the burst)
    tomorrow = in_lanes(Lane("main"), Lane("net", pending=1),
                        waiting=(WaitingJob("net-9", "nightly", NOW + 86400, lane="net"),))
    [done] = told_by(bursts, [tomorrow])
    assert done.body == "lane net: all 3 jobs done"


def test_a_burst_with_failures_says_how_many_failed_and_main_alone_names_no_lane():
    bursts = LaneBursts()
    *running, _quiet = burst("net", 3)
    failed = FailedJob("net-1", "job1", "exit status 1", NOW, lane="net")
    end = in_lanes(Lane("main"), Lane("net", failed=1), failed_jobs=(failed,))
    [done] = told_by(bursts, [*running, end])
    assert done.body == "lane net: 3 jobs ran, 1 failed"
    alone = LaneBursts()
    shots = [Snapshot(running=RunningJob(f"m{n}", "job", 1, 5, NOW),
                      lanes=(Lane("main", RunningJob(f"m{n}", "job", 1, 5, NOW)),))
             for n in range(2)]
    [done] = told_by(alone, [*shots, Snapshot(lanes=(Lane("main"),))])
    assert done.body == "All 2 jobs done"


def test_the_lane_done_notification_comes_only_with_its_setting_on(tmp_path):
    for setting, expected in ((False, []), (True, [("sloth-tray: jobs done",
                                                    "lane net: all 4 jobs done")])):
        tray, _opened = make_tray(tmp_path / str(setting), notify_lane_emptied=setting)
        tray.notifier = Told()
        for snapshot in burst("net", 4) + burst("net", 1):
            tray._show(snapshot)
        assert tray.notifier.told == expected


def test_the_setting_is_off_by_default_and_a_bad_value_is_one_sentence(tmp_path):
    assert config.load(tmp_path / "none.toml", env={})["notify_lane_emptied"] is False
    path = tmp_path / "config.toml"
    path.write_text("notify_lane_emptied = true\n")
    assert config.load(path, env={})["notify_lane_emptied"] is True
    path.write_text('notify_lane_emptied = "yes"\n')
    with pytest.raises(SlothError) as bad:
        config.load(path, env={})
    assert str(bad.value) == \
        f"{path}, line 1: bad value for notify_lane_emptied: use true or false"
