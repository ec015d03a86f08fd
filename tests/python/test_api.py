"""Unit tests of the Python package (python/lightly_train_c): how its calls'
arguments become the program's options, and what wrong ones raise. The
calls' `run` is replaced by one that records the command line, so nothing
trains; check_names asks the installed program's --help. Run by
tests/e2e/wheel.sh in the venv the wheel is installed into (standard
library only; the numpy cases are skipped without numpy)."""

import datetime
import signal
import stat
import tempfile
import unittest
from pathlib import Path

import lightly_train_c
from lightly_train_c import _program

try:
    import numpy
except ImportError:
    numpy = None


class Recorded(Exception):
    """Raised by the recording run: the command line, nothing run."""


def record(arguments):
    raise Recorded(list(arguments))


class ApiTest(unittest.TestCase):
    def setUp(self):
        self.run_before = lightly_train_c.run
        lightly_train_c.run = record

    def tearDown(self):
        lightly_train_c.run = self.run_before

    def command(self, function, **arguments):
        with self.assertRaises(Recorded) as recorded:
            function(**arguments)
        return recorded.exception.args[0]

    def train(self, **arguments):
        return self.command(lightly_train_c.train, **{"out": "o", "data": "d", **arguments})

    def refused(self, error, message, function, **arguments):
        with self.assertRaises(error) as raised:
            function(**arguments)
        self.assertIn(message, str(raised.exception))

    def refused_train(self, error, message, **arguments):
        self.refused(error, message, lightly_train_c.train,
                     **{"out": "o", "data": "d", **arguments})

    # ---- method: LightlyTrain's default, the program's own ----------------------------
    def test_lists_are_the_programs(self):
        models, methods = lightly_train_c.list_models(), lightly_train_c.list_methods()
        for name in ("resnet50", "vit_s14", "dinov3/vitb16", "ultralytics/yolo11s.yaml",
                     "dinov3/convnext-large", "dinov2/vitb14", "dinov3/vitb16-notpretrained",
                     "timm/resnet50", "torchvision/shufflenet_v2_x1_0"):
            self.assertIn(name, models)
        self.assertEqual(len(models), len(set(models)))
        self.assertEqual(methods[0], "distillation")
        self.assertIn("dinov2", methods)

    def test_method_default_is_the_programs(self):
        self.assertEqual(self.train(), ["train", "data=d", "out=o"])
        self.assertIn("method=dino", self.train(method="dino"))

    # ---- devices: a list is always GPU indices ---------------------------------------
    def test_devices(self):
        self.assertIn("devices=1,", self.train(devices=[1]))
        self.assertIn("devices=0,", self.train(devices=(0,)))
        self.assertIn("devices=0,2", self.train(devices=[0, 2]))
        self.assertIn("devices=3", self.train(devices=3))
        self.assertIn("devices=auto", self.train(devices="auto"))
        self.assertIn("devices=1,", self.command(lightly_train_c.embed, out="e.npy", data="d",
                                                 checkpoint="m", devices=[1]))
        self.refused_train(TypeError, "devices: a list holds GPU indices", devices=["a"])
        self.refused_train(TypeError, "devices: a list holds GPU indices", devices=[])
        self.refused_train(TypeError, "devices: a list holds GPU indices", devices=[True])
        self.refused_train(ValueError, "GPU indices are 0 or more", devices=[-1])
        self.refused_train(TypeError, "devices must be a count", devices=1.5)

    # ---- paths: never dropped; a missing one is named --------------------------------
    def test_paths(self):
        self.assertIn("out=auto", self.train(out="auto"))
        self.assertIn("data=auto", self.train(data="auto"))
        self.assertIn("data=/x", self.train(data=b"/x"))
        self.assertEqual(self.train(data=[Path("a"), "b"])[1:3], ["data=a", "data=b"])
        for value in (None, 123, [1], []):
            self.refused_train(TypeError, "train(): data must be a folder", data=value)
        self.refused_train(TypeError, "train(): out must be a path", out=None)
        self.refused_train(TypeError, "train(): checkpoint must be a path", checkpoint=1)
        self.assertNotIn("checkpoint", " ".join(self.train(checkpoint=None)))
        self.refused(TypeError, "embed(): out must be a path", lightly_train_c.embed,
                     out=None, data="d", checkpoint="m")
        self.refused(TypeError, "embed(): checkpoint must be a path", lightly_train_c.embed,
                     out="e.npy", data="d", checkpoint=None)
        self.refused(TypeError, "export(): out must be a path", lightly_train_c.export,
                     out=None, checkpoint="c")
        self.assertIn("out=auto", self.command(lightly_train_c.export, out="auto",
                                               checkpoint="c"))

    # ---- export to ONNX: the program's options, LightlyTrain's opset_version ------------
    def test_export_onnx(self):
        command = self.command(lightly_train_c.export, out="m.onnx", checkpoint="c",
                               format="onnx", precision="fp16", image_size=64,
                               opset_version=21, external_data=True)
        self.assertEqual(command[:4], ["export", "checkpoint=c", "out=m.onnx", "format=onnx"])
        for expected in ("precision=fp16", "image_size=64", "opset=21", "external_data=true"):
            self.assertIn(expected, command)
        self.assertIn("export_onnx=m.onnx",
                      self.command(lightly_train_c.embed, out="e.npy", data="d", checkpoint="c",
                                   export_onnx="m.onnx"))

    # ---- a NUL byte: the argument named (was only "embedded null byte") ---------------
    def test_nul_bytes_named(self):
        nul = "train(): {} holds a NUL byte ('\\x00'), which no path can"
        self.refused_train(ValueError, nul.format("out"), out="o\0x")
        self.refused_train(ValueError, nul.format("data"), data="d\0")
        self.refused_train(ValueError, nul.format("data"), data=["a", Path("b\0")])
        self.refused_train(ValueError, nul.format("checkpoint"), checkpoint=b"m\0.ckpt")
        self.refused(ValueError, "embed(): checkpoint holds a NUL byte", lightly_train_c.embed,
                     out="e.npy", data="d", checkpoint="m\0")
        self.refused(ValueError, "export(): out holds a NUL byte", lightly_train_c.export,
                     out="x\0.safetensors", checkpoint="c")
        # Any other option's value: named by the program's option, before
        # anything runs.
        with self.assertRaises(ValueError) as raised:
            _program.run(["train", "data=d", "method_arg=temperature=0\0.1"])
        self.assertIn("lightly-train-c train: method_arg holds a NUL byte", str(raised.exception))

    # ---- "auto": the program's where it has it ---------------------------------------
    def test_auto(self):
        command = self.train(num_workers="auto", accelerator="auto", precision="auto",
                             optim="auto", epochs="auto", optim_args={"lr": "auto"})
        for expected in ("num_workers=auto", "accelerator=auto", "precision=auto",
                         "optim=auto", "lr=auto", "epochs=auto"):
            self.assertIn(expected, command)
        self.assertIn("accelerator=gpu", self.train(accelerator="cuda"))

    # ---- switches: bool only -----------------------------------------------------------
    def test_flags(self):
        for name, option in (("overwrite", "overwrite=true"),
                             ("resume_interrupted", "resume=true")):
            self.assertIn(option, self.train(**{name: True}))
            self.assertIn(option, self.train(**{name: 1}))
            self.assertNotIn(option, self.train(**{name: False}))
            self.assertNotIn(option, self.train(**{name: 0}))
            for value in ("False", "true", 2, None):
                self.refused_train(TypeError, f"train(): {name} must be True or False",
                                   **{name: value})
        self.refused(TypeError, "embed(): overwrite must be True or False", lightly_train_c.embed,
                     out="e.npy", data="d", checkpoint="m", overwrite="False")
        self.refused(TypeError, "export(): overwrite must be True or False",
                     lightly_train_c.export, out="e", checkpoint="c", overwrite="False")

    # ---- dicts and sizes ---------------------------------------------------------------
    def test_dicts(self):
        for name in ("method_args", "optim_args", "transform_args"):
            for value in ("x", ["temperature", 0.1]):
                self.refused_train(TypeError, f"train(): {name} must be a dict", **{name: value})
        self.assertIn("transform_args.gaussian_blur.sigmas=[1,2]",
                      self.train(transform_args={"gaussian_blur": {"sigmas": (1, 2)}}))

    def test_torchvision_weights_model_arg(self):
        self.assertIn("model_arg=weights=IMAGENET1K_V1",
                      self.train(model="torchvision/resnet50",
                                 model_args={"weights": "IMAGENET1K_V1"}))
        self.assertIn("model_arg=weights=None",
                      self.train(model="torchvision/resnet50", model_args={"weights": None}))

    def test_timm_pretrained_model_args(self):
        arguments = self.train(model="timm/resnet50.a1_in1k",
                               model_args={"pretrained": True, "checkpoint_path": "w.pt"})
        self.assertIn("model=timm/resnet50.a1_in1k", arguments)
        self.assertIn("model_arg=pretrained=true", arguments)
        self.assertIn("model_arg=checkpoint_path=w.pt", arguments)

    def test_export_parts(self):
        for part in ("model", "wrapped_model", "embedding_model", "teacher"):
            command = self.command(lightly_train_c.export, out="o.pt", checkpoint="c.ckpt",
                                   part=part)
            self.assertIn(f"part={part}", command)
        # LightlyTrain's torch_model goes to the program as it is (export.c writes it)
        self.assertIn("format=torch_model",
                      self.command(lightly_train_c.export, out="o.pt", checkpoint="c.ckpt",
                                   part="embedding_model", format="torch_model"))

    def test_transform_args_as_the_command_line_spells_them(self):
        """transform_args go to the program as LightlyTrain's command line
        writes them (NAME.PATH=VALUE); the program maps and checks them
        (tests/test_transform_args.c)."""
        command = self.train(method="dinov31", transform_args={
            "image_size": (64, 64), "num_channels": 4,
            "normalize": {"mean": [0.1, 0.2, 0.3, 0.4], "std": [0.5] * 4},
            "color_jitter": None, "random_rotation": {"prob": 0.3, "degrees": 20},
            "paka_num_local": 4, "record_geometry": True, "local.blur_p": 0.1})
        for expected in ("transform_args.image_size=[64,64]", "transform_args.num_channels=4",
                         "transform_args.normalize.mean=[0.1,0.2,0.3,0.4]",
                         "transform_args.normalize.std=[0.5,0.5,0.5,0.5]",
                         "transform_args.color_jitter=None",
                         "transform_args.random_rotation.prob=0.3",
                         "transform_args.random_rotation.degrees=20",
                         "transform_args.paka_num_local=4",
                         "transform_args.record_geometry=true",
                         "transform_args.local.blur_p=0.1"):
            self.assertIn(expected, command)
        self.assertFalse(any(a.startswith("transform=") for a in command))

    def test_loggers(self):
        self.assertEqual(
            self.train(loggers={"mlflow": {"tracking_uri": "http://h:5000", "run_name": None,
                                           "tags": {"team": "research"}},
                                "tensorboard": None})[-4:],
            ["loggers=mlflow", "loggers=mlflow.tracking_uri=http://h:5000",
             "loggers=mlflow.tags.team=research", "loggers=tensorboard=null"])
        self.assertEqual(self.train(loggers={"mlflow": {}})[-1], "loggers=mlflow")
        self.refused_train(TypeError, "loggers['mlflow'] must be a dict",
                           loggers={"mlflow": "on"})
        self.refused_train(TypeError, "train(): loggers must be a dict", loggers=["mlflow"])

    def test_model_args(self):
        self.assertEqual(self.train(model_args={"drop_path_rate": 0.1,
                                                "zero_init_residual": True})[-2:],
                         ["model_arg=drop_path_rate=0.1", "model_arg=zero_init_residual=true"])
        self.refused_train(ValueError, "model_args['x']: lightly-train-c takes single values",
                           model_args={"x": [1]})

    def test_activation_checkpoint_args(self):
        self.assertIn("activation_checkpointing=true",
                      self.train(activation_checkpoint_args={"enabled": True, "every_n_blocks": 1}))
        self.assertFalse(any("activation" in a for a in
                             self.train(activation_checkpoint_args={"enabled": False})))
        self.assertEqual(
            self.train(activation_checkpoint_args={"enabled": True, "every_n_blocks": 2})[-2:],
            ["activation_checkpointing=true", "activation_checkpointing_every=2"])
        self.refused_train(ValueError, "the keys are enabled and every_n_blocks",
                           activation_checkpoint_args={"enabled": True, "blocks": 2})

    def test_trainer_and_loader_args(self):
        # LightlyTrain's command-line spelling: the program maps or refuses them
        # (tests/test_trainer_args.c, e2e/lightly_train_values.sh)
        command = self.train(trainer_args={"max_steps": 10, "log_every_n_steps": 2},
                             loader_args={"shuffle": True, "num_workers": 3})
        self.assertEqual(command[-4:], ["trainer_args.max_steps=10",
                                        "trainer_args.log_every_n_steps=2",
                                        "loader_args.shuffle=true", "loader_args.num_workers=3"])
        self.assertEqual(self.train(trainer_args={"max_time": {"hours": 2, "minutes": 30}})[-2:],
                         ["trainer_args.max_time.hours=2", "trainer_args.max_time.minutes=30"])
        self.assertEqual(self.train(trainer_args={"max_time": datetime.timedelta(hours=1.5)})[-1],
                         "trainer_args.max_time.seconds=5400.0")
        self.assertEqual(self.train(trainer_args={"max_time": "00:12:00:00",
                                                  "limit_train_batches": 1.0,
                                                  "devices": [1], "accelerator": "cuda"})[-4:],
                         ["trainer_args.max_time=00:12:00:00",
                          "trainer_args.limit_train_batches=1.0",
                          "trainer_args.devices=1,", "trainer_args.accelerator=gpu"])
        self.assertEqual(self.train(trainer_args={"gradient_clip_val": None})[-1],
                         "trainer_args.gradient_clip_val=None")
        self.refused_train(TypeError, "train(): epochs given twice",
                           epochs=5, trainer_args={"max_epochs": 3})
        self.refused_train(TypeError, "train(): precision given twice",
                           precision="32-true", trainer_args={"precision": "bf16-mixed"})

    def test_strategy(self):
        self.assertIn("strategy=ddp", self.train(strategy="ddp"))
        self.assertIn("float32_matmul_precision=high", self.train(float32_matmul_precision="high"))
        self.assertFalse(any(a.startswith("strategy=") for a in self.train()))

    def test_callbacks(self):
        self.assertEqual(
            self.train(callbacks={"model_checkpoint": {"every_n_epochs": 5, "save_top_k": -1,
                                                       "save_last": True, "dirpath": None},
                                  "early_stopping": None, "learning_rate_monitor": None})[-6:],
            ["callbacks=model_checkpoint", "callbacks=model_checkpoint.every_n_epochs=5",
             "callbacks=model_checkpoint.save_top_k=-1", "callbacks=model_checkpoint.save_last=true",
             "callbacks=early_stopping=null", "callbacks=learning_rate_monitor=null"])
        self.assertEqual(self.train(callbacks={"device_stats_monitor": {"cpu_stats": True}})[-2:],
                         ["callbacks=device_stats_monitor",
                          "callbacks=device_stats_monitor.cpu_stats=true"])
        self.refused_train(TypeError, "callbacks['early_stopping'] must be a dict",
                           callbacks={"early_stopping": 3})
        self.refused_train(TypeError, "train(): callbacks must be a dict", callbacks=["x"])

    def test_image_size(self):
        embed = dict(out="e.npy", data="d", checkpoint="m")
        self.assertIn("image_size=32", self.command(lightly_train_c.embed, image_size=(32, 32),
                                                    **embed))
        self.refused(ValueError, "takes square images", lightly_train_c.embed,
                     image_size=(32, 64), **embed)
        self.refused(TypeError, "image_size must be an int or a pair", lightly_train_c.embed,
                     image_size="32", **embed)
        self.refused(TypeError, "image_size must be an int or a pair", lightly_train_c.embed,
                     image_size=True, **embed)

    def test_embed_precision(self):
        embed = dict(out="e.npy", data="d", checkpoint="m")
        self.assertIn("precision=bf16-mixed",
                      self.command(lightly_train_c.embed, precision="bf16-mixed", **embed))
        self.assertFalse(any(a.startswith("precision=") for a in
                             self.command(lightly_train_c.embed, precision="auto", **embed)))

    @unittest.skipIf(numpy is None, "needs numpy")
    def test_numpy_integers(self):
        embed = dict(out="e.npy", data="d", checkpoint="m")
        self.assertIn("image_size=32", self.command(lightly_train_c.embed,
                                                    image_size=numpy.int64(32), **embed))
        self.assertIn("image_size=32", self.command(
            lightly_train_c.embed, image_size=(numpy.int32(32), numpy.int32(32)), **embed))
        self.assertIn("devices=1,", self.train(devices=list(numpy.array([1]))))
        self.assertIn("devices=0,1", self.train(devices=tuple(numpy.arange(2))))

    # ---- embed_numpy: what it sets itself is refused -----------------------------------
    @unittest.skipIf(numpy is None, "needs numpy")
    def test_embed_numpy_own_options(self):
        for name, value in (("out", "e.npy"), ("format", "csv"), ("overwrite", True)):
            with self.assertRaises(TypeError) as raised:
                lightly_train_c.embed_numpy(data="d", checkpoint="m", **{name: value})
            message = str(raised.exception)
            self.assertIn(f"embed_numpy() got unknown argument(s) '{name}'", message)
            accepted = message.split("accepted: ")[1].split(", ")
            self.assertIn("vit_pool", accepted)
            for own in ("out", "format", "overwrite"):
                self.assertNotIn(own, accepted)

    @unittest.skipIf(numpy is None, "needs numpy")
    def test_embed_numpy_newline_advice(self):
        def newline(arguments):
            raise lightly_train_c.ProgramError(
                "lightly-train-c embed: file name 'a\\nb.jpg' contains a newline, which the npy "
                "format's "
                "one-name-per-line filenames file cannot hold (use csv or safetensors)", 2,
                arguments)
        lightly_train_c.run = newline
        with self.assertRaises(lightly_train_c.ProgramError) as raised:
            lightly_train_c.embed_numpy(data="d", checkpoint="m")
        self.assertIn("file name 'a\\nb.jpg' contains a newline, which embed_numpy cannot return",
                      raised.exception.message)
        self.assertIn("lightly_train_c.embed(out=\"embeddings.csv\"", raised.exception.message)
        self.assertNotIn("use csv or safetensors", raised.exception.message)
        self.assertEqual(raised.exception.exit_status, 2)


class DataListTest(unittest.TestCase):
    """A data list longer than the command line takes goes to the program as
    a --data-list file: a stand-in program writes what it was given."""

    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.program_before = _program.PROGRAM
        self.seen = Path(self.folder.name) / "seen.txt"
        path = Path(self.folder.name) / "lightly-train-c"
        path.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; case \"$a\" in data_list=*) "
                        f"cat \"${{a#data_list=}}\";; esac; done > '{self.seen}'\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        _program.PROGRAM = path

    def tearDown(self):
        _program.PROGRAM = self.program_before
        self.folder.cleanup()

    def given(self, data):
        lightly_train_c.train(out="o", data=data, method="simclr")
        return self.seen.read_text().splitlines()

    def test_short_list_on_the_command_line(self):
        lines = self.given(["a", "b.jpg"])
        self.assertIn("data=a", lines)
        self.assertIn("data=b.jpg", lines)
        self.assertFalse(any(line.startswith("data_list=") for line in lines))

    def test_long_list_in_a_file(self):
        paths = [f"images/{i:03d}.jpg" for i in range(_program.DATA_ON_COMMAND_LINE + 1)]
        lines = self.given(paths)
        self.assertFalse(any(line.startswith("data=") for line in lines))
        listed = [line for line in lines if line.startswith("data_list=")]
        self.assertEqual(len(listed), 1)
        at = lines.index(listed[0])
        self.assertEqual(lines[at + 1:at + 1 + len(paths)], paths)
        self.assertFalse(Path(listed[0][len("data_list="):]).exists())  # removed after

    def test_line_break_in_a_long_list(self):
        paths = [f"{i}.jpg" for i in range(_program.DATA_ON_COMMAND_LINE)] + ["a\nb.jpg"]
        with self.assertRaises(ValueError) as raised:
            lightly_train_c.train(out="o", data=paths)
        self.assertIn("a line break, which their list file cannot hold", str(raised.exception))


class InterruptTest(unittest.TestCase):
    """Ctrl-C while the program runs: a stand-in program that sends SIGINT
    to its parent (us) and then ends as the real one would."""

    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.program_before = _program.PROGRAM
        # A background job (make test) ignores SIGINT; Python's own handler back.
        self.handler_before = signal.signal(signal.SIGINT, signal.default_int_handler)

    def tearDown(self):
        _program.PROGRAM = self.program_before
        signal.signal(signal.SIGINT, self.handler_before)
        self.folder.cleanup()

    def program(self, last_line, status):
        path = Path(self.folder.name) / "lightly-train-c"
        path.write_text(f"#!/bin/sh\ntrap '' INT\necho '{last_line}' >&2\n"
                        f"sleep 0.3\nkill -INT $PPID\nsleep 0.3\nexit {status}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        _program.PROGRAM = path

    def outcome(self):
        """What run() raised (KeyboardInterrupt included: a stray one would
        stop unittest itself)."""
        try:
            _program.run(["train"])
        except BaseException as raised:  # noqa: B902
            return raised
        return None

    def test_finished_run(self):
        self.program("tensorboard --logdir out", 0)
        raised = self.outcome()
        self.assertIsInstance(raised, KeyboardInterrupt)
        self.assertEqual(str(raised), "lightly-train-c train had finished (exit status 0) when "
                         "Ctrl-C came: nothing was interrupted")

    def test_stopped_run(self):
        self.program("interrupted (SIGINT) after step 3: checkpoint written", 130)
        raised = self.outcome()
        self.assertIsInstance(raised, KeyboardInterrupt)
        self.assertEqual(str(raised), "interrupted (SIGINT) after step 3: checkpoint written")

    def test_failed_run(self):
        self.program("lightly-train-c train: disk full", 1)
        raised = self.outcome()
        self.assertIsInstance(raised, lightly_train_c.ProgramError)
        self.assertEqual(raised.message, "lightly-train-c train: disk full")


if __name__ == "__main__":
    unittest.main()
