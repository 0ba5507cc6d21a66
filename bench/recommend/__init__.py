"""`python -m bench recommend`: for this model on this machine, under a p99 bound and an AUC budget, the deployment to ship.

    decide.py    the funnel's decisions as pure functions: budget, memory, dominance, pick, front, what would change
    speed.py     stage 3: served batch times (interval from the paired offline speedups) -> the queue estimate of max QPS under the bound
    confirm.py   stage 4: LoadGen Server runs of a candidate beside fp32's (the one function stage 4 calls)
    jobs.py      the plan's jobs through run_job with resume, stored as records: each backend's facts (stages 1-2: its
                 ΔAUC and model MB, bench.routes.facts), its paired offline jobs and served batch times (stage 3,
                 bench.routes.served), its paired Server jobs (stage 4)
    run.py       run_recommend(...) -> Outcome: the stages in order, within the time budget; the figures read back
                 from each job's record (bench.results.parts)
    outputs.py   reports/recommend/<timestamp>/: recommend.md, recommend.json, front.png; the console lines
    ranges.py    the recommend's own values (objectives, candidate lists, sizes), checked before torch is imported
    command.py   `python -m bench recommend`: compose, check, run the funnel, write the folder, print the pick

This package's own import is light: `bench.cli` checks the ranges (bench.recommend.ranges) before torch loads,
and imports the funnel (bench.recommend.command) after.

Exit codes: 0 with a pick, 1 when no candidate meets the constraints (the nearest miss named, with what it
would need), 2 for bad input (one line, before any work, nothing stored), 130 interrupted (the jobs measured
so far keep their records; the same command measures only the rest).
"""
