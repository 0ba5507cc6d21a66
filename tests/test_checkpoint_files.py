"""Checkpoint files as people have them: facebookresearch/dlrm's `--save-model` dict, and files
that are not checkpoints at all. Every refusal is one line without torch's weights_only advice."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from bench.errors import UserError
from bench.models.checkpoint import load_checkpoint, read_state_dict
from bench.models.dlrm import build_dlrm
from bench.models.dlrm_import import convert_fb_dlrm_state_dict
from bench.workloads.random_batch import tiny_model_config, tiny_tables
from tests.test_dlrm_import import D, FbDLRM


def dlrm_save(fb: torch.nn.Module) -> dict:
    """The dict dlrm_s_pytorch.py --save-model writes: every key it stores, metrics as numpy scalars."""
    optimizer = torch.optim.SGD(fb.parameters(), lr=0.1)
    return {
        "nepochs": 1,
        "nbatches": 67,
        "nbatches_test": 1,
        "state_dict": fb.state_dict(),
        "test_acc": np.float64(0.7815126050420168),  # test_accu / test_samp over numpy sums
        "test_auc": np.float64(0.6959263854425144),  # with --mlperf-logging
        "epoch": 0,
        "iter": 67,
        "train_loss": np.float32(0.5039905),  # total_loss / total_samp over float32 losses
        "total_loss": 0,
        "opt_state_dict": optimizer.state_dict(),
    }


@pytest.fixture
def fb_and_model():
    torch.manual_seed(0)
    tables = tiny_tables(4)
    return FbDLRM(tables).eval(), build_dlrm(tiny_model_config(D), tables, 13).eval()


def assert_loaded(model, fb):
    expected = convert_fb_dlrm_state_dict(fb.state_dict(), model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expected.items())


def test_a_dict_saved_like_dlrm_loads(fb_and_model, tmp_path):
    fb, model = fb_and_model
    path = tmp_path / "dlrm.pt"
    torch.save(dlrm_save(fb), path)
    with pytest.raises(Exception, match="numpy"):  # what the fix is for: torch alone refuses it
        torch.load(path, weights_only=True)
    load_checkpoint(model, path)
    assert_loaded(model, fb)


def test_numpy_1_scalar_names_load_too(fb_and_model, tmp_path):
    """Files written under numpy 1.x name numpy.core.multiarray.scalar (a plain pickle stream
    here, so the name can be written as numpy 1.x wrote it)."""
    fb, model = fb_and_model
    buffer = io.BytesIO()
    torch.save(dlrm_save(fb), buffer, _use_new_zipfile_serialization=False)
    data = buffer.getvalue()
    assert b"numpy._core.multiarray" in data
    path = tmp_path / "numpy1.pt"
    path.write_bytes(data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    load_checkpoint(model, path)
    assert_loaded(model, fb)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def one_line_refusal(path) -> str:
    with pytest.raises(UserError) as exc:
        read_state_dict(path)
    message = str(exc.value)
    assert "\n" not in message and "\x1b" not in message
    assert "weights_only=False" not in message and "trust" not in message
    return message


def test_a_file_asking_for_code_is_refused_naming_the_global(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "evil": Evil()}, path)
    message = one_line_refusal(path)
    assert "asks for print" in message and "never runs code" in message
    assert "pwned" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "name,content,says",
    [
        ("garbage.pt", bytes(range(7, 255)) * 8, "is not a torch checkpoint: neither a torch zip archive nor a pickle"),
        ("empty.pt", b"", "is empty (0 bytes)"),
        ("notes.pt", b"weights are elsewhere\n", "is not a torch checkpoint"),
    ],
)
def test_files_that_are_not_checkpoints_say_what_they_are_not(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    message = one_line_refusal(path)
    assert says in message and len(message.replace(str(path), "PATH")) < 160


def test_an_npz_and_a_truncated_checkpoint(tmp_path):
    npz = tmp_path / "arrays.npz"
    np.savez(npz, a=np.ones(3))
    assert "zip archive without data.pkl" in one_line_refusal(npz)
    good = tmp_path / "good.pt"
    torch.save({"w": torch.zeros(100)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:300])
    assert "damaged zip archive (truncated?)" in one_line_refusal(cut)
