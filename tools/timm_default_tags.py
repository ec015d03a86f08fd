#!/usr/bin/env python3
"""Prints, for each timm architecture that lightly-train-c builds, the tag of
the weights timm.create_model(ARCH, pretrained=True) loads (timm's default
tag), as the C table of src/weights/timm_tags.c.

timm picks the default per architecture in generate_default_cfgs
(timm/models/_registry.py): the first "arch.tag" entry with weights (url,
file or hf_hub_id), unless an untagged entry with weights or a tag ending in
"*" marks the default. This script reads those dictionaries from timm's
source with Python's ast, so it needs timm's wheel, not PyTorch:

    pip download timm --no-deps -d /tmp/timm && unzip -q /tmp/timm/timm-*.whl -d /tmp/timm
    python3 tools/timm_default_tags.py /tmp/timm/timm

and prints one line per architecture ("resnet50 a1_in1k hub"), "hub" when
the default's weights are on the Hugging Face Hub as timm/ARCH.TAG (what
this program downloads), "url" when they are elsewhere only, "none" when
timm has no weights for it. Checked with timm 1.0.31 (2026-12-01).
"""
import ast
import sys
from pathlib import Path

# The architectures behind lightly-train-c's "timm/..." model names
# (src/nn/backbone.c), with the timm source file that registers each.
ARCHITECTURES = {
    "resnet.py": ["resnet18", "resnet26", "resnet34", "resnet50", "resnet101", "resnet152",
                  "resnet200", "wide_resnet50_2", "wide_resnet101_2"],
    "vision_transformer.py": [
        "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224",
        "vit_large_patch16_224", "vit_tiny_patch16_384", "vit_small_patch16_384",
        "vit_base_patch16_384", "vit_large_patch16_384", "vit_small_patch14_dinov2",
        "vit_base_patch14_dinov2", "vit_large_patch14_dinov2", "vit_giant_patch14_dinov2",
        "vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2",
        "vit_large_patch14_reg4_dinov2", "vit_giant_patch14_reg4_dinov2"],
    "convnext.py": ["convnext_tiny", "convnext_small", "convnext_base", "convnext_large"],
}


def source_keywords(call):
    """The weight sources (url, file, hf_hub_id) a cfg call names with a
    non-empty value; a first positional argument is the url (_cfg(url, ...))."""
    found = set()
    if isinstance(call, ast.Call):
        for keyword in call.keywords:
            value = keyword.value
            empty = isinstance(value, ast.Constant) and not value.value
            if keyword.arg in ("url", "file", "hf_hub_id") and not empty:
                found.add(keyword.arg)
        if call.args and not (isinstance(call.args[0], ast.Constant) and not call.args[0].value):
            found.add("url")
    return found


def default_cfg_entries(path):
    """(key, sources) in order for every entry of generate_default_cfgs({...}),
    or of the module's dict literal it is given by name (vision_transformer.py:
    default_cfgs = {...}; the CLIP quickgelu names it adds in between are not
    architectures of this program)."""
    tree = ast.parse(path.read_text())
    literals = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Dict)):
            literals[node.targets[0].id] = node.value
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "generate_default_cfgs"
                and node.args):
            cfgs = node.args[0]
            if isinstance(cfgs, ast.Name):
                cfgs = literals.get(cfgs.id)
            if isinstance(cfgs, ast.Dict):
                for key, value in zip(cfgs.keys, cfgs.values):
                    if isinstance(key, ast.Constant):
                        yield key.value, source_keywords(value)


def default_tags(path):
    """timm's rule (generate_default_cfgs): {arch: (tag, sources)}."""
    chosen, explicit = {}, set()
    for key, sources in default_cfg_entries(path):
        arch, _, tag = key.partition(".")
        has_weights = bool(sources)
        if (has_weights and not tag) or (tag.endswith("*") and arch not in explicit):
            chosen[arch] = (tag.strip("*"), sources)
            explicit.add(arch)
        elif has_weights and (arch not in chosen or not chosen[arch][1]):
            chosen[arch] = (tag, sources)
        elif arch not in chosen:
            chosen[arch] = (tag, sources)
    return chosen


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: timm_default_tags.py TIMM_PACKAGE_DIR (the folder holding models/)")
    models = Path(sys.argv[1]) / "models"
    for file_name, architectures in ARCHITECTURES.items():
        tags = default_tags(models / file_name)
        for arch in architectures:
            if arch not in tags:
                sys.exit(f"{arch}: not in {file_name}'s default cfgs")
            tag, sources = tags[arch]
            where = "hub" if "hf_hub_id" in sources else "url" if sources else "none"
            print(arch, tag or "-", where)


if __name__ == "__main__":
    main()
