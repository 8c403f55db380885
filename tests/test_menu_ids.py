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

from sloth_tray.desktop.dbusmenu import ROOT_ID, MenuModel, in_order
from sloth_tray.presenter import Item


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


@given(st.lists(st.integers(0, 30), unique=True, max_size=12))
def test_in_order_keeps_a_longest_increasing_run(positions):
    kept = in_order(positions)
    chosen = [p for p in positions if p in kept]
    assert chosen == sorted(chosen)
    # no longer increasing subsequence exists (checked by brute force on small input)
    best = [1] * len(positions)
    for i in range(len(positions)):
        for j in range(i):
            if positions[j] < positions[i]:
                best[i] = max(best[i], best[j] + 1)
    assert len(kept) == max(best, default=0)


@given(st.lists(st.lists(st.sampled_from("abcdef"), unique=True, max_size=6), max_size=8))
def test_any_sequence_of_menus_keeps_survivors_in_order_and_ids_unique(menus):
    """Whatever comes and goes, what a host that never moves rows draws is the layout:
    the rows that kept their ids are in their old order."""
    model = MenuModel()
    for keys in menus:
        before = ids(model)
        model.update(tuple(Item(k.upper(), noop, key=k) for k in keys))
        now = ids(model)
        assert len(set(now)) == len(now)
        kept = [node_id for node_id in now if node_id in before]
        assert kept == [node_id for node_id in before if node_id in kept]
        assert [label(model, node_id) for node_id in now] == [k.upper() for k in keys]


def test_a_key_given_twice_among_siblings_still_numbers_both():
    model = MenuModel()
    model.update((Item("x", noop, key="k"), replace(Item("y", noop), key="k")))
    assert len(set(ids(model))) == 2
