"""LightlyTrain's Python arguments as lightly-train-c's command-line options.

Every option is passed in LightlyTrain's ``name=value`` spelling, which the
program accepts (``batch_size=64``), so the program stays the one judge of
names and values; this module renames what LightlyTrain names differently,
turns Python values into text, and checks other names against the
command's ``--help``."""

from __future__ import annotations

import datetime
import functools
import numbers
import os
import re
import subprocess
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple

from lightly_train_c import _program

# LightlyTrain's name -> the program's option, where they differ.
RENAMED = {
    "gradient_accumulation_steps": "accumulate_grad_batches",
    "resume_interrupted": "resume",
}

# LightlyTrain's model names for the architectures the program has under
# another name: torchvision's ResNets are ours.
MODEL_PREFIXES = ("torchvision/",)


def text(value: Any) -> str:
    """A Python value as the program reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, os.PathLike)):
        return os.fsdecode(value)
    return str(value)


def option(name: str, value: Any) -> List[str]:
    """``name=value`` for one option; a list or tuple repeats it (``data``);
    None leaves the program's default. "auto" is passed on: the program takes
    it where it has it (``num_workers``, ``devices``, ``lr``, ...) and refuses
    it elsewhere, so a path named auto stays a path."""
    if value is None:
        return []
    name = RENAMED.get(name, name)
    if isinstance(value, (list, tuple)):
        return [f"{name}={text(item)}" for item in value]
    return [f"{name}={text(value)}"]


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, bytes, os.PathLike))


def _path_text(function: str, name: str, value: Any) -> str:
    """A path as the program reads it. A NUL byte, which no file name holds
    and no command line can carry, is refused naming the argument (Python's
    own error says only "embedded null byte")."""
    as_text = text(value)
    if "\0" in as_text:
        raise ValueError(f"{function}(): {name} holds a NUL byte ('\\x00'), which no path can: "
                         f"{value!r}")
    return as_text


def path(function: str, name: str, value: Any, required: bool = True) -> Optional[str]:
    """A file or folder argument as text; None is the program's default only
    where the argument is optional (``checkpoint`` of ``train``)."""
    if value is None and not required:
        return None
    if not _is_path(value):
        raise TypeError(f"{function}(): {name} must be a path (str or os.PathLike), "
                        f"got {value!r}")
    return _path_text(function, name, value)


def paths(function: str, name: str, value: Any) -> List[str]:
    """One folder, or a list or tuple of them (``data``)."""
    if _is_path(value):
        return [_path_text(function, name, value)]
    if not isinstance(value, (list, tuple)) or not value or not all(map(_is_path, value)):
        raise TypeError(f"{function}(): {name} must be a folder (str or os.PathLike) or a "
                        f"non-empty list of them, got {value!r}")
    return [_path_text(function, name, item) for item in value]


def flag(function: str, name: str, value: Any) -> bool:
    """A switch: True or False (or 1 / 0), never a string, whose truth
    ("False" is true) would switch it on."""
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{function}(): {name} must be True or False, got {value!r}")


def mapping(function: str, name: str, value: Any) -> Mapping[str, Any]:
    """A dict argument (``method_args``, ``optim_args``, ``transform_args``);
    None is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{function}(): {name} must be a dict (or None), got {value!r}")
    return value


def model_name(model: Optional[str]) -> Optional[str]:
    if model is None:
        return None
    if not isinstance(model, str):
        raise TypeError("model: lightly-train-c takes a model name (see "
                        "`lightly-train-c train --help`), not a Python model object")
    for prefix in MODEL_PREFIXES:
        if model.startswith(prefix):
            return model[len(prefix):]
    return model


def accelerator(value: Optional[str]) -> Optional[str]:
    return "gpu" if value == "cuda" else value


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def devices(value: Any) -> Any:
    """LightlyTrain's devices: a count (an int), "auto", or a list of GPU
    indices, which is the program's "0,2"; a list of one is written "1,"
    (the program reads "1" as a count of one device)."""
    if not isinstance(value, (list, tuple)):
        if value is None or isinstance(value, str) or _is_integer(value):
            return value
        raise TypeError(f"devices must be a count (int), \"auto\" or a list of GPU indices, "
                        f"got {value!r}")
    if not value or not all(_is_integer(index) for index in value):
        raise TypeError(f"devices: a list holds GPU indices (ints), at least one, got {value!r}")
    if any(index < 0 for index in value):
        raise ValueError(f"devices={value!r}: GPU indices are 0 or more")
    listed = ",".join(str(int(index)) for index in value)
    return listed + "," if len(value) == 1 else listed


def square_size(name: str, size: Any) -> Optional[int]:
    """An int, or a (height, width) pair with height == width: the program's
    views and embeddings are square."""
    if size is None or _is_integer(size):
        return None if size is None else int(size)
    if (isinstance(size, (list, tuple)) and len(size) == 2 and all(map(_is_integer, size))):
        if size[0] == size[1]:
            return int(size[0])
        raise ValueError(f"{name}={size!r}: lightly-train-c takes square images, an int or "
                         "(n, n)")
    raise TypeError(f"{name} must be an int or a pair (n, n), got {size!r}")


def key_values(name: str, option: str, args: Mapping[str, Any]) -> List[str]:
    """method_args, model_args: ``{KEY: VALUE}`` as ``OPTION=KEY=VALUE`` entries."""
    out = []
    for key, value in args.items():
        if isinstance(value, (dict, list, tuple)):
            raise ValueError(f"{name}[{key!r}]: lightly-train-c takes single values "
                             f"(see docs/commands.md), got {value!r}")
        out.append(f"{option}={key}={text(value)}")
    return out


def nested(name: str, args: Mapping[str, Any]) -> List[str]:
    """A nested dict as LightlyTrain's command line spells it, ``NAME.PATH=VALUE``
    entries (transform_args: the program maps them, src/cli/transform_args.h);
    None is "None", a list or tuple ``[a,b]``."""
    out = []
    for key, value in args.items():
        if isinstance(value, Mapping):
            out += nested(f"{name}.{key}", value)
        elif isinstance(value, (list, tuple)):
            out.append(f"{name}.{key}=[{','.join(text(item) for item in value)}]")
        else:
            out.append(f"{name}.{key}={text(value)}")
    return out


def method_args(args: Mapping[str, Any]) -> List[str]:
    return key_values("method_args", "method_arg", args)


# Lightning Trainer arguments (LightlyTrain's trainer_args) that set one of
# train()'s own parameters: given in both places is refused.
TRAINER_KEYS = {"max_epochs": "epochs", "max_steps": "max_steps",
                "log_every_n_steps": "log_every", "accumulate_grad_batches": "accumulate_grad_batches",
                "max_time": "max_time", "limit_train_batches": "limit_train_batches",
                "gradient_clip_val": "gradient_clip_val", "precision": "precision",
                "accelerator": "accelerator", "devices": "devices", "num_nodes": "num_nodes",
                "strategy": "strategy", "sync_batchnorm": "sync_batchnorm"}


def trainer_args(args: Mapping[str, Any], given: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's trainer_args (Lightning Trainer keywords) as its command
    line spells them, ``trainer_args.KEY=VALUE``: the program takes those it
    has and refuses the others, naming what it takes. `given`: the options
    set otherwise (a key twice is refused). max_time may be Lightning's
    "DD:HH:MM:SS", a dict of timedelta's units or a timedelta."""
    out = []
    for key, value in args.items():
        name = TRAINER_KEYS.get(key)
        if name is not None and given.get(name) is not None:
            raise TypeError(f"train(): {name} given twice (also as trainer_args[{key!r}])")
        if key == "devices":
            value = devices(value)
        elif key == "accelerator":
            value = accelerator(value)
        elif isinstance(value, datetime.timedelta):
            value = {"seconds": value.total_seconds()}
        out += nested("trainer_args", {key: value})
    return out


def loader_args(args: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's loader_args (DataLoader keywords) as its command line
    spells them: the program's loader always shuffles and drops the last
    partial batch, with its own workers; it takes shuffle=True,
    drop_last=True, pin_memory and persistent_workers, and ignores
    batch_size and num_workers as LightlyTrain does."""
    return nested("loader_args", args)


def activation_checkpoint_args(args: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's ``{"enabled": True, "every_n_blocks": N}``: the program
    recomputes blocks 0, N, 2N, ... of a ViT (--activation-checkpointing,
    --activation-checkpointing-every; N 1, the default: every block)."""
    for key in args:
        if key not in ("enabled", "every_n_blocks"):
            raise ValueError(f"activation_checkpoint_args[{key!r}]: the keys are enabled and "
                             "every_n_blocks")
    out = option("activation_checkpointing", True) if args.get("enabled") else []
    return out + option("activation_checkpointing_every", args.get("every_n_blocks"))


def model_args(args: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's model_args (its models' constructor arguments) that the
    program has: drop_path_rate, stochastic_depth_prob, zero_init_residual,
    torchvision's weights (None: "None", torchvision's no weights), timm's
    pretrained and checkpoint_path."""
    return key_values("model_args", "model_arg", args)


def optim_args(args: Mapping[str, Any]) -> List[str]:
    """The optimizer arguments the program has: lr and weight_decay."""
    out = []
    for key, value in args.items():
        if key not in ("lr", "weight_decay"):
            raise ValueError(f"optim_args[{key!r}]: lightly-train-c takes lr and weight_decay "
                             "(the rest of each optimizer's settings are the method's)")
        out += option(key, value)
    return out


def named_settings(option: str, args: Mapping[str, Any],
                   entries: Callable[[str, Mapping[str, Any]], List[str]]) -> List[str]:
    """LightlyTrain's ``{NAME: {KEY: VALUE}, NAME: None}`` arguments (loggers,
    callbacks) as the program's ``OPTION=`` entries: a dict names NAME (with
    `entries` of its settings), None turns it off."""
    out = []
    for name, settings in args.items():
        if settings is None:
            out.append(f"{option}={name}=null")
            continue
        if not isinstance(settings, Mapping):
            raise TypeError(f"{option}[{name!r}] must be a dict (or None), got {settings!r}")
        out.append(f"{option}={name}")
        out += entries(name, settings)
    return out


def loggers(args: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's loggers, ``{"mlflow": {"tracking_uri": ..., "tags": {...}},
    "tensorboard": None}``, as the program's ``loggers=`` entries (its None
    values are the defaults). The program judges the names and values
    (docs/mlflow.md)."""
    def entries(name: str, settings: Mapping[str, Any]) -> List[str]:
        out = []
        for key, value in settings.items():
            if key == "tags" and isinstance(value, Mapping):
                out += [f"loggers={name}.tags.{tag}={text(tag_value)}"
                        for tag, tag_value in value.items()]
            elif value is not None:
                out.append(f"loggers={name}.{key}={text(value)}")
        return out
    return named_settings("loggers", args, entries)


def callbacks(args: Mapping[str, Any]) -> List[str]:
    """LightlyTrain's callbacks, ``{"model_checkpoint": {"every_n_epochs": 2},
    "early_stopping": None}``, as the program's ``callbacks=`` entries (its
    None values are the defaults). The program judges the names and values
    (docs/training.md)."""
    return named_settings("callbacks", args, lambda name, settings: [
        f"callbacks={name}.{key}={text(value)}" for key, value in settings.items()
        if value is not None])


@functools.lru_cache(maxsize=None)
def program_options(command: str) -> Tuple[str, ...]:
    """The option names of `lightly-train-c COMMAND --help`, with underscores."""
    result = subprocess.run([str(_program.PROGRAM), command, "--help"], capture_output=True,
                            text=True, env=_program.program_environment(), check=True)
    names = re.findall(r"^  --([a-z0-9-]+)", result.stdout, flags=re.MULTILINE)
    return tuple(name.replace("-", "_") for name in names if name != "help")


def check_names(function: str, command: str, explicit: Iterable[str],
                options: Mapping[str, Any], refused: Iterable[str] = ()) -> None:
    """Raises TypeError naming the accepted arguments when `options` holds a
    name that is neither a parameter of `function` nor an option of the
    program's `command`, or one of the command's options that `function`
    sets itself (`refused`)."""
    if not options:
        return
    accepted = [name for name in program_options(command) if name not in refused]
    unknown = [name for name in options if name not in accepted]
    if unknown:
        names = sorted((set(explicit) | set(accepted)) - set(refused))
        raise TypeError(f"{function}() got unknown argument(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(names)}")


def passthrough(options: Mapping[str, Any]) -> List[str]:
    out: List[str] = []
    for name, value in options.items():
        out += option(name, devices(value) if name == "devices" else value)
    return out
