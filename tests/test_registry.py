import pytest

from bench import registry
from bench.errors import UserError


def test_plugins_register_under_their_module_names():
    assert "fp32" in registry.names("backend")
    assert "synthetic" in registry.names("workload")
    for kind in registry.KINDS:
        for name, entry in registry.entries(kind).items():
            assert entry.name == name and entry.kind == kind
            assert entry.factory.__module__.rsplit(".", 1)[-1] == name or kind == "workload"


def test_unknown_name_is_a_user_error_listing_the_choices():
    with pytest.raises(UserError, match=r"unknown backend 'nope': choose one of .*fp32"):
        registry.get("backend", "nope")


def test_registering_a_name_twice_fails():
    registry.load_plugins()
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("backend", "fp32", config=object)(object)


def test_unknown_kind_fails():
    with pytest.raises(ValueError, match="unknown plug-in kind"):
        registry.register("launcher", "x", config=object)


def test_the_backends_named_by_role_are_registered_and_join_the_default_sweeps():
    for name in (registry.BASELINE_BACKEND, registry.BATCHED_BACKEND, registry.SPLIT_BACKEND, *registry.TOOLKIT_SWEEP_OWN):
        assert registry.entries("backend")[name].in_sweeps, name


def test_the_tunes_uniform_backends_come_from_each_tbe_backends_weight_type():
    from bench.tune.validate import uniform_backends

    found = uniform_backends()
    assert found == {"fp16": "fp16_tbe", "int8": "int8_tbe", "int4": "uint4", "int2": "int2_tbe"}
    assert all(registry.get("backend", name).factory.weight_dtype == dtype for dtype, name in found.items())
