"""Import facebookresearch/dlrm (DLRM v1) checkpoints into the torchrec `DLRM` of `build_dlrm`.

facebookresearch/dlrm keys and where they go:

    emb_l.<t>.weight          -> sparse_arch.embedding_bag_collection.embedding_bags.<table t>.weight
    bot_l.<2j>.weight/bias    -> dense_arch.model._mlp.<j>._linear.weight/bias
    top_l.<2j>.weight/bias    -> over_arch.model.0._mlp.<j>._linear.weight/bias (all but the last)
    top_l.<2L>.weight/bias    -> over_arch.model.1.weight/bias (the last layer)

`bot_l` / `top_l` are `nn.Sequential`s with an activation after every `Linear`, so the linear
layers sit at the even indices. Table t is the model's t-th table (feature cat_t). The dot
interaction orders its pairs differently: dlrm takes the strictly lower triangle row by row,
`(1,0), (2,0), (2,1), (3,0), ...`, torchrec the strictly upper triangle row by row, `(0,1), (0,2),
..., (1,2), ...`, so the interaction columns of the first top layer are permuted to match. The
last top layer feeds a sigmoid in dlrm; torchrec's DLRM returns the logit, so the probabilities
agree.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from bench.errors import UserError

_EMB = re.compile(r"emb_l\.(\d+)\.weight")
_MLP = re.compile(r"(bot_l|top_l)\.(\d+)\.(weight|bias)")


def is_fb_dlrm_state_dict(sd: dict) -> bool:
    return any(_EMB.fullmatch(k.removeprefix("module.")) for k in sd)


def interaction_permutation(num_vectors: int) -> torch.Tensor:
    """perm[k] = index in dlrm's pair order of torchrec's k-th pair (over `num_vectors` vectors)."""
    fb = {(j, i): k for k, (i, j) in enumerate((i, j) for i in range(num_vectors) for j in range(i))}
    rows, cols = torch.triu_indices(num_vectors, num_vectors, offset=1)
    return torch.tensor([fb[(int(a), int(b))] for a, b in zip(rows, cols)], dtype=torch.long)


def _table_names(model: nn.Module) -> list[str]:
    try:
        ebc = model.sparse_arch.embedding_bag_collection
    except AttributeError:
        raise UserError("facebookresearch/dlrm checkpoints load into a torchrec DLRM (model.arch=dlrm)") from None
    return [c.name for c in ebc.embedding_bag_configs()]


def convert_fb_dlrm_state_dict(sd: dict, model: nn.Module) -> dict:
    """A facebookresearch/dlrm state dict as `model`'s state dict (shapes checked, one-line errors)."""
    sd = {k.removeprefix("module."): v for k, v in sd.items()}
    target = model.state_dict()
    if not any(k.startswith("over_arch.model.1.") for k in target) or any("crossnet" in k for k in target):
        raise UserError("facebookresearch/dlrm v1 checkpoints map onto model.arch=dlrm (dot interaction) only")
    tables = _table_names(model)
    out: dict[str, torch.Tensor] = {}
    emb: dict[int, torch.Tensor] = {}
    layers: dict[str, dict[int, dict[str, torch.Tensor]]] = {"bot_l": {}, "top_l": {}}
    unknown = []
    for k, v in sd.items():
        if m := _EMB.fullmatch(k):
            emb[int(m.group(1))] = v
        elif m := _MLP.fullmatch(k):
            layers[m.group(1)].setdefault(int(m.group(2)), {})[m.group(3)] = v
        else:
            unknown.append(k)
    if unknown:
        raise UserError(f"checkpoint has keys this importer does not know: {', '.join(sorted(unknown)[:5])} (QR/MD embeddings are not supported)")
    if sorted(emb) != list(range(len(tables))):
        raise UserError(f"checkpoint has {len(emb)} embedding tables (emb_l.*), the model has {len(tables)}")
    for t, name in enumerate(tables):
        out[f"sparse_arch.embedding_bag_collection.embedding_bags.{name}.weight"] = emb[t]

    for which in ("bot_l", "top_l"):
        odd = [i for i in layers[which] if i % 2]
        if odd:
            raise UserError(f"checkpoint has {which}.{odd[0]}.*: linear layers of dlrm's Sequential sit at even indices")
    bot = [layers["bot_l"][i] for i in sorted(layers["bot_l"])]
    top = [layers["top_l"][i] for i in sorted(layers["top_l"])]
    for j, layer in enumerate(bot):
        for p, v in layer.items():
            out[f"dense_arch.model._mlp.{j}._linear.{p}"] = v
    for j, layer in enumerate(top):
        prefix = "over_arch.model.1." if j == len(top) - 1 else f"over_arch.model.0._mlp.{j}._linear."
        for p, v in layer.items():
            out[prefix + p] = v

    # permute the interaction columns of the first top layer
    first = "over_arch.model.0._mlp.0._linear.weight" if len(top) > 1 else "over_arch.model.1.weight"
    if first in out and bot:
        dense_dim = bot[-1]["weight"].shape[0]
        n = len(tables) + 1
        pairs = n * (n - 1) // 2
        w = out[first]
        if w.dim() == 2 and w.shape[1] == dense_dim + pairs:
            perm = interaction_permutation(n)
            out[first] = torch.cat([w[:, :dense_dim], w[:, dense_dim:][:, perm]], dim=1)
        elif w.dim() == 2 and w.shape[1] == dense_dim + pairs + n:
            raise UserError("checkpoint was trained with --arch-interaction-itself; the torchrec DLRM has no self-interaction")

    missing = sorted(set(target) - set(out))
    extra = sorted(set(out) - set(target))
    if missing or extra:
        raise UserError(
            f"checkpoint layers do not match the model: missing {missing[:3]}, unexpected {extra[:3]}; check model.dense_arch_layer_sizes/over_arch_layer_sizes"
        )
    for k, v in out.items():
        if tuple(v.shape) != tuple(target[k].shape) and ".embedding_bags." in k and v.shape[1:] == target[k].shape[1:]:
            raise UserError(
                f"checkpoint table {k.split('.')[-2]} has {v.shape[0]} rows, the workload gives {target[k].shape[0]}: number the raw rows "
                "as dlrm did (workload=criteo_kaggle workload.categorical=first_seen workload.max_ind_range=<its --max-ind-range, 0 for none>), "
                "or read dlrm's processed .npz with workload=criteo_binary"
            )
        if tuple(v.shape) != tuple(target[k].shape):
            raise UserError(
                f"checkpoint tensor for {k} has shape {tuple(v.shape)}, the model expects {tuple(target[k].shape)}: "
                "table sizes or layer sizes differ (preprocessing options, model config?)"
            )
        out[k] = v.to(target[k].dtype)
    return out
