"""LightlyTrain's Python arguments as lightly-train-c's command-line options.

Every option is passed in LightlyTrain's ``name=value`` spelling, which the
program accepts (``batch_size=64``), so the program stays the one judge of
names and values; this module renames what LightlyTrain names differently,
turns Python values into text, and checks other names against the
command's ``--help``."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from typing import Any, Iterable, List, Mapping, Optional, Tuple

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
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def option(name: str, value: Any) -> List[str]:
    """``name=value`` for one option; a list or tuple repeats it (``data``);
    None and "auto" leave the program's default."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return []
    name = RENAMED.get(name, name)
    if isinstance(value, (list, tuple)):
        return [f"{name}={text(item)}" for item in value]
    return [f"{name}={text(value)}"]


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


def devices(value: Any) -> Any:
    """LightlyTrain's list of GPU indices as the program's "0,2"."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(int(index)) for index in value)
    return value


def square_size(name: str, size: Any) -> Optional[int]:
    """An int, or a (height, width) pair with height == width: the program's
    views and embeddings are square."""
    if size is None or isinstance(size, int):
        return size
    if isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1]:
        return int(size[0])
    raise ValueError(f"{name}={size!r}: lightly-train-c takes square images, an int or "
                     "(n, n)")


def method_args(args: Optional[Mapping[str, Any]]) -> List[str]:
    if not args:
        return []
    out = []
    for key, value in args.items():
        if isinstance(value, (dict, list, tuple)):
            raise ValueError(f"method_args[{key!r}]: lightly-train-c takes single values "
                             f"(see the method arguments in its README), got {value!r}")
        out.append(f"method_arg={key}={text(value)}")
    return out


def optim_args(args: Optional[Mapping[str, Any]]) -> List[str]:
    """The optimizer arguments the program has: lr and weight_decay."""
    if not args:
        return []
    out = []
    for key, value in args.items():
        if key not in ("lr", "weight_decay"):
            raise ValueError(f"optim_args[{key!r}]: lightly-train-c takes lr and weight_decay "
                             "(the rest of each optimizer's settings are the method's)")
        out += option(key, value)
    return out


@functools.lru_cache(maxsize=None)
def program_options(command: str) -> Tuple[str, ...]:
    """The option names of `lightly-train-c COMMAND --help`, with underscores."""
    result = subprocess.run([str(_program.PROGRAM), command, "--help"], capture_output=True,
                            text=True, env=_program.program_environment(), check=True)
    names = re.findall(r"^  --([a-z0-9-]+)", result.stdout, flags=re.MULTILINE)
    return tuple(name.replace("-", "_") for name in names if name != "help")


def check_names(function: str, command: str, explicit: Iterable[str],
                options: Mapping[str, Any]) -> None:
    """Raises TypeError naming the accepted arguments when `options` holds a
    name that is neither a parameter of `function` nor an option of the
    program's `command`."""
    if not options:
        return
    accepted = program_options(command)
    unknown = [name for name in options if name not in accepted]
    if unknown:
        names = sorted(set(explicit) | set(accepted))
        raise TypeError(f"{function}() got unknown argument(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(names)}")


def passthrough(options: Mapping[str, Any]) -> List[str]:
    out: List[str] = []
    for name, value in options.items():
        out += option(name, value)
    return out


def paths(value: Any) -> List[Any]:
    if isinstance(value, (str, os.PathLike)):
        return [value]
    return list(value)
