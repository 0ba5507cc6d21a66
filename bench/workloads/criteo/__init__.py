"""Criteo click logs: text and binary readers, preprocessing, and the shared machinery of the
`criteo_*` workloads (registered by `bench/workloads/criteo_<name>.py`)."""
