"""The results of stored run records, below the report (which renders them) and the gate (which judges them).

- `key`: the row key declared once: its axes, their order, how a record gives each, how a row is named;
- `table`: the results table (one row per key, the newest record winning) with its speedups, verdict
  words and margins;
- `serving`: the serving table;
- `parts`: the parts of jobs recommend's plan runs (its facts and served batch times), read back;
- `load`: finding and reading a folder's stored records;
- `readable`: what counts as missing, and when an interval is too wide to read;
- `machine`: the table's columns of where each job stood against the machine;
- `tune`: a tune's rows, budget, sizes and result, and that result read back from a tune folder's records.
"""
