"""A probabilities model read as logits (bench.models.logits): the input of its trailing nn.Sigmoid where
the harness sees one, verified on every call and kept through deep copies and module swaps; the clamp,
with its saturated scores counted, where it does not."""

import copy

import numpy as np
import torch
from torch import nn

from bench.models.logits import CLAMP, LogitsOf, clamp_bounds, saturated_share, trailing_sigmoid


class GateThenHead(nn.Module):
    """Two nn.Sigmoid modules, registered in the opposite order of their calls: `head` (registered first)
    is the last step, `gate` (registered second) scales a hidden layer."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.head = nn.Sigmoid()
        self.out = nn.Linear(4, 1)
        self.gate = nn.Sigmoid()
        self.hidden = nn.Linear(3, 4)
        self.scale = scale

    def forward(self, x, _sparse=None):
        h = self.hidden(x)
        return self.head(self.scale * self.out(h * self.gate(h)))


class Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(3, 1)

    def forward(self, x, _sparse=None):
        return torch.sigmoid(40 * self.out(x))


def test_the_sigmoid_whose_output_is_the_models_output_is_found_whatever_the_registration_order():
    torch.manual_seed(0)
    model = GateThenHead()
    assert [n for n, m in model.named_modules() if isinstance(m, nn.Sigmoid)] == ["head", "gate"]
    assert trailing_sigmoid(model, (torch.randn(8, 3),)) == "head"
    assert trailing_sigmoid(Functional(), (torch.randn(8, 3),)) is None


def test_the_captured_input_is_the_logit_and_its_sigmoid_is_the_output():
    torch.manual_seed(0)
    model = GateThenHead(scale=60.0)  # pre-sigmoid values far past where float32's sigmoid saturates
    x = torch.randn(256, 3)
    wrapped = LogitsOf(model, trailing_sigmoid(model, (x,)))
    with torch.no_grad():
        logits, p = wrapped(x), model(x)
    assert torch.equal(torch.sigmoid(logits), p)
    assert logits.abs().max() > 20  # beyond the clamp: nothing tied
    assert len(torch.unique(logits)) == len(x)
    assert wrapped.score_read() == "the input of head (nn.Sigmoid)"
    # the clamp would have tied the saturated ones
    clamped = LogitsOf(model, None)(x).detach()
    assert saturated_share(clamped.numpy()) > 0.2 and saturated_share(logits.numpy()) == 0.0


def test_the_read_survives_a_deep_copy_and_a_swapped_layer():
    torch.manual_seed(0)
    model = GateThenHead(scale=60.0)
    x = torch.randn(64, 3)
    wrapped = LogitsOf(model, trailing_sigmoid(model, (x,)))
    copied = copy.deepcopy(wrapped)
    copied.model.out = nn.Linear(4, 1)  # a backend swaps a layer (as the int8 backends do)
    with torch.no_grad():
        assert torch.equal(torch.sigmoid(copied(x)), copied.model(x))
        assert torch.equal(wrapped(x), wrapped(x))  # the original is untouched, no hook left behind
    assert not model.head._forward_hooks and not copied.model.head._forward_hooks


def test_a_call_whose_output_is_not_the_sigmoids_falls_back_to_the_clamp():
    torch.manual_seed(0)
    model = GateThenHead()
    x = torch.randn(16, 3)
    wrapped = LogitsOf(model, "gate")  # a wrong choice: the gate's output is not the model's
    with torch.no_grad():
        assert torch.allclose(wrapped(x), torch.logit(model(x), eps=1e-7))
    assert LogitsOf(model, "no.such.module")(x).shape == (16, 1)


def test_gradients_flow_through_the_read_where_the_clamp_has_none():
    torch.manual_seed(0)
    model = GateThenHead(scale=60.0)
    x = torch.randn(32, 3)
    for sigmoid, expect_gradient in (("head", True), (None, False)):
        model.zero_grad()
        logits = LogitsOf(model, sigmoid)(x)
        p = model(x).detach()
        saturated = (p < 1e-7) | (p > 1 - 1e-7)  # where the clamp holds the probability
        nn.functional.binary_cross_entropy_with_logits(logits[saturated], torch.ones_like(logits[saturated])).backward()
        assert saturated.any()
        assert (model.out.weight.grad.abs().sum() > 0) == expect_gradient


def test_saturated_share_counts_exactly_the_clamp_bounds():
    lo, hi = clamp_bounds()
    assert -16.2 < lo < -16.0 and 15.8 < hi < 16.0
    scores = np.array([lo, hi, hi, 0.3, 15.0, -16.0, 20.0], dtype=np.float32)
    assert saturated_share(scores) == 3 / 7
    assert CLAMP == "the clamp"
