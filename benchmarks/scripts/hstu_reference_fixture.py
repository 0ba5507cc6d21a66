"""Make tests/fixtures/hstu_attention.pt: inputs and outputs of generative-recommenders' PyTorch HSTU attention.

    python benchmarks/scripts/hstu_reference_fixture.py REPO [--out tests/fixtures/hstu_attention.pt] [--scratch /tmp/ref-hstu]

REPO is a clone of meta-recsys/generative-recommenders (a checkout, or a bare git folder such as the one the
session's fetch leaves). The reference's `ops/pytorch/pt_hstu_attention.py` is written to the scratch folder
(outside this repository) and run there as it is: `pytorch_hstu_mha` on seeded jagged inputs, once with
M-FALCON targets (`num_targets`) and once causal without. Nothing of the reference is kept but its outputs;
tests/test_hstu.py checks `bench.models.hstu.hstu_attention` against them to 1e-5.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
from pathlib import Path

import torch

REFERENCE = "generative_recommenders/ops/pytorch/pt_hstu_attention.py"


def reference_source(repo: Path) -> tuple[str, str]:
    """(the file's text, the commit it came from), from a checkout or a bare git folder."""
    git = ["git", "--git-dir", str(repo / ".git" if (repo / ".git").exists() else repo)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    text = subprocess.run([*git, "show", f"HEAD:{REFERENCE}"], check=True, capture_output=True, text=True).stdout
    return text, commit


def load_reference(text: str, scratch: Path):
    import fbgemm_gpu  # noqa: F401 - the reference pads with torch.ops.fbgemm.jagged_to_padded_dense

    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "pt_hstu_attention.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("pt_hstu_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/hstu_attention.pt"))
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/ref-hstu"))
    args = parser.parse_args()
    text, commit = reference_source(args.repo)
    reference = load_reference(text, args.scratch)
    generator = torch.Generator().manual_seed(54)
    lengths = torch.tensor([5, 9, 3, 7])
    heads, attention_dim, linear_dim, max_seq_len = 2, 4, 3, 10
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    total = int(lengths.sum())
    q = torch.randn(total, heads, attention_dim, generator=generator)
    k = torch.randn(total, heads, attention_dim, generator=generator)
    v = torch.randn(total, heads, linear_dim, generator=generator)
    num_targets = torch.tensor([2, 3, 1, 0])
    alpha = 1.0 / attention_dim**0.5
    cases = {}
    for name, targets in (("targets", num_targets), ("causal", None)):
        out = reference.pytorch_hstu_mha(max_seq_len=max_seq_len, alpha=alpha, q=q, k=k, v=v, seq_offsets=offsets, causal=True,
                                         dropout_pr=0.0, training=False, num_targets=targets)
        cases[name] = {"num_targets": targets, "output": out}
    fixture = {"q": q, "k": k, "v": v, "seq_offsets": offsets, "max_seq_len": max_seq_len, "alpha": alpha, "cases": cases,
               "reference": f"meta-recsys/generative-recommenders {REFERENCE} pytorch_hstu_mha at {commit}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, reference at {commit}")


if __name__ == "__main__":
    main()
