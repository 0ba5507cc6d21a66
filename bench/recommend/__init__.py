"""`python -m bench recommend`: for this model on this machine, under a p99 bound and an AUC budget, the deployment to ship.

    decide.py    the funnel's decisions as pure functions: budget, memory, dominance, pick, front, what would change
    facts.py     stages 1-2: a backend's ΔAUC interval from the cached eval scores, and its model MB (cached)
    speed.py     stage 3: served batch times (interval from the paired offline speedups) -> the queue estimate of max QPS under the bound
    serving_path.py  stage 3: a backend's and fp32's served batch times, on the session's prepared modules
    confirm.py   stage 4: LoadGen Server runs of a candidate beside fp32's (the one function stage 4 calls)
    jobs.py      the jobs of stages 3-4 through run_job with resume, stored as records
    run.py       run_recommend(...) -> Outcome: the stages in order, within the time budget
    outputs.py   reports/recommend/<timestamp>/: recommend.md, recommend.json, front.png; the console lines
    ranges.py    the recommend's own values (objectives, candidate lists, sizes), checked before torch is imported
    command.py   `python -m bench recommend`: compose, check, run the funnel, write the folder, print the pick

This package's own import is light: `bench.cli` checks the ranges (bench.recommend.ranges) before torch loads,
and imports the funnel (bench.recommend.command) after.

Exit codes: 0 with a pick, 1 when no candidate meets the constraints (the nearest miss named, with what it
would need), 2 for bad input (one line, before any work, nothing stored), 130 interrupted (the jobs measured
so far keep their records; the same command measures only the rest).
"""
