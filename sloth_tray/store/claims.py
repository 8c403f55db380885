"""A claim's statements, built in one place: what Queue.claim runs to lease the oldest
due job, or to take back a lapsed lease first. The docstring of claim_statements shows
the SQL whole (tests hold it to what SQLite runs)."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from sloth_tray.store import lanes, reads
from sloth_tray.store.rows import JOB_COLUMNS


class ClaimStatements(NamedTuple):
    """What a claim runs (claim_statements), and what its clauses bind."""

    due: str
    lapsed: str
    taken_back: str
    ahead: str
    params: dict[str, str]


def claim_statements(lane: str | None = None, skip_lanes: Collection[str] = (),
                     unmet: frozenset[str] | set[str] = frozenset()) -> ClaimStatements:
    """The statements a claim runs, built here alone; as they read with no lane given,
    none skipped and every condition met:

    `due`, the usual claim: one statement leases the oldest due pending job of a lane
    that takes one (none of its jobs running, lease live or lapsed; the lane not
    paused, by itself or with the whole queue, unless resumed by itself), of a series
    not paused on its own (reads.NOT_HELD). Atomic on
    its own, so two claims, from any processes, never lease two jobs of one lane::

        UPDATE jobs SET state = 'running', lease_owner = :owner,
            lease_until = :now + coalesce(json_extract(options, '$.lease'), :lease),
            attempts = attempts + 1, runs = runs + 1, updated_at = :now, child = :child,
            history = json_insert(history, '$[#]', json_array(:now, 'claimed',
                'attempt ' || (attempts + 1) || ' of ' || max_attempts || ' by ' || :owner))
        WHERE rowid = (SELECT rowid FROM jobs WHERE state = 'pending' AND not_before <= :now
            AND NOT EXISTS (SELECT 1 FROM jobs AS busy INDEXED BY jobs_live_lane
                WHERE state NOT IN ('done', 'cancelled') AND state = 'running'
                AND busy.lane = jobs.lane)
            AND NOT EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = 1)
            AND (NOT EXISTS (SELECT 1 FROM flags WHERE name = 'paused' AND value)
                OR EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = -1))
            AND coalesce(script, name) NOT IN (SELECT series FROM paused_series)
            ORDER BY not_before, rowid LIMIT 1)
        RETURNING id, name, state, attempts, max_attempts, not_before, lease_owner,
            lease_until, last_error, result, script, options, created_at, updated_at,
            child, reason, runs, lane, key, source

    `lapsed`: the lapsed lease to take back first, if one lapsed no later than that
    job fell due. It is its lane's one running job, so only the lane's pause holds
    it back::

        SELECT id FROM jobs WHERE state = 'running' AND lease_until <= :now
            AND NOT EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = 1)
            AND (NOT EXISTS (SELECT 1 FROM flags WHERE name = 'paused' AND value)
                OR EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = -1))
            AND lease_until <= coalesce((SELECT not_before FROM jobs
                WHERE state = 'pending' AND not_before <= :now
                AND NOT EXISTS (SELECT 1 FROM jobs AS busy INDEXED BY jobs_live_lane
                    WHERE state NOT IN ('done', 'cancelled') AND state = 'running'
                    AND busy.lane = jobs.lane)
                AND NOT EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = 1)
                AND (NOT EXISTS (SELECT 1 FROM flags WHERE name = 'paused' AND value)
                    OR EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = -1))
                AND coalesce(script, name) NOT IN (SELECT series FROM paused_series)
                ORDER BY not_before, rowid LIMIT 1), lease_until)
        ORDER BY lease_until, rowid LIMIT 1

    `taken_back`: that job (:id), once ends.reclaim took it back, leased as `due`
    leases one, its history saying why (:reclaimed)::

        UPDATE jobs SET state = 'running', lease_owner = :owner,
            lease_until = :now + coalesce(json_extract(options, '$.lease'), :lease),
            attempts = attempts + 1, runs = runs + 1, updated_at = :now, child = :child,
            history = json_insert(history,
                '$[#]', json_array(:now, 'reclaimed', :reclaimed),
                '$[#]', json_array(:now, 'claimed',
                'attempt ' || (attempts + 1) || ' of ' || max_attempts || ' by ' || :owner))
        WHERE id = :id
        RETURNING id, name, state, attempts, max_attempts, not_before, lease_owner,
            lease_until, last_error, result, script, options, created_at, updated_at,
            child, reason, runs, lane, key, source

    `ahead`: the job `due` would lease once the lane's running job has ended, read
    and not leased (the engine prepares its run while the one before runs): `due`'s
    choice without its look at the lane's running job::

        SELECT id, name, state, attempts, max_attempts, not_before, lease_owner,
            lease_until, last_error, result, script, options, created_at, updated_at,
            child, reason, runs, lane, key, source
        FROM jobs WHERE state = 'pending' AND not_before <= :now
            AND NOT EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = 1)
            AND (NOT EXISTS (SELECT 1 FROM flags WHERE name = 'paused' AND value)
                OR EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane AND paused = -1))
            AND coalesce(script, name) NOT IN (SELECT series FROM paused_series)
            ORDER BY not_before, rowid LIMIT 1

    Right after each `<= :now`, in this order: for a pending job, when a condition is
    unmet, reads.not_waiting's `AND NOT coalesce(instr(',' ||
    json_extract(options, '$.require') || ',', :unmet0) OR ..., 0)`; then `AND lane =
    :lane` for one lane (`lane`), and `AND lane NOT IN (:skip0, ...)` for the lanes
    skipped (`skip_lanes`). `params` binds them.
    """
    # Glued from the conditions others share: lanes.CLAIMABLE, lanes.NOT_PAUSED and
    # reads.NOT_HELD (next_wakeup's too), reads.not_waiting (status's too). No
    # clause for a condition met or a lane not named: the usual claim is the same
    # statement every time.
    waits, params = reads.not_waiting(unmet)
    in_lane = ""
    if lane is not None:
        in_lane, params = " AND lane = :lane", params | {"lane": lane}
    if skip_lanes:
        skipped = {f"skip{i}": name for i, name in enumerate(sorted(skip_lanes))}
        in_lane += f" AND lane NOT IN ({', '.join(':' + key for key in skipped)})"
        params |= skipped
    oldest_due = (f"FROM jobs WHERE state = 'pending' AND not_before <= :now{waits}{in_lane} "
                  f"AND {lanes.CLAIMABLE} AND {reads.NOT_HELD} "
                  "ORDER BY not_before, rowid LIMIT 1")
    # The lease, given to :owner at :now for the job's own lease= or :lease seconds;
    # the run's token (:child) is kept from the claim on. Its expressions read the row
    # as it was: `attempts + 1` is the attempt this claim starts.
    lease = ("UPDATE jobs SET state = 'running', lease_owner = :owner, "
             "lease_until = :now + coalesce(json_extract(options, '$.lease'), :lease), "
             "attempts = attempts + 1, runs = runs + 1, updated_at = :now, child = :child, "
             "history = json_insert(history, ")
    claimed = ("'$[#]', json_array(:now, 'claimed', 'attempt ' || (attempts + 1) || ' of ' "
               "|| max_attempts || ' by ' || :owner))")
    return ClaimStatements(
        due=(f"{lease}{claimed} WHERE rowid = (SELECT rowid {oldest_due}) "
             f"RETURNING {JOB_COLUMNS}"),
        lapsed=("SELECT id FROM jobs WHERE state = 'running' "
                f"AND lease_until <= :now{in_lane} AND {lanes.NOT_PAUSED} "
                f"AND lease_until <= coalesce((SELECT not_before {oldest_due}), lease_until) "
                "ORDER BY lease_until, rowid LIMIT 1"),
        taken_back=(f"{lease}'$[#]', json_array(:now, 'reclaimed', :reclaimed), {claimed} "
                    f"WHERE id = :id RETURNING {JOB_COLUMNS}"),
        ahead=(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'pending' "
               f"AND not_before <= :now{waits}{in_lane} AND {lanes.NOT_PAUSED} "
               f"AND {reads.NOT_HELD} ORDER BY not_before, rowid LIMIT 1"),
        params=params)
