"""How the tray's menu is numbered for dbusmenu hosts, and what a host is told on a change.

The rules are what the real hosts need (each seen with the host itself):
- GNOME's AppIndicator extension reads a known row's properties only when told
  (`ItemsPropertiesUpdated`), and never moves a known row;
- libdbusmenu (Xfce, waybar) breaks an open submenu whose row changes id, and closes
  it when its parent's layout is sent again;
- KDE fetches again only the parent a `LayoutUpdated` names.
Pure: MenuModel has no bus.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from sloth_tray.tray.dbusmenu import ROOT_ID, MenuModel
from sloth_tray.tray.presenter import Item


def noop() -> None:
    return None


def sep(key: str) -> Item:
    return Item("-", key=key)


def menu(running: str = "Running tidy (0:01)", waiting: int = 1, failed: bool = False,
         paused: bool = False) -> tuple[Item, ...]:
    rows = tuple(Item(f"job {n} — in 5 min", key=f"w{n}",
                      submenu=(Item("Run now", noop, key="run-now"),))
                 for n in range(waiting))
    return (
        Item(running, enabled=False, key="status"),
        sep("sep-1"),
        Item("Retry all failed", noop, enabled=failed, key="retry-all"),
        Item(f"Waiting ({waiting})", enabled=bool(rows), submenu=rows, key="waiting"),
        sep("sep-2"),
        Item("Pause", noop, checked=paused, key="pause"),
        Item("Quit", noop, key="quit"),
    )


def ids(model: MenuModel, parent: int = ROOT_ID) -> list[int]:
    return list(model.nodes[parent].children)


def label(model: MenuModel, node_id: int) -> str:
    node = model.nodes[node_id]
    return dict((name, value) for name, _sig, value in node.props).get("label", "-")


def test_a_relabelled_row_keeps_its_id_and_is_sent_as_a_property_change_only():
    model = MenuModel()
    model.update(menu())
    before, revision = ids(model), model.revision
    change = model.update(menu(running="Running tidy (0:02)"))
    assert ids(model) == before
    assert model.revision == revision and change.parents == []
    [(node_id, props)] = change.updated
    assert node_id == before[0] and props["label"].value == "Running tidy (0:02)"


def test_a_row_enabled_and_a_check_mark_cleared_reach_a_host_that_knows_the_rows():
    """After a failure "Retry all failed" must become clickable on GNOME, and a resumed
    queue must lose its check mark: both rows stay, so only a property change tells."""
    model = MenuModel()
    model.update(menu(paused=True))
    retry, pause = ids(model)[2], ids(model)[5]
    change = model.update(menu(failed=True, paused=False))
    updated = {node_id: {k: v.value for k, v in props.items()}
               for node_id, props in change.updated}
    assert updated == {retry: {"enabled": True}, pause: {"toggle-state": 0}}
    assert change.parents == []


def test_a_submenu_gaining_a_row_is_one_layout_change_of_that_submenu():
    model = MenuModel()
    model.update(menu(waiting=1))
    waiting = ids(model)[3]
    first = ids(model, waiting)
    change = model.update(menu(waiting=2))
    assert ids(model)[3] == waiting, "a parent whose label changes keeps its id"
    assert ids(model, waiting)[0] == first[0]
    assert change.parents == [waiting]
    assert [(node_id, props["label"].value) for node_id, props in change.updated] == [
        (waiting, "Waiting (2)")]


def test_a_row_that_changes_kind_gets_a_new_id():
    """A host builds a row once per id: a plain row cannot grow a submenu there."""
    model = MenuModel()
    model.update(menu(waiting=0))
    empty = ids(model)[3]
    change = model.update(menu(waiting=1))
    assert ids(model)[3] != empty
    assert change.parents == [ROOT_ID]


def test_rows_that_stay_keep_their_order_and_a_moved_one_comes_back_as_new():
    model = MenuModel()
    rows = (Item("a", noop, key="a"), Item("b", noop, key="b"), Item("c", noop, key="c"))
    model.update(rows)
    a, b, c = ids(model)
    change = model.update((rows[2], rows[0], rows[1]))  # c moves to the top
    new_c, same_a, same_b = ids(model)
    assert (same_a, same_b) == (a, b) and new_c not in (a, b, c)
    assert change.parents == [ROOT_ID]


def test_a_moved_row_whose_submenu_is_open_keeps_its_id():
    model = MenuModel()
    rows = (Item("a", noop, key="a"), Item("b", key="b", submenu=(Item("x", noop, key="x"),)))
    model.update(rows)
    _a, b = ids(model)
    model.update((rows[1], rows[0]), open_ids={b})
    assert ids(model)[0] == b


def test_a_renumbered_row_renumbers_all_below_it_and_no_id_is_ever_reused():
    model = MenuModel()
    sub = (Item("x", noop, key="x"),)
    rows = (Item("a", noop, key="a"), Item("b", key="b", submenu=sub))
    model.update(rows)
    seen = set(model.nodes)
    model.update((rows[1], rows[0]))
    b = ids(model)[0]
    assert not set(ids(model, b)) & seen
    seen |= set(model.nodes)
    model.update((rows[0],))
    model.update(rows)  # b comes back: a new row to a host, with new ids
    back = set(model.nodes) - set(ids(model)[:1]) - {ROOT_ID}
    assert back and not back & seen


def test_separators_and_rows_alike_each_keep_their_own_id():
    model = MenuModel()
    rows = (sep("s1"), Item("same", noop), Item("same", noop), sep("s2"))
    model.update(rows)
    first = ids(model)
    assert len(set(first)) == 4
    model.update(rows)
    assert ids(model) == first


def test_nothing_changed_is_nothing_to_tell():
    model = MenuModel()
    model.update(menu())
    assert not model.update(menu())


def gnome_draws(drawn: list[int], layout: list[int]) -> list[int]:
    """What GNOME's AppIndicator extension (46) draws for a parent's new layout: each
    new id inserted at its layout index among the rows it still draws (the gone ones
    included, removed only at the end); a known row never moved."""
    rows = list(drawn)
    for index, node_id in enumerate(layout):
        if node_id not in drawn:
            rows.insert(index, node_id)
    return [node_id for node_id in rows if node_id in layout]


@given(st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8), max_size=8))
def test_whatever_comes_and_goes_a_host_that_never_moves_rows_draws_the_layout(menus):
    model = MenuModel()
    drawn: list[int] = []
    for keys in menus:
        model.update(tuple(Item(k.upper(), noop, key=k) for k in keys))
        now = ids(model)
        assert len(set(now)) == len(now)
        drawn = gnome_draws(drawn, now)
        assert drawn == now
        assert [label(model, node_id) for node_id in now] == [k.upper() for k in keys]


def test_a_row_gone_above_a_new_one_does_not_shift_it():
    """Seen in GNOME: Failed jobs (0) became a submenu row (a new id) while the row
    above went, and the separator was drawn under it."""
    model = MenuModel()
    rows = [Item("status", key="status"), sep("s1"), Item("Failed (0)", key="failed-none"),
            Item("Retry", noop, key="retry"), sep("s2")]
    model.update(tuple(rows))
    drawn = ids(model)
    rows[0] = Item("Running x", key="job-1", submenu=(Item("Stop", noop, key="stop"),))
    rows[2] = Item("Failed (1)", key="failed", submenu=(Item("x", noop, key="x"),))
    model.update(tuple(rows))
    assert gnome_draws(drawn, ids(model)) == ids(model)


def test_a_key_given_twice_among_siblings_still_numbers_both():
    model = MenuModel()
    model.update((Item("x", noop, key="k"), replace(Item("y", noop), key="k")))
    assert len(set(ids(model))) == 2


def test_a_row_replaced_alone_leaves_every_other_row_its_id():
    """A job starts: the status line becomes the running job's row. A host that never
    moves rows draws that right without renumbering the rows below it."""
    model = MenuModel()
    rows = list(menu())
    model.update(tuple(rows))
    before = ids(model)
    rows[0] = Item("Running tidy (0:00)", key="job-7", submenu=(Item("Stop", noop, key="stop"),))
    model.update(tuple(rows))
    assert ids(model)[1:] == before[1:] and ids(model)[0] != before[0]
    assert gnome_draws(before, ids(model)) == ids(model)


def test_an_open_submenu_keeps_its_rows_until_it_closes_while_their_labels_move():
    """waybar (GTK on Wayland) draws an open submenu that gains a row as a blank strip:
    an open submenu's rows do not come or go while it is open; its parent's label and
    its rows' labels move; the change comes when it has closed."""
    model = MenuModel()
    model.update(menu(waiting=1))
    waiting = ids(model)[3]
    [first] = ids(model, waiting)
    change = model.update(menu(waiting=2), open_ids={waiting})
    assert ids(model)[3] == waiting and ids(model, waiting) == [first]
    assert change.parents == []
    assert [props["label"].value for _id, props in change.updated] == ["Waiting (2)"]
    model.update(menu(waiting=2))  # closed: the new row comes
    [first, second] = ids(model, waiting)
    rows = menu(waiting=2)
    one_started = replace(rows[3], label="Waiting (1)", submenu=rows[3].submenu[1:])
    change = model.update((*rows[:3], one_started, *rows[4:]), open_ids={waiting})
    assert ids(model, waiting) == [first, second]  # the started one stays, while open
    assert label(model, first) == "job 0 — in 5 min" and change.parents == []
    change = model.update((*rows[:3], one_started, *rows[4:]))  # closed
    assert ids(model, waiting) == [second] and change.parents == [waiting]


def window(first: int) -> tuple[Item, ...]:
    """The menu with three waiting rows, the oldest gone as each new one comes."""
    rows = tuple(Item(f"job {n}", noop, key=f"w{n}") for n in range(first, first + 3))
    return (Item("Waiting (3)", submenu=rows, key="waiting"), Item("Quit", noop, key="quit"))


def test_a_host_that_fetches_only_the_changed_submenu_leaves_no_old_row_held():
    """KDE fetches again only the parent a LayoutUpdated names: each row it no longer
    holds must be let go (it held every row ever shown, 43 MB after 50,000 changes, and
    each fetch copied them all), while a click that crossed the fetch still works."""
    model = MenuModel()
    model.update(window(0))
    model.layout(ROOT_ID, -1)
    for first in range(1, 300):
        shown = ids(model, ids(model)[0])
        for parent in model.update(window(first)).parents:
            model.layout(parent, -1)
    rows = ids(model, ids(model)[0])
    assert all(model.clickable(row) is not None for row in rows)
    assert model.clickable(shown[0]).item.key == "w298", "a click crossing the fetch"
    assert len(model._served) <= len(model.nodes) + 3, len(model._served)


def test_two_submenus_fetched_back_to_back_both_keep_a_crossing_click():
    """A job that moves from Waiting to Failed changes both submenus; KDE fetches one,
    then the other: a click on a row the first fetch let go of still works."""
    def menu_of(first: int) -> tuple[Item, ...]:
        def rows(kind: str) -> tuple[Item, ...]:
            return tuple(Item(f"{kind} {n}", noop, key=f"{kind}{n}")
                         for n in range(first, first + 3))
        return (Item("Waiting", submenu=rows("w"), key="waiting"),
                Item("Failed", submenu=rows("f"), key="failed"))

    model = MenuModel()
    model.update(menu_of(0))
    model.layout(ROOT_ID, -1)
    waiting, failed = ids(model)
    first_waiting_row = ids(model, waiting)[0]
    change = model.update(menu_of(1))
    assert sorted(change.parents) == sorted([waiting, failed])
    for parent in (waiting, failed):
        model.layout(parent, -1)
    assert model.clickable(first_waiting_row).item.key == "w0"
