"""Branch decisions of the ResNet fixture runs (ReLU signs, max-pool argmaxes)
and what taking the other branch would do to the gradients. Used by
tools/make_fixtures.py; contract in tests/fixtures/README.md.

Why: a float32 implementation computes every pre-activation with a rounding
error of the order of f32err (PyTorch's float32 result against the float64
one). Where the float64 value lies closer to a kink than that, a correct
float32 implementation may take the other branch: a ReLU input of 5e-7
(layer1.0's first ReLU of the resnet18 fixture) comes out 0 in PyTorch's
float32 run and in oneDNN's AVX2 kernels, but positive in float64 and in
oneDNN's AVX-512 kernels. Such a flip moves the gradients of every layer
below it coherently (the per-element errors share one cause and do not
cancel in a sum), by an amount that has nothing to do with rounding. So the
fixture lists every fragile decision ("kinks") and, per gradient entry, how
far all their flips together can move it ("kinkerr/NAME"); a test adds that
to its tolerance when its run took the other branch at one of them. The
float32 run that measures f32err replays the float64 decisions, so f32err
is the rounding scale alone.

A decision is fragile when the float64 margin (|ReLU input|, or the gap
between a max-pool window's maximum and another element of the window) is
at most KINK_FACTOR times the tensor's float32 error (max over the tensor
of |float32 - float64| of the decision's input). KINK_FACTOR is the C
tests' F32ERR_FACTOR: they accept values within that many f32err of the
truth, so only decisions that close to a kink can legitimately differ.
First order: the flip changes the forward value by at most the margin
(inside the rounding tolerance), the backward by routing one upstream
gradient element elsewhere, which is linear and computed exactly below.
"""
import numpy as np
import torch

KINK_FACTOR = 4.0


class Decisions:
    """Stands in for every ReLU and the max pool of a torchvision ResNet.
    mode "record" (the float64 run): computes them normally and keeps
    input, output and decision of every call, in call order. mode "replay"
    (the float32 run): takes the recorded decisions instead of its own and
    keeps its inputs (to measure their float32 error). mode "off" (eval
    forwards): plain ReLU and max pool, nothing kept."""

    def __init__(self, mode, recorded=None):
        self.mode = mode
        self.calls = []  # dicts: kind, input, output, decision (and window geometry)
        self.recorded = recorded

    def _next_recorded(self, kind):
        call = self.recorded.calls[len(self.calls)]
        if call["kind"] != kind:
            raise RuntimeError(f"replay: expected {call['kind']}, got {kind}")
        return call

    def relu(self, x):
        if self.mode == "off":
            return torch.relu(x)
        if self.mode == "record":
            y = torch.relu(x)
            y.retain_grad()
            self.calls.append({"kind": "relu", "input": x, "output": y, "decision": x > 0})
            return y
        mask = self._next_recorded("relu")["decision"]
        self.calls.append({"kind": "relu", "input": x})
        return torch.where(mask, x, torch.zeros_like(x))

    def maxpool(self, x, kernel, stride, padding):
        if self.mode == "off":
            return torch.nn.functional.max_pool2d(x, kernel, stride, padding)
        if self.mode == "record":
            y, argmax = torch.nn.functional.max_pool2d(x, kernel, stride, padding,
                                                       return_indices=True)
            y.retain_grad()
            self.calls.append({"kind": "maxpool", "input": x, "output": y, "decision": argmax,
                               "geometry": (kernel, stride, padding)})
            return y
        argmax = self._next_recorded("maxpool")["decision"]
        self.calls.append({"kind": "maxpool", "input": x})
        n, c = x.shape[:2]
        picked = x.reshape(n, c, -1).gather(2, argmax.reshape(n, c, -1))
        return picked.reshape(argmax.shape)


class _ReLU(torch.nn.Module):
    def __init__(self, decisions):
        super().__init__()
        self.decisions = decisions

    def forward(self, x):
        return self.decisions.relu(x)


class _MaxPool(torch.nn.Module):
    def __init__(self, decisions, pool):
        super().__init__()
        self.decisions = decisions
        self.geometry = (pool.kernel_size, pool.stride, pool.padding)

    def forward(self, x):
        return self.decisions.maxpool(x, *self.geometry)


def install(model, decisions):
    """Routes every ReLU module and the stem max pool of a torchvision ResNet
    through `decisions`."""
    model.maxpool = _MaxPool(decisions, model.maxpool)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.ReLU):
                setattr(module, child_name, _ReLU(decisions))


def _relu_flips(call, error):
    """Every fragile ReLU element: (flat NCHW index, float64 decision (1:
    passes, 0: blocks), the other one, routes): the float64 gradient at the
    output goes through where the float64 decision blocked it, and is
    removed where it passed."""
    x = call["input"].detach()
    g = call["output"].grad.reshape(-1)
    fragile = torch.nonzero((x.abs() <= KINK_FACTOR * error).reshape(-1)).reshape(-1)
    passes = call["decision"].reshape(-1)
    flips = []
    for flat in fragile.tolist():
        upstream = float(g[flat])
        choice = int(passes[flat])
        flips.append((flat, choice, 1 - choice, [(flat, -upstream if choice else upstream)]))
    return flips


def _maxpool_flips(call, error):
    """Every window whose float64 maximum is positive and within the margin
    of another element of the window, once per such element: (flat NCHW
    index of the output, float64 argmax, the other element (both as h * W +
    w within the channel plane), routes): the upstream gradient moves from
    the argmax to the other element. Windows whose maximum is 0 route into
    ReLU zeros either way (no gradient passes)."""
    x = call["input"].detach()
    g = call["output"].grad.reshape(-1)
    kernel, stride, padding = call["geometry"]
    n, c, h, w = x.shape
    argmax = call["decision"]
    windows = argmax.shape[2] * argmax.shape[3]
    # Every window's elements and their plane indices (padding: -inf, index -1).
    padded = torch.nn.functional.pad(x, (padding,) * 4, value=-float("inf"))
    index = torch.nn.functional.pad(torch.arange(h * w, dtype=x.dtype).reshape(1, 1, h, w),
                                    (padding,) * 4, value=-1.0)
    values = torch.nn.functional.unfold(padded, kernel, stride=stride).reshape(n, c, kernel * kernel, -1)
    where = torch.nn.functional.unfold(index, kernel, stride=stride).reshape(1, 1, kernel * kernel, -1)
    top = argmax.reshape(n, c, 1, -1)
    top_value = x.reshape(n, c, -1).gather(2, argmax.reshape(n, c, -1)).reshape(n, c, 1, -1)
    fragile = ((top_value - values <= KINK_FACTOR * error) & (where.long() != top) &
               (where >= 0) & (top_value > 0))
    flips = []
    for (b, ch, k, window) in torch.nonzero(fragile).tolist():
        plane = (b * c + ch) * h * w
        output = (b * c + ch) * windows + window
        upstream = float(g[output])
        chosen, other = int(top[b, ch, 0, window]), int(where[0, 0, k, window])
        flips.append((output, chosen, other, [(plane + other, upstream), (plane + chosen, -upstream)]))
    return flips


class KinkErrors:
    """What the fragile flips can do together to each gradient entry
    (triangle inequality over flips), accumulated flip by flip:
    per element max_i sum_j |delta_j[i]| (over the whole gradient, as
    f32err), for grad_sum sum_j |sum_i delta_j[i]|, for grad_sumsq
    sum_j |sum_i (2 g_i delta_j[i] + delta_j[i]^2)| (g: the float64
    gradient)."""

    def __init__(self, double_grads):
        self.double_grads = double_grads
        self.element = {name: np.zeros_like(g) for name, g in double_grads.items()}
        self.total = dict.fromkeys(double_grads, 0.0)
        self.squares = dict.fromkeys(double_grads, 0.0)
        self.counts = {"relu": 0, "maxpool": 0}
        self.decisions = []  # (call, element, float64 choice, alternative) per flip

    def add(self, name, delta):
        g = self.double_grads[name]
        self.element[name] += np.abs(delta)
        self.total[name] += abs(delta.sum())
        self.squares[name] += abs((2.0 * g * delta + delta * delta).sum())

    def of(self, entry):
        """kinkerr of stored gradient entry `entry` (e.g. grad_sum/conv1.weight)."""
        kind, _, parameter = entry.partition("/")
        if kind in ("grad", "grad_sample"):
            return float(self.element[parameter].max())
        if kind == "grad_sum":
            return self.total[parameter]
        if kind == "grad_sumsq":
            return self.squares[parameter]
        raise ValueError(f"no kink error for {entry}")


def kink_errors(recorded, replayed, parameters, double_grads):
    """KinkErrors of every fragile decision of the float64 run `recorded`
    (input errors measured against the float32 run `replayed`): each flip's
    float64 gradient change is the backward of the rerouted upstream
    gradient from the decision's input. Needs the float64 graph (backward
    with retain_graph=True) and the gradients of the recorded outputs."""
    names = [name for name, _ in parameters]
    tensors = [tensor for _, tensor in parameters]
    errors = KinkErrors(double_grads)
    relu_calls = 0
    for call, single in zip(recorded.calls, replayed.calls):
        x = call["input"]
        error = float((single["input"].detach().to(torch.float64) - x.detach()).abs().max())
        if call["kind"] == "relu":
            flips, call_index = _relu_flips(call, error), relu_calls
            relu_calls += 1
        else:
            flips, call_index = _maxpool_flips(call, error), -1
        errors.counts[call["kind"]] += len(flips)
        for element, choice, alternative, routes in flips:
            errors.decisions.append((call_index, element, choice, alternative))
            direction = torch.zeros(x.numel(), dtype=x.dtype)
            for flat, value in routes:
                direction[flat] += value
            grads = torch.autograd.grad(x, tensors, grad_outputs=direction.reshape(x.shape),
                                        retain_graph=True, allow_unused=True)
            for name, grad in zip(names, grads):
                if grad is not None:
                    errors.add(name, grad.detach().numpy().reshape(-1))
    return errors
