"""LightlyTrain's ``transform_args`` as lightly-train-c's options.

LightlyTrain nests the view parameters by transform (``random_resize``,
``color_jitter``, ...) and, for DINO and DINOv2, by view (``global_view_1``,
``local_view``); the program takes flat ``--transform [SCOPE.]KEY=VALUE``
entries (docs/commands.md, "train"). The mapping:

- ``image_size`` (n or (n, n)) -> image_size
- ``random_resize`` {min_scale, max_scale} -> global.scale_min / scale_max
- ``random_flip`` {horizontal_prob, vertical_prob} -> flip_p, vflip_p
- ``random_rotation`` {prob, degrees: d or (low, high)} -> rotate_p and
  rotate_min / rotate_max (d: -d and d), every view; interpolation only
  cv2.INTER_AREA (3, LightlyTrain's) or INTER_LINEAR (1), one to warpAffine
- ``color_jitter`` {prob, strength, brightness, contrast, saturation, hue}
  -> jitter_p and strength x each factor (LightlyTrain's jitter is the
  factor times strength; give strength with the factors); None -> jitter_p 0
- ``random_gray_scale`` p -> grey_p
- ``gaussian_blur`` {prob, sigmas} and ``solarize`` {prob, threshold}: the
  first global view for dino / dinov2 / dinov31 (``global_view_1`` holds the second
  one's), every global view otherwise; None -> probability 0
- ``local_view`` {num_views, view_size, random_resize, gaussian_blur} ->
  local_views, local_image_size and the ``local.`` keys
- dinov31's ``paka_num_local`` -> the method arg of that name (equal to
  method_args' when both are given), ``record_geometry`` (True only),
  ``paka_high_overlap_iou`` (in (0, 1]; PaKA locals lie inside their parent)
- ``num_channels``, ``channel_drop`` {num_channels_keep, weight_drop} and
  ``normalize`` {mean, std}, resolved as LightlyTrain's MethodTransformArgs:
  the model takes num_channels_keep channels with channel_drop, else
  num_channels, else ("auto") len(normalize's mean), else 3; mean and std
  are repeated to that count -> num_channels (the channels images are read
  with: one per weight with channel_drop), channel_drop KEEP:W1,...,
  normalize MEAN,...:STD,...

Any other key is passed on as one of the program's own (``scale_min``,
``local.blur_p``, ...), which the program checks.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Optional

from lightly_train_c._arguments import square_size, text

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class _Views:
    """Collects the options of one transform_args mapping."""

    def __init__(self, method: Optional[str]):
        self.multi_crop = method in ("dino", "dinov2", "dinov31")
        self.dinov31 = method == "dinov31"
        self.options: Dict[str, Any] = {}
        self.entries: List[str] = []
        self.channel_args: Dict[str, Any] = {}  # num_channels, channel_drop, normalize

    def set(self, scope: str, key: str, value: Any) -> None:
        self.entries.append(f"transform={scope}{key}={text(value)}")

    def dict_of(self, where: str, value: Any, allowed: tuple) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"transform_args[{where}]: expected a dict, got {value!r}")
        unknown = [key for key in value if key not in allowed]
        if unknown:
            raise ValueError(f"transform_args[{where}]: lightly-train-c has no "
                             f"{', '.join(unknown)} (accepted: {', '.join(allowed)})")
        return value

    def random_resize(self, scope: str, where: str, value: Any) -> None:
        if value is None:
            raise ValueError(f"transform_args[{where}]=None: lightly-train-c always crops")
        value = self.dict_of(where, value, ("min_scale", "max_scale"))
        if "min_scale" in value:
            self.set(scope, "scale_min", value["min_scale"])
        if "max_scale" in value:
            self.set(scope, "scale_max", value["max_scale"])

    def gaussian_blur(self, scope: str, where: str, value: Any) -> None:
        if value is None:
            self.set(scope, "blur_p", 0)
            return
        value = self.dict_of(where, value, ("prob", "sigmas", "blur_limit"))
        if value.get("blur_limit", 0) not in (0, (0, 0), [0, 0]):
            raise ValueError(f"transform_args[{where}]: lightly-train-c sizes the kernel from "
                             "sigma (blur_limit 0)")
        if "prob" in value:
            self.set(scope, "blur_p", value["prob"])
        if "sigmas" in value:
            sigmas = value["sigmas"]
            if (not isinstance(sigmas, (list, tuple)) or len(sigmas) != 2
                    or not all(isinstance(sigma, numbers.Real) for sigma in sigmas)):
                raise ValueError(f"transform_args[{where}]['sigmas']: expected (min, max), "
                                 f"two numbers, got {sigmas!r}")
            low, high = sigmas
            self.set(scope, "blur_sigma_min", low)
            self.set(scope, "blur_sigma_max", high)

    def solarize(self, scope: str, where: str, value: Any) -> None:
        if value is None:
            self.set(scope, "solarize_p", 0)
            return
        value = self.dict_of(where, value, ("prob", "threshold"))
        if "prob" in value:
            self.set(scope, "solarize_p", value["prob"])
        if "threshold" in value:
            self.set(scope, "solarize_threshold", value["threshold"])

    def color_jitter(self, value: Any) -> None:
        if value is None:
            self.set("", "jitter_p", 0)
            return
        factors = ("brightness", "contrast", "saturation", "hue")
        value = self.dict_of("'color_jitter'", value, ("prob", "strength") + factors)
        if "prob" in value:
            self.set("", "jitter_p", value["prob"])
        given = [factor for factor in factors if factor in value]
        if given and "strength" not in value:
            raise ValueError("transform_args['color_jitter']: give strength with "
                             f"{', '.join(given)} (the jitter is strength x factor)")
        if "strength" in value and len(given) < len(factors):
            raise ValueError("transform_args['color_jitter']: with strength, give all of "
                             f"{', '.join(factors)} (each is scaled by it)")
        for factor in given:
            self.set("", factor, float(value["strength"]) * float(value[factor]))

    def random_rotation(self, value: Any) -> None:
        if value is None:
            self.set("", "rotate_p", 0)
            return
        value = self.dict_of("'random_rotation'", value, ("prob", "degrees", "interpolation"))
        if value.get("interpolation", 3) not in (1, 3):
            raise ValueError("transform_args['random_rotation']['interpolation']: lightly-train-c "
                             "rotates bilinearly, as warpAffine takes cv2.INTER_AREA (3, "
                             "LightlyTrain's) and INTER_LINEAR (1)")
        degrees = value.get("degrees")
        if isinstance(degrees, numbers.Real) and not isinstance(degrees, bool):
            low, high = -abs(float(degrees)), abs(float(degrees))
        elif (isinstance(degrees, (list, tuple)) and len(degrees) == 2
              and all(isinstance(d, numbers.Real) and not isinstance(d, bool) for d in degrees)):
            low, high = (float(d) for d in degrees)
        else:
            raise ValueError("transform_args['random_rotation']['degrees']: expected a number or "
                             f"(low, high), got {degrees!r}")
        self.set("", "rotate_p", value.get("prob", 0))
        self.set("", "rotate_min", low)
        self.set("", "rotate_max", high)

    def local_view(self, value: Any) -> None:
        value = self.dict_of("'local_view'", value,
                             ("num_views", "view_size", "random_resize", "gaussian_blur"))
        if "num_views" in value:
            self.options["local_views"] = value["num_views"]
        if "view_size" in value:
            self.options["local_image_size"] = square_size("local_view.view_size",
                                                           value["view_size"])
        if "random_resize" in value:
            self.random_resize("local.", "'local_view']['random_resize'",
                               value["random_resize"])
        if "gaussian_blur" in value:
            self.gaussian_blur("local.", "'local_view']['gaussian_blur'",
                               value["gaussian_blur"])

    def dinov31_key(self, key: str, value: Any) -> None:
        # DINOv31TransformArgs: the PaKA views' count (the method arg of the
        # same name), the geometry they need, and a containment bound that
        # boxes drawn inside their parent always meet.
        if key == "paka_num_local":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"transform_args['paka_num_local']={value!r}: expected an "
                                 "integer >= 1")
            self.options["paka_num_local"] = value
        elif key == "record_geometry" and value is not True:
            raise ValueError("transform_args['record_geometry']: dinov31 needs the views' "
                             "geometry, lightly-train-c always records it")
        elif key == "paka_high_overlap_iou" and not (
                isinstance(value, (int, float)) and 0 < value <= 1):
            raise ValueError(f"transform_args['paka_high_overlap_iou']={value!r}: expected a "
                             "number in (0, 1] (PaKA locals lie inside their parent: "
                             "containment 1)")

    def add(self, key: str, value: Any) -> None:
        first_global = "view0." if self.multi_crop else "global."
        if key == "image_size":
            self.options["image_size"] = square_size("transform_args['image_size']", value)
        elif key == "random_resize":
            self.random_resize("global.", "'random_resize'", value)
        elif key == "random_flip":
            value = self.dict_of("'random_flip'", value, ("horizontal_prob", "vertical_prob"))
            if "horizontal_prob" in value:
                self.set("", "flip_p", value["horizontal_prob"])
            if value.get("vertical_prob", 0):
                self.set("", "vflip_p", value["vertical_prob"])
        elif key == "random_rotation":
            self.random_rotation(value)
        elif key == "color_jitter":
            self.color_jitter(value)
        elif key == "random_gray_scale":
            self.set("", "grey_p", value or 0)
        elif key == "gaussian_blur":
            self.gaussian_blur(first_global, "'gaussian_blur'", value)
        elif key == "solarize":
            self.solarize(first_global, "'solarize'", value)
        elif key == "global_view_1" and self.multi_crop:
            value = self.dict_of("'global_view_1'", value, ("gaussian_blur", "solarize"))
            if "gaussian_blur" in value:
                self.gaussian_blur("view1.", "'global_view_1']['gaussian_blur'",
                                   value["gaussian_blur"])
            if "solarize" in value:
                self.solarize("view1.", "'global_view_1']['solarize'", value["solarize"])
        elif key == "local_view" and self.multi_crop:
            self.local_view(value)
        elif key in ("paka_num_local", "record_geometry", "paka_high_overlap_iou") and self.dinov31:
            self.dinov31_key(key, value)
        elif key in ("num_channels", "channel_drop", "normalize"):
            self.channel_args[key] = value  # resolved together (channels)
        elif isinstance(value, (Mapping, list, tuple)):
            raise ValueError(f"transform_args[{key!r}]: lightly-train-c has no such transform "
                             "(see lightly_train_c.train's docstring)")
        else:
            self.set("", key, value)  # one of the program's own keys


def _numbers(where: str, value: Any, count: Optional[int] = None) -> List[float]:
    """A non-empty list or tuple of numbers (of `count` when given)."""
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(item, numbers.Real) and not isinstance(item, bool)
                       for item in value)
            or (count is not None and len(value) != count)):
        raise ValueError(f"transform_args[{where}]: expected a list of "
                         f"{count if count is not None else 'one or more'} numbers, "
                         f"got {value!r}")
    return list(value)


def _channels(views: _Views, given: Mapping[str, Any]) -> None:
    """num_channels, channel_drop and normalize (see the module's text)."""
    drop, normalize = given.get("channel_drop"), given.get("normalize")
    num_channels = given.get("num_channels", "auto")
    if num_channels != "auto" and (isinstance(num_channels, bool)
                                   or not isinstance(num_channels, int) or num_channels < 1):
        raise ValueError(f"transform_args['num_channels']={num_channels!r}: expected an "
                         "integer >= 1 or 'auto'")
    if normalize is not None:
        normalize = views.dict_of("'normalize'", normalize, ("mean", "std"))
    mean = _numbers("'normalize']['mean'", (normalize or {}).get("mean", IMAGENET_MEAN))
    std = _numbers("'normalize']['std'", (normalize or {}).get("std", IMAGENET_STD))
    if drop is not None:
        drop = views.dict_of("'channel_drop'", drop, ("num_channels_keep", "weight_drop"))
        keep = drop.get("num_channels_keep")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"transform_args['channel_drop']['num_channels_keep']={keep!r}: "
                             "expected an integer >= 1")
        weights = _numbers("'channel_drop']['weight_drop'", drop.get("weight_drop"))
        if num_channels not in ("auto", keep):
            raise ValueError(f"transform_args['num_channels']={num_channels}: with "
                             f"channel_drop the model takes num_channels_keep={keep} channels")
        model_channels = keep
        views.options["num_channels"] = len(weights)  # the images' channels
        views.options["channel_drop"] = f"{keep}:" + ",".join(text(w) for w in weights)
    else:
        model_channels = len(mean) if num_channels == "auto" else num_channels
        if model_channels != 3:
            views.options["num_channels"] = model_channels
    # LightlyTrain repeats mean and std to the model's channels.
    mean = [mean[c % len(mean)] for c in range(model_channels)]
    std = [std[c % len(std)] for c in range(model_channels)]
    if (tuple(mean), tuple(std)) != (IMAGENET_MEAN, IMAGENET_STD):
        views.options["normalize"] = (",".join(text(m) for m in mean) + ":" +
                                      ",".join(text(s) for s in std))


def transform_options(transform_args: Mapping[str, Any], method: Optional[str]) -> tuple:
    """(options, entries): options such as image_size for the command, and
    the ``transform=...`` arguments."""
    views = _Views(method)
    for key, value in transform_args.items():
        views.add(key, value)
    if views.channel_args:
        _channels(views, views.channel_args)
    return views.options, views.entries
