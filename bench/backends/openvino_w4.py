"""`openvino_w4`: NNCF's weight compression to INT4 (symmetric, groups of 32) of the exported twin in
OpenVINO, every layer (`all_layers`: the tables and the output layer too, NNCF's default keeps them int8).

A layer whose input width is no multiple of the group (DLRM's 13 dense features, a 415-wide top MLP
input) makes NNCF stop with an error unless its group-size fallback is `GroupSizeFallbackMode.ADJUST`
(a smaller group that divides the width, at least `min_adjusted_group_size`; layers with none stay int8)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend
from bench.config import BackendConfig
from bench.registry import register

GROUP_SIZE = 32


@dataclass
class OpenvinoW4Config(BackendConfig):
    name: str = "openvino_w4"


@register("backend", "openvino_w4", config=OpenvinoW4Config, in_sweeps=False, toolkit="openvino")
class OpenvinoW4Backend(OvBackend):
    quantizes = f"Linear weights and tables int4 symmetric, groups of {GROUP_SIZE} (adjusted where a width needs it), weight-only"

    def transform(self, model, calibration):
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=GROUP_SIZE, ratio=1.0, all_layers=True,
                                     advanced_parameters=AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST))
