"""What the tune measured: one `Row` per candidate and split (a row of tune.csv), and the budget.

They live in bench.results.tune, below the report that renders a tune and the tune that measures one."""

from bench.results.tune import KINDS, Budget, Row, delta

__all__ = ["KINDS", "Budget", "Row", "delta"]
