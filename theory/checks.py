"""Checks of theory against measurement: a report, never a bare boolean."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Check:
    """One comparison of a predicted number with a measured one.

    ``passed`` is ``|measured − predicted| <= tolerance`` (and both finite).
    """

    scenario: str
    algorithm: str
    quantity: str
    predicted: float
    measured: float
    tolerance: float

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
            "passed": self.passed,
        }


def format_table(checks) -> str:
    """A fixed-width table of checks, one per line, with a verdict column."""
    rows = [("scenario", "algorithm", "quantity", "predicted", "measured", "tolerance", "verdict")]
    for c in checks:
        rows.append(
            (c.scenario, c.algorithm, c.quantity, f"{c.predicted:.6g}", f"{c.measured:.6g}",
             f"{c.tolerance:.3g}", "pass" if c.passed else "FAIL")
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
