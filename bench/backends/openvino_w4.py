"""`openvino_w4`: NNCF's weight compression to INT4 (INT4_SYM; `backend.symmetric=false`: INT4_ASYM, a zero point per
group; groups of 32) of the exported twin in
OpenVINO, the tables too (`all_layers`: NNCF's default keeps embeddings and the output layer int8).

- A layer whose input width is no multiple of the group (DLRM's 13 dense features, a 415-wide top MLP
  input) makes NNCF stop with an error unless its group-size fallback is `GroupSizeFallbackMode.ADJUST`:
  a smaller group that divides the width, down to MIN_GROUP_SIZE (16: the tables of dim 16); a layer
  with none stays int8 (NNCF's backup mode).
- The output layer (one output feature) is in NNCF's ignored scope and stays fp32: compressed to int4
  with the rest, OpenVINO 2026.4.1's CPU plugin refused to compile the model (MatMul shape check).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.backends.ov_runtime import OvBackend, output_layers
from bench.backends.toolkit import ToolkitConfig
from bench.registry import register

GROUP_SIZE = 32
MIN_GROUP_SIZE = 16


@dataclass
class OpenvinoW4Config(ToolkitConfig):
    name: str = "openvino_w4"
    symmetric: bool = True  # int4 without a zero point (true), or with one per group (false, as FBGEMM's int4 rows: a scale and a bias)


@register("backend", "openvino_w4", config=OpenvinoW4Config, in_sweeps=False, toolkit="openvino")
class OpenvinoW4Backend(OvBackend):
    quantizes = (f"Linear weights and tables int4 (symmetric unless backend.symmetric=false: a zero point per group), groups of {GROUP_SIZE} (down to {MIN_GROUP_SIZE} where a width needs it, "
                 "else int8), weight-only; the output layer fp32")

    def transform(self, model, calibration):
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

        ignored = output_layers(model)
        fallback = AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST, min_adjusted_group_size=MIN_GROUP_SIZE)
        compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM if self.cfg.symmetric else nncf.CompressWeightsMode.INT4_ASYM, group_size=GROUP_SIZE, ratio=1.0, all_layers=True,
                                           ignored_scope=nncf.IgnoredScope(names=ignored) if ignored else None, advanced_parameters=fallback)
        return compressed, {"nncf_ignored_scope": ignored}
