"""Totals over the whole store, for monitoring (``/metrics``): runs and cost by state, webhook
deliveries, preemptions and recoveries. One aggregate query each, whatever the number of runs."""

from __future__ import annotations

from dataclasses import dataclass

from corral.store._core import StoreBase
from corral.wire.outcome import OutcomeKind


@dataclass(frozen=True, slots=True)
class StateTotals:
    state: str
    runs: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class WebhookTotals:
    delivered: int
    failed: int


@dataclass(frozen=True, slots=True)
class AttemptTotals:
    #: attempts that ended preempted (the provider took the machine back, or the job exited
    #: with the SDK's "preempted" code)
    preempted: int
    #: attempts after a run's first: each one a recovery (after a preemption or an error)
    #: that got as far as launching
    recoveries: int


class StatsOps(StoreBase):
    def run_totals(self) -> list[StateTotals]:
        """How many runs are in each state and what they cost together (states with no run
        are left out), by state name."""
        sql = (
            "SELECT state, COUNT(*) AS n, COALESCE(SUM(cost_usd), 0) AS cost "
            "FROM runs GROUP BY state ORDER BY state"
        )
        with self._db.transaction() as tx:
            rows = tx.all(sql, {})
        return [StateTotals(str(r["state"]), int(r["n"]), float(r["cost"])) for r in rows]

    def webhook_totals(self) -> WebhookTotals:
        """Webhook deliveries made and given up on, over every run and webhook."""
        sql = (
            "SELECT COALESCE(SUM(delivered), 0) AS delivered, COALESCE(SUM(failed), 0) AS failed "
            "FROM webhook_cursors"
        )
        with self._db.transaction() as tx:
            row = tx.one(sql, {})
        if row is None:
            return WebhookTotals(0, 0)
        return WebhookTotals(int(row["delivered"]), int(row["failed"]))

    def attempt_totals(self) -> AttemptTotals:
        """Preemptions and recoveries over every run's attempts (an attempt number reused
        after no capacity is one row, so each counts once)."""
        sql = (
            "SELECT COALESCE(SUM(CASE WHEN exit_reason = :preempted THEN 1 ELSE 0 END), 0) AS p, "
            "COALESCE(SUM(CASE WHEN number > 1 THEN 1 ELSE 0 END), 0) AS r FROM attempts"
        )
        with self._db.transaction() as tx:
            row = tx.one(sql, {"preempted": OutcomeKind.PREEMPTED.value})
        if row is None:
            return AttemptTotals(0, 0)
        return AttemptTotals(int(row["p"]), int(row["r"]))
