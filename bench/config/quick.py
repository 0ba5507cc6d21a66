"""The tiny configuration (`conf/preset/tiny.yaml`): a job runs end to end in seconds on 2 cores. The
tests and the suites' quick mode start from it; a user's first run too (`+preset=tiny`)."""

TINY_OVERRIDES = ["+preset=tiny"]
