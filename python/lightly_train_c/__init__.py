"""lightly-train-c from Python: LightlyTrain's ``train`` / ``embed`` /
``export`` calls, run by the native program that comes with this package.

    import lightly_train_c as lightly_train   # was: import lightly_train

    lightly_train.train(out="out/run1", data="images", model="torchvision/resnet50",
                        method="dino", epochs=100, batch_size=128)
    embeddings, filenames = lightly_train.embed_numpy(
        data="images", checkpoint="out/run1/exported_models/exported_last.safetensors")

Arguments keep LightlyTrain 0.18's names and meanings where the two
overlap; where lightly-train-c has no counterpart, the call raises before
anything runs. Any other option of ``lightly-train-c <command> --help`` is
accepted by its name with underscores (``max_steps=1000``,
``knn_data="val"``). Each call runs the program as a child process: its
progress is printed as it comes, a failure raises ProgramError with the
program's one-line error and exit status, and Ctrl-C stops a training run
after its current step with the checkpoint written (continue with
``resume_interrupted=True``). GPU: ``pip install lightly-train-c[cuda]`` (or
a CUDA 13 build of PyTorch in the same environment) provides cuDNN, cuBLAS
and NCCL; without them the program trains on the CPU and says why in
train.log. Defaults not given here are the program's (docs/commands.md)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from lightly_train_c import _arguments as _args
from lightly_train_c._program import PROGRAM, ProgramError, nvidia_library_dirs, output, run

__all__ = ["train", "pretrain", "embed", "embed_numpy", "export", "list_models",
           "list_methods", "ProgramError", "PROGRAM", "nvidia_library_dirs", "__version__"]

PathLike = Union[str, "os.PathLike[str]"]

try:
    from importlib.metadata import version as _version

    __version__ = _version("lightly-train-c")
except Exception:  # not installed as a distribution (a source checkout)
    __version__ = "unknown"

_TRAIN_PARAMETERS = ("out", "data", "model", "method", "method_args", "epochs", "batch_size",
                     "gradient_accumulation_steps", "num_workers", "devices", "num_nodes",
                     "resume_interrupted", "checkpoint", "overwrite", "accelerator",
                     "strategy", "precision", "float32_matmul_precision", "seed", "optim", "optim_args", "transform_args",
                     "loggers", "callbacks", "model_args", "activation_checkpoint_args",
                     "trainer_args", "loader_args")


def train(
    out: PathLike,
    data: Union[PathLike, Sequence[PathLike]],
    model: Optional[str] = None,
    method: Optional[str] = None,
    method_args: Optional[Mapping[str, Any]] = None,
    epochs: Union[int, str, None] = None,
    batch_size: Optional[int] = None,
    gradient_accumulation_steps: Optional[int] = None,
    num_workers: Union[int, str, None] = None,
    devices: Union[int, str, Sequence[int], None] = None,
    num_nodes: Union[int, str, None] = None,
    resume_interrupted: bool = False,
    checkpoint: Optional[PathLike] = None,
    overwrite: bool = False,
    accelerator: Optional[str] = None,
    strategy: Optional[str] = None,
    precision: Optional[str] = None,
    float32_matmul_precision: Optional[str] = None,
    seed: Optional[int] = None,
    optim: Optional[str] = None,
    optim_args: Optional[Mapping[str, Any]] = None,
    transform_args: Optional[Mapping[str, Any]] = None,
    loggers: Optional[Mapping[str, Any]] = None,
    callbacks: Optional[Mapping[str, Any]] = None,
    model_args: Optional[Mapping[str, Any]] = None,
    activation_checkpoint_args: Optional[Mapping[str, Any]] = None,
    trainer_args: Optional[Mapping[str, Any]] = None,
    loader_args: Optional[Mapping[str, Any]] = None,
    **options: Any,
) -> None:
    """Pretrains a backbone with self-supervised learning (``lightly-train-c train``).

    Writes ``out/checkpoints/last.ckpt`` every epoch,
    ``out/exported_models/exported_last.safetensors`` (the backbone as a
    torchvision or timm state dict), ``train.log``, ``metrics.jsonl`` and
    TensorBoard events. None leaves the program's default (``out`` and
    ``data`` have none: None is a TypeError); "auto" is passed on to the
    program, which takes it where LightlyTrain does.

    Args:
        out: Output folder; a non-empty one needs ``overwrite`` or
            ``resume_interrupted``.
        data: Folder of images (searched recursively), or a list of folders and
            image files (more than 32 go to the program as a --data-list file).
        model: Backbone: ``resnet18`` (default) ... ``resnet152``, ``vit_s14``,
            ``vit_b14``, ..., ``dinov3/vits16``; LightlyTrain's
            ``torchvision/resnet50`` is ``resnet50``.
        method: ``distillation`` (default, LightlyTrain's: v3; ``v1``, ``v2``: add
            the suffix), ``simclr``, ``byol``, ``dino``, ``dinov2``, ``dinov31``, ``vicreg``,
            ``barlowtwins``. Distillation's teacher is ``dinov3/vitb16``,
            downloaded by name on first use (docs/weights.md), unless
            ``method_args={"teacher": "path/to/teacher.safetensors"}`` names
            another; ``method="simclr"`` trains without a teacher.
        method_args: The method's hyper-parameters by LightlyTrain's names,
            e.g. ``{"temperature": 0.2}``; an unknown key is an error listing
            the accepted ones.
        epochs: Passes over the data (default and "auto": 100; dinov2 and dinov31
            the epochs of 125,000 steps, as LightlyTrain's); 0 saves the initial
            model's checkpoint and export and trains nothing.
        batch_size: Images per optimizer step over all devices (default 128).
        gradient_accumulation_steps: Batches per optimizer step (default 1).
        num_workers: Data loading threads per device ("auto": cores minus one;
            0: nothing decoded ahead, each batch when the step asks for it).
        devices: Devices per node (an int), or a list of GPU indices such as
            [0, 2] or [1] (GPU 1 alone) ("auto": every visible GPU, one
            process each).
        num_nodes: Nodes; must match the launcher (``srun``, ``mpirun``).
        resume_interrupted: Continue the interrupted run in ``out`` from its
            last checkpoint, with the same arguments (True or False).
        checkpoint: Initial backbone weights (a .ckpt or .safetensors) for a
            new run.
        overwrite: Start a new run in a non-empty ``out`` (True or False).
        accelerator: "auto" (the GPU when one works, else the CPU, with the
            reason in train.log), "cpu", or "gpu" (also LightlyTrain's "cuda").
        strategy: "auto", "ddp" or "ddp_find_unused_parameters_true": several
            ranks always run as DDP (each holds the whole model, gradients
            averaged).
        precision: "auto" (16-mixed on a GPU, 32-true on the CPU),
            "32-true", "16-mixed" or "bf16-mixed".
        float32_matmul_precision: "auto", "highest", "high" or "medium"
            (PyTorch's); float32 products never use TF32 here, so all run
            as "highest".
        seed: Random seed (default 0).
        optim: "auto" (the method's), "sgd", "lars" or "adamw".
        optim_args: ``{"lr": ..., "weight_decay": ...}``: the base learning rate
            (at the method's reference batch) and weight decay.
        transform_args: LightlyTrain's view parameters: ``image_size``,
            ``random_resize``, ``random_flip``, ``color_jitter``,
            ``random_gray_scale``, ``gaussian_blur``, ``solarize``, and for
            dino / dinov2 / dinov31 ``global_view_1`` and ``local_view``; or the
            program's own keys (``{"scale_min": 0.2, "local.blur_p": 0.1}``).
            How each maps: docs/commands.md (the program maps them).
        loggers: LightlyTrain's loggers: ``{"mlflow": {"tracking_uri":
            "http://host:5000", "experiment_name": ..., "run_name": ...,
            "tags": {...}}}`` logs the run to an MLflow tracking server too
            (tracking_uri defaults to MLFLOW_TRACKING_URI), ``{"tensorboard":
            None}`` turns TensorBoard off (docs/mlflow.md).
        callbacks: LightlyTrain's callbacks: ``{"model_checkpoint":
            {"every_n_epochs": 5, "save_top_k": -1}, "model_export":
            {"every_n_epochs": 5}, "early_stopping": {"patience": 3},
            "learning_rate_monitor": None}`` (docs/training.md, "Checkpoints,
            exports and early stopping").
        model_args: LightlyTrain's model constructor arguments the program
            has: ``{"drop_path_rate": 0.1}`` (ViTs, timm's and DINOv3's
            ConvNeXts), ``{"stochastic_depth_prob": 0.2}`` (torchvision's
            ConvNeXts), ``{"zero_init_residual": True}`` (ResNets),
            ``{"weights": "DEFAULT"}`` (torchvision's ResNets),
            ``{"pretrained": True}`` (timm's models: timm's default weights,
            or the tag of ``model="timm/resnet50.a1_in1k"``), and
            ``{"checkpoint_path": FILE}`` (timm's models).
        activation_checkpoint_args: ``{"enabled": True}`` recomputes every
            block of a ViT in the backward; ``"every_n_blocks": N`` blocks
            0, N, 2N, ... only.
        trainer_args: Lightning Trainer keywords the program has:
            ``max_epochs``, ``max_steps``, ``max_time`` ("DD:HH:MM:SS", a
            dict of timedelta's units or a timedelta), ``min_epochs``,
            ``min_steps``, ``fast_dev_run``, ``limit_train_batches``,
            ``log_every_n_steps``, ``accumulate_grad_batches``,
            ``gradient_clip_val``, ``precision``, ``accelerator``,
            ``devices``, ``num_nodes``, ``strategy``, ``sync_batchnorm``,
            ``enable_progress_bar``; ``deterministic``, ``benchmark`` and
            ``enable_model_summary`` taken at what the program does
            (docs/commands.md).
        loader_args: DataLoader keywords: ``shuffle=True`` and
            ``drop_last=True`` (what the loader does), ``pin_memory`` and
            ``persistent_workers`` (either value), ``batch_size`` and
            ``num_workers`` ignored as LightlyTrain does.
        **options: Any other option of ``lightly-train-c train --help`` by its
            name with underscores: ``max_steps``, ``image_size``, ``lr``,
            ``threads``, ``knn_data``, ``log_every``, ``embed_dim``
            (LightlyTrain's: an embedding head of that width after the
            pooled features; ``embed`` writes its output), ...

    Raises:
        TypeError: An argument neither LightlyTrain's nor the program's
            (the message lists the accepted ones), or one of a wrong type
            (a path that is None, a switch that is not a bool, ...).
        ValueError: A LightlyTrain argument value lightly-train-c has no
            counterpart for.
        ProgramError: The program refused the arguments (exit status 2) or
            failed while running (1).
        KeyboardInterrupt: Ctrl-C; the run stopped with its checkpoint (or,
            when Ctrl-C came as it ended, had finished: the message says which).
    """
    _args.check_names("train", "train", _TRAIN_PARAMETERS, options)
    method_args = _args.mapping("train", "method_args", method_args)
    arguments = ["train"]
    for path in _args.paths("train", "data", data):
        arguments += _args.option("data", path)
    arguments += _args.option("out", _args.path("train", "out", out))
    arguments += _args.option("model", _args.model_name(model))
    arguments += _args.option("method", method)
    arguments += _args.method_args(method_args)
    # "auto" is the program's where it has it (epochs too: LightlyTrain's 100,
    # or DINOv2's 125,000 steps in epochs).
    for name, value in (("epochs", epochs),
                        ("batch_size", batch_size),
                        ("gradient_accumulation_steps", gradient_accumulation_steps),
                        ("num_workers", num_workers), ("devices", _args.devices(devices)),
                        ("num_nodes", num_nodes),
                        ("checkpoint", _args.path("train", "checkpoint", checkpoint, False)),
                        ("accelerator", _args.accelerator(accelerator)),
                        ("strategy", strategy), ("precision", precision),
                        ("float32_matmul_precision", float32_matmul_precision), ("seed", seed),
                        ("optim", optim)):
        arguments += _args.option(name, value)
    for name, value in (("resume_interrupted", resume_interrupted), ("overwrite", overwrite)):
        if _args.flag("train", name, value):
            arguments += _args.option(name, True)
    arguments += _args.optim_args(_args.mapping("train", "optim_args", optim_args))
    arguments += _args.loggers(_args.mapping("train", "loggers", loggers))
    arguments += _args.callbacks(_args.mapping("train", "callbacks", callbacks))
    arguments += _args.model_args(_args.mapping("train", "model_args", model_args))
    arguments += _args.activation_checkpoint_args(
        _args.mapping("train", "activation_checkpoint_args", activation_checkpoint_args))
    given = {"epochs": None if epochs == "auto" else epochs,
             "accumulate_grad_batches": gradient_accumulation_steps, "precision": precision,
             "accelerator": accelerator, "devices": devices, "num_nodes": num_nodes,
             "strategy": strategy, **options}
    arguments += _args.trainer_args(_args.mapping("train", "trainer_args", trainer_args), given)
    arguments += _args.loader_args(_args.mapping("train", "loader_args", loader_args))
    arguments += _args.nested("transform_args",
                              _args.mapping("train", "transform_args", transform_args))
    arguments += _args.passthrough(options)
    run(arguments)


pretrain = train  # LightlyTrain 0.18's name for train


_EMBED_PARAMETERS = ("out", "data", "checkpoint", "format", "image_size", "batch_size",
                     "num_workers", "accelerator", "overwrite", "precision")


def _embed_arguments(function: str, data: Any, checkpoint: PathLike,
                     image_size: Union[int, Tuple[int, int], None], batch_size: Optional[int],
                     num_workers: Union[int, str, None], accelerator: Optional[str],
                     precision: Optional[str], options: Mapping[str, Any],
                     refused: Sequence[str] = ()) -> List[str]:
    _args.check_names(function, "embed", _EMBED_PARAMETERS, options, refused)
    arguments = ["embed"]
    for path in _args.paths(function, "data", data):
        arguments += _args.option("data", path)
    arguments += _args.option("checkpoint", _args.path(function, "checkpoint", checkpoint))
    arguments += _args.option("image_size", _args.square_size("image_size", image_size))
    arguments += _args.option("batch_size", batch_size)
    arguments += _args.option("num_workers", num_workers)
    arguments += _args.option("accelerator", _args.accelerator(accelerator))
    arguments += _args.option("precision", None if precision == "auto" else precision)
    return arguments + _args.passthrough(options)


def embed(
    out: PathLike,
    data: Union[PathLike, Sequence[PathLike]],
    checkpoint: PathLike,
    format: Optional[str] = None,
    image_size: Union[int, Tuple[int, int], None] = None,
    batch_size: Optional[int] = None,
    num_workers: Union[int, str, None] = None,
    accelerator: Optional[str] = None,
    overwrite: bool = False,
    precision: Optional[str] = None,
    **options: Any,
) -> None:
    """Writes the embedding of every image in ``data`` (``lightly-train-c embed``).

    Args:
        out: The embedding file.
        data: Folder of images (searched recursively), or a list of folders and
            image files (more than 32 go to the program as a --data-list file).
        checkpoint: A .ckpt of ``train`` or a backbone .safetensors (ours,
            torchvision's, timm's, DINOv2's, DINOv3's, transformers').
        format: "torch" (LightlyTrain's: ``torch.load(out)`` gives
            ``{"filenames": [...], "embeddings": (N, D) float32 tensor}``), "npy"
            (float32 (N, D), file names in ``out + ".filenames.txt"``), "csv"
            (LightlyTrain's), "lightly_csv" or "safetensors"; default: from the
            extension of ``out`` (.pt and .pth: torch; any other: npy).
        image_size: Images are resized to this square size (default 224).
        batch_size: Images per forward pass (default 128).
        num_workers: Data loading threads ("auto": cores minus one; 0: each batch
            decoded when it is asked for).
        accelerator: "auto", "cpu" or "gpu" ("cuda").
        overwrite: Replace an existing ``out``.
        precision: "32-true" (the default), or on a GPU "16-mixed" or "bf16-mixed"
            (16-bit activations, fp32 weights), as LightlyTrain's.
        **options: Any other option of ``lightly-train-c embed --help``
            (``part``, ``vit_pool``, ``devices``, ``max_pixels``).

    Raises:
        TypeError, ValueError, ProgramError: as for :func:`train`.
    """
    arguments = _embed_arguments("embed", data, checkpoint, image_size, batch_size,
                                 num_workers, accelerator, precision, options)
    arguments += _args.option("out", _args.path("embed", "out", out))
    arguments += _args.option("format", format)
    if _args.flag("embed", "overwrite", overwrite):
        arguments += _args.option("overwrite", True)
    run(arguments)


def embed_numpy(
    data: Union[PathLike, Sequence[PathLike]],
    checkpoint: PathLike,
    image_size: Union[int, Tuple[int, int], None] = None,
    batch_size: Optional[int] = None,
    num_workers: Union[int, str, None] = None,
    accelerator: Optional[str] = None,
    precision: Optional[str] = None,
    **options: Any,
) -> Tuple[Any, Any]:
    """The embeddings of the images in ``data`` as numpy arrays (needs numpy).

    Runs :func:`embed` into a temporary .npy file and reads it back.

    Returns:
        (embeddings, filenames): float32 (N, D), and the N file names (paths
        relative to ``data``, as the program lists them: sorted, unreadable
        images left out) as a numpy array of str, decoded as ``os.listdir``
        decodes names (``os.fsencode`` gives a name's bytes back).

    Args and Raises: as for :func:`embed`, without ``out``, ``format`` and
    ``overwrite`` (a TypeError). A file name with a newline cannot be
    returned (a ProgramError saying so): :func:`embed` to a .csv can.
    """
    try:
        import numpy
    except ImportError as error:
        raise ImportError("embed_numpy needs numpy: pip install numpy (or "
                          "lightly-train-c[numpy])") from error
    arguments = _embed_arguments("embed_numpy", data, checkpoint, image_size, batch_size,
                                 num_workers, accelerator, precision, options,
                                 refused=("out", "format", "overwrite"))
    with tempfile.TemporaryDirectory(prefix="lightly-train-c-") as folder:
        out = Path(folder) / "embeddings.npy"
        try:
            run(arguments + _args.option("out", out) + _args.option("format", "npy"))
        except ProgramError as error:
            raise _embed_numpy_error(error) from None
        embeddings = numpy.load(out)
        listed = (out.parent / (out.name + ".filenames.txt")).read_bytes()
    # One name a line, the bytes the program found: decoded as os.listdir
    # decodes them (a name that is not UTF-8 keeps its bytes as surrogates,
    # and os.fsencode gives them back).
    names = [os.fsdecode(name) for name in listed.split(b"\n")[:-1]]
    return embeddings, numpy.array(names, dtype=str)


def _embed_numpy_error(error: ProgramError) -> ProgramError:
    """The program's advice for a file name with a newline (another format)
    is embed's; embed_numpy's is another call."""
    found = re.search(r"file name ('.*') contains a newline", error.message)
    if not found:
        return error
    message = (f"lightly-train-c embed: file name {found.group(1)} contains a newline, which "
               "embed_numpy cannot return (it reads the names one a line): rename the file, "
               "or call lightly_train_c.embed(out=\"embeddings.csv\", ...) and read the csv, "
               "which quotes such names")
    return ProgramError(message, error.exit_status, error.command)


def export(
    out: PathLike,
    checkpoint: PathLike,
    part: Optional[str] = None,
    format: Optional[str] = None,
    overwrite: bool = False,
    **options: Any,
) -> None:
    """Writes a checkpoint's backbone as a state dict or an ONNX model
    (``lightly-train-c export``).

    Args:
        out: The file to write (safetensors: a torchvision ResNet state dict
            without ``fc``, or a timm ViT state dict; ``*.pt``, ``*.pth``: the
            same state dict as torch.save writes it, a YOLO's as Ultralytics'
            checkpoint; ``*.onnx``: an ONNX model of the embedding,
            docs/onnx.md).
        checkpoint: A .ckpt of ``train`` or a backbone .safetensors.
        part: "backbone" (default: what training exports, the teacher for
            DINO; also LightlyTrain's "model", "wrapped_model" and
            "embedding_model"), "student" or "teacher".
        format: "safetensors", "torch" (also LightlyTrain's
            "torch_state_dict"), "onnx", "torch_model" (LightlyTrain's: the
            torchvision module itself, ``torch.load(out, weights_only=False)``;
            ResNets, ShuffleNetV2s, torchvision's ConvNeXts), or from the
            ``out`` extension (the default; LightlyTrain's "package_default"
            is taken as it).
        overwrite: Replace an existing ``out``.
        **options: Any other option of ``lightly-train-c export --help``;
            for ONNX ``image_size`` (default: the training size),
            ``precision`` ("fp32" or "fp16"), ``opset`` (also
            LightlyTrain's ``opset_version``), ``external_data``,
            ``vit_pool``, ``normalize``.

    Raises:
        TypeError, ValueError, ProgramError: as for :func:`train`.
    """
    if "opset_version" in options:  # LightlyTrain's export_onnx name
        options["opset"] = options.pop("opset_version")
    _args.check_names("export", "export", ("out", "checkpoint", "part", "format", "overwrite"),
                      options)
    arguments = ["export"] + _args.option("checkpoint",
                                          _args.path("export", "checkpoint", checkpoint))
    arguments += _args.option("out", _args.path("export", "out", out))
    arguments += _args.option("part", part)  # LightlyTrain's part names are the program's too
    if format != "package_default":
        arguments += _args.option("format", format)
    if _args.flag("export", "overwrite", overwrite):
        arguments += _args.option("overwrite", True)
    run(arguments + _args.passthrough(options))


def list_models() -> List[str]:
    """The names ``train``'s ``model`` takes (``lightly-train-c list-models``),
    as LightlyTrain's ``list_models``; its spellings such as
    "torchvision/resnet50" are taken too."""
    return output(["list-models"]).split()


def list_methods() -> List[str]:
    """The names ``train``'s ``method`` takes, the default first
    (``lightly-train-c list-methods``), as LightlyTrain's ``list_methods``."""
    return output(["list-methods"]).split()
