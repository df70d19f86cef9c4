"""Checks of theory against measurement: a report, never a bare boolean."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Check:
    """One comparison of a predicted number with a measured one.

    ``passed`` is ``|measured − predicted| <= tolerance`` (and both finite). ``tolerance_from``
    says how the tolerance was obtained (printed with the row). ``independent`` is False for a row
    that another row implies (it can fail only when that one does): such a row is shown, and its
    failure still fails the run, but a count of checks leaves it out (:func:`summary_line`).
    ``schedule_based`` marks a row whose prediction is read off the realised schedule rather than
    computed from τ alone: it can fail on an engine bug but not on a wrong closed form, so it is
    counted apart too.
    """

    scenario: str
    algorithm: str
    quantity: str
    predicted: float
    measured: float
    tolerance: float
    tolerance_from: str = ""
    independent: bool = True
    schedule_based: bool = False

    @property
    def counted(self) -> bool:
        """Counted among the independent checks (neither implied nor schedule-based)."""
        return self.independent and not self.schedule_based

    @property
    def error(self) -> float:
        return abs(self.measured - self.predicted)

    @property
    def passed(self) -> bool:
        return bool(math.isfinite(self.measured) and math.isfinite(self.predicted) and self.error <= self.tolerance)

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario,
            "algorithm": self.algorithm,
            "quantity": self.quantity,
            "predicted": float(self.predicted),
            "measured": float(self.measured),
            "tolerance": float(self.tolerance),
            "tolerance_from": self.tolerance_from,
            "independent": self.counted,
            "schedule_based": self.schedule_based,
            "passed": self.passed,
        }


def format_table(checks) -> str:
    """A fixed-width table of checks, one per line, with a verdict column; where any check says
    how its tolerance was obtained, a column for that (rows implied by others marked "implied")."""
    checks = list(checks)
    notes = any(c.tolerance_from or not c.counted for c in checks)
    rows = [("scenario", "algorithm", "quantity", "predicted", "measured", "tolerance", "verdict")
            + (("tolerance from",) if notes else ())]
    for c in checks:
        note = "; ".join(x for x in (c.tolerance_from, "" if c.independent else "implied by the row above",
                                     "schedule-based prediction" if c.schedule_based else "") if x)
        rows.append(
            (c.scenario, c.algorithm, c.quantity, f"{c.predicted:.6g}", f"{c.measured:.6g}",
             f"{c.tolerance:.3g}", "pass" if c.passed else "FAIL") + ((note,) if notes else ())
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_line(checks) -> str:
    """"N of M independent checks pass" (rows implied by others and schedule-based rows counted
    apart), and the failures."""
    checks = list(checks)
    counted = [c for c in checks if c.counted]
    failed = [c for c in checks if not c.passed]
    implied = sum(not c.independent for c in checks)
    scheduled = [c for c in checks if c.schedule_based and c.independent]
    return (f"{sum(c.passed for c in counted)} of {len(counted)} independent checks pass"
            + (f"; {sum(c.passed for c in scheduled)} of {len(scheduled)} schedule-based rows (prediction read off"
               " the realised schedule) pass" if scheduled else "")
            + (f" ({implied} more rows, implied by those, shown)" if implied else "")
            + (f"; {len(failed)} FAIL" if failed else ""))
