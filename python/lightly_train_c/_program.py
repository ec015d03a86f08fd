"""The native program inside the wheel: where it is, the environment it runs
in (CUDA's libraries from NVIDIA's pip packages), and running it as a child
process with its output streamed, its one-line error raised, and Ctrl-C
passed on so that a training run stops with its checkpoint."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator, List, Optional, Sequence

PACKAGE_DIR = Path(__file__).resolve().parent
PROGRAM = PACKAGE_DIR / "bin" / "lightly-train-c"


class ProgramError(RuntimeError):
    """A lightly-train-c command failed.

    Attributes:
        message: the program's one-line error (its last line on stderr).
        exit_status: 2 for bad input found before any work (an option, a path,
            a file), 1 for a failure while running (an I/O error, a diverging
            run); see ``lightly-train-c --help``.
        command: the command line that was run.
    """

    def __init__(self, message: str, exit_status: int, command: Sequence[str]):
        super().__init__(f"{message} (exit status {exit_status})")
        self.message = message
        self.exit_status = exit_status
        self.command = list(command)


def nvidia_library_dirs(paths: Optional[Sequence[str]] = None) -> List[str]:
    """The ``nvidia/*/lib`` folders of NVIDIA's pip packages on ``sys.path``.

    CUDA 13's packages (``nvidia-cublas``, ``nvidia-cuda-runtime``, ...) share
    ``nvidia/cu13/lib``; ``nvidia-cudnn-cu13`` installs ``nvidia/cudnn/lib`` and
    ``nvidia-nccl-cu13`` ``nvidia/nccl/lib`` (older packages: one folder per
    package, also found). These are what ``pip install lightly-train-c[cuda]``
    or a CUDA build of PyTorch put into the environment.
    """
    found: List[str] = []
    for entry in sys.path if paths is None else paths:
        base = Path(entry or ".") / "nvidia"
        if not base.is_dir():
            continue
        for package in sorted(base.iterdir()):
            lib = package / "lib"
            if lib.is_dir() and any(".so" in f.name for f in lib.iterdir()):
                if str(lib) not in found:
                    found.append(str(lib))
    return found


def program_environment() -> dict:
    """os.environ with the NVIDIA packages' folders first on LD_LIBRARY_PATH
    (the program opens cuDNN, cuBLAS and NCCL by name when it uses a GPU)."""
    env = dict(os.environ)
    dirs = nvidia_library_dirs()
    if dirs:
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + ([old] if old else []))
    return env


def exec_program(arguments: Sequence[str]) -> None:
    """Replaces this process with the program (the console script): its
    signals, terminal and exit status are the program's own."""
    os.execve(str(PROGRAM), [str(PROGRAM), *arguments], program_environment())


def _relay(stream: IO[bytes], sink: IO[str], last: Optional[List[str]]) -> None:
    """Copies the child's output line by line to sink; keeps the last
    non-empty line in last[0]."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        sink.write(line)
        sink.flush()
        if last is not None and line.strip():
            last[0] = line.rstrip("\n")
    stream.close()


# The program takes at most 32 --data entries on its command line (and a
# command line holds a few megabytes in all): a longer list of folders and
# image files, which LightlyTrain's `data` can be, goes to it as a
# --data-list file, one path a line, removed once the program ended.
DATA_ON_COMMAND_LINE = 32


@contextlib.contextmanager
def _long_data_in_a_file(arguments: Sequence[str]) -> Iterator[List[str]]:
    paths = [argument[len("data="):] for argument in arguments if argument.startswith("data=")]
    if len(paths) <= DATA_ON_COMMAND_LINE:
        yield list(arguments)
        return
    for path in paths:
        if "\n" in path or "\r" in path:
            raise ValueError(f"lightly-train-c {arguments[0]}: data has {len(paths)} entries, "
                             f"more than a command line takes, and one of them a line break, "
                             f"which their list file cannot hold: {path!r}")
    with tempfile.NamedTemporaryFile("wb", prefix="lightly-train-c-data-", suffix=".txt",
                                     delete=False) as listed:
        listed.write(b"".join(os.fsencode(path) + b"\n" for path in paths))
    try:
        yield [argument for argument in arguments if not argument.startswith("data=")] + \
            [f"data_list={listed.name}"]
    finally:
        os.unlink(listed.name)


def run(arguments: Sequence[str]) -> None:
    """Runs the program with `arguments` (a command and its options) and
    waits. Its progress goes to sys.stdout as it comes (straight to the
    terminal when sys.stdout is one, so the progress line redraws in place),
    its messages to sys.stderr. Raises ProgramError with the program's error
    on failure. Ctrl-C (KeyboardInterrupt) is passed on as SIGINT, the run
    stops after its current step with a checkpoint written (continue with
    resume_interrupted=True), and KeyboardInterrupt is raised again (saying
    so when the program had finished all the same); a failure meanwhile is
    a ProgramError."""
    for argument in arguments:
        if "\0" in argument:  # the OS would refuse it with only "embedded null byte"
            name = argument.split("=", 1)[0]
            raise ValueError(f"lightly-train-c {arguments[0]}: {name} holds a NUL byte "
                             f"('\\x00'), which no command line can carry: {argument!r}")
    with _long_data_in_a_file(arguments) as arguments_given:
        _run(arguments_given)


def _run(arguments: Sequence[str]) -> None:
    command = [str(PROGRAM), *arguments]
    to_terminal = _is_terminal(sys.stdout)
    child = subprocess.Popen(
        command,
        env=program_environment(),
        stdin=subprocess.DEVNULL,
        stdout=None if to_terminal else subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    last_error: List[str] = [""]
    relays = [threading.Thread(target=_relay, args=(child.stderr, sys.stderr, last_error))]
    if not to_terminal:
        relays.append(threading.Thread(target=_relay, args=(child.stdout, sys.stdout, None)))
    for relay in relays:
        relay.daemon = True
        relay.start()
    interrupted = False
    while True:
        try:
            status = child.wait()
            break
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reached the child too; a notebook's
            # interrupt reached only us. A second SIGINT changes nothing in
            # the program, so it is always sent; then wait for the checkpoint.
            interrupted = True
            child.send_signal(signal.SIGINT)
    for relay in relays:
        relay.join()
    if status == 128 + signal.SIGINT or (interrupted and status == -signal.SIGINT):
        raise KeyboardInterrupt(last_error[0] or "lightly-train-c stopped by SIGINT")
    if interrupted and status == 0:
        # Ctrl-C came as the program finished: the run is complete, and its
        # last line is no message about the interrupt.
        raise KeyboardInterrupt(f"lightly-train-c {arguments[0]} had finished (exit status 0) "
                                "when Ctrl-C came: nothing was interrupted")
    if status != 0:
        message = last_error[0] or f"lightly-train-c {arguments[0]} failed"
        raise ProgramError(message, status if status > 0 else 128 - status, command)


def output(arguments: Sequence[str]) -> str:
    """The program's standard output for `arguments` (a command that only
    prints, such as list-models). Raises ProgramError on failure."""
    command = [str(PROGRAM), *arguments]
    done = subprocess.run(command, env=program_environment(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ProgramError(lines[-1] if lines else f"lightly-train-c {arguments[0]} failed",
                           done.returncode, command)
    return done.stdout


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty() and stream.fileno() == 1
    except (AttributeError, OSError, ValueError):
        return False
