"""Routes: the ways a job runs, behind one interface (`route.Route`).

    single.py    the unsharded model in this process (bench.pipeline.job)
    sharded.py   the tables sharded over ranks by torchrec's planner (bench.distributed)
    serving.py   a serving scenario through MLPerf's LoadGen (bench.serve)
    facts.py     a backend's ΔAUC and model bytes alone, nothing timed (`measure=facts`, recommend's stages 1-2)
    served.py    the serving function's batch times beside fp32's (`measure=served`, recommend's stage 3)

`route_for(cfg)` picks the job's route: the first in `ROUTES` that takes the config. A new way of
running jobs is one module here and one entry in `ROUTES`; the runner (bench.runner) does the rest.
"""

from __future__ import annotations

from bench.config import Config
from bench.routes.facts import FactsRoute
from bench.routes.route import Route
from bench.routes.served import ServedRoute
from bench.routes.serving import ServingRoute
from bench.routes.sharded import ShardedRoute
from bench.routes.single import SingleRoute

ROUTES: tuple[type[Route], ...] = (FactsRoute, ServedRoute, ShardedRoute, ServingRoute, SingleRoute)  # the first that takes a config runs it


def route_for(cfg: Config) -> Route:
    return next(route for route in ROUTES if route.takes(cfg))()


__all__ = ["ROUTES", "Route", "route_for"]
