#!/usr/bin/env python3
"""Writes tests/fixtures/torchvision_structure.txt: the module trees of
torchvision's ResNets, ShuffleNetV2s and ConvNeXts as torch.save(model)
pickles them, which tests/test_torch_module_export.c compares the
`export --format torch_model` files we write against
(weights/torch_module_export.h), so that our writer cannot drift from what
torch.load builds.

    /work/venvs/ref/bin/python tools/make_torchvision_structure.py --out tests/fixtures

Needs torch and torchvision. Each model is built as torchvision builds it,
its classifier (ResNet's and ShuffleNetV2's fc, ConvNeXt's classifier.2)
replaced by nn.Identity as our export writes it (a backbone has no
classifier: the model returns the features embed computes), saved with
torch.save and loaded back; one line per module of the loaded tree, in
named_modules() order:

    <path> <module>.<class> <key>=<value> ... params=<names> buffers=<names>

with every __dict__ entry that is not nn.Module's own bookkeeping
(_parameters, _buffers, _modules, the hook dicts), sorted by key, each
value written as format_value writes it, then `|`-separated lists of its
parameter and buffer names. Nothing of the pickle itself is stored: our
writer emits its own.
"""
import argparse
import io
import os

import torch
import torchvision

MODELS = ("resnet18", "resnet50", "wide_resnet50_2", "shufflenet_v2_x0_5", "shufflenet_v2_x2_0",
          "convnext_tiny")
# nn.Module.__init__'s own entries of __dict__ (besides training).
BOOKKEEPING = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
               "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook",
               "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks",
               "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks"}


def format_value(value):
    """A value as the C test formats what it reads back: no spaces."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "%.17g" % value
    if isinstance(value, str):
        return "'" + value + "'"
    if isinstance(value, tuple):
        inner = ",".join(format_value(v) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, type):
        return "class:" + value.__module__ + "." + value.__qualname__
    raise ValueError(f"no format for {value!r}")


def describe(name):
    model = getattr(torchvision.models, name)()
    if hasattr(model, "fc"):
        model.fc = torch.nn.Identity()
    else:
        model.classifier[2] = torch.nn.Identity()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    model = torch.load(buffer, weights_only=False)
    lines = [f"# {name}"]
    for path, module in model.named_modules():
        cls = f"{type(module).__module__}.{type(module).__name__}"
        entries = sorted((k, v) for k, v in vars(module).items() if k not in BOOKKEEPING)
        values = " ".join(f"{k}={format_value(v)}" for k, v in entries)
        params = "|".join(module._parameters)
        buffers = "|".join(module._buffers)
        lines.append(f"{path or '.'} {cls} {values} params={params} buffers={buffers}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lines = [f"# torch {torch.__version__}, torchvision {torchvision.__version__}: "
             "tools/make_torchvision_structure.py"]
    for name in MODELS:
        lines += describe(name)
    path = os.path.join(args.out, "torchvision_structure.txt")
    with open(path, "w") as file:
        file.write("\n".join(lines) + "\n")
    print(f"{path}: {len(lines)} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
