"""A test plug-in: `test_constant`, a backend whose output is the same for every sample.

It stands for the known real case, Neural Compressor's dynamic int8 converted without a calibration forward
between `prepare` and `convert`: the model still runs and gives finite scores, but they no longer depend on
the input. Here the fp32 model's copy gets every Linear's weights zeroed, so each score is the output layer's
bias. `python -m tests.support.constant_backend ARGS` runs `python -m bench ARGS` with it registered
(`backend=test_constant`); only that process sees it (tests/test_output_guard.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from hydra.core.config_store import ConfigStore
from torch import nn

from bench.backends.backend import Backend
from bench.backends.modules import materialize_random_tables
from bench.config import BackendConfig
from bench.registry import register

NAME = "test_constant"


@dataclass
class ConstantConfig(BackendConfig):
    name: str = NAME


@register("backend", NAME, config=ConstantConfig, in_sweeps=False)
class ConstantBackend(Backend):
    def prepare(self, model, calibration_batches, device):
        model = materialize_random_tables(copy.deepcopy(model)).to(device).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.Linear):
                    m.weight.zero_()
        return model


def main() -> None:
    """`python -m bench` with this plug-in: its config option lives in Hydra's ConfigStore, not in a YAML of conf/,
    so the command line's own check of group options (which lists conf/backend/*.yaml) is told of it too."""
    from bench import cli

    ConfigStore.instance().store(group="backend", name=NAME, node=ConstantConfig)
    listed = cli.group_options
    cli.group_options = lambda group: sorted({*listed(group), NAME}) if group == "backend" else listed(group)
    cli.main()


if __name__ == "__main__":
    main()
