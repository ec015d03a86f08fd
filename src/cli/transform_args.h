// LightlyTrain's transform_args as train's options. LightlyTrain nests its
// view parameters by transform (random_resize, color_jitter, ...) and, for
// DINO, DINOv2 and DINOv31, by view (global_view_1, local_view); the program
// takes flat --transform [SCOPE.]KEY=VALUE entries (docs/commands.md). Its
// command line spells them transform_args.PATH=VALUE
// (transform_args.random_resize.min_scale=0.2, transform_args.image_size=[448,448]),
// and the Python API sends its transform_args dict in the same form. Mapping:
//   image_size n or [n, n]                    --image-size n
//   random_resize {min_scale, max_scale}      global.scale_min / scale_max
//   random_flip {horizontal_prob, vertical_prob}  flip_p, vflip_p
//   random_rotation {prob, degrees: d or [low, high], interpolation 1|3}
//                                             rotate_p, rotate_min / rotate_max (d: -d, d)
//   color_jitter {prob, strength, brightness, contrast, saturation, hue}
//                                             jitter_p and strength x each factor
//                                             (LightlyTrain's jitter); null: jitter_p 0
//   random_gray_scale p                       grey_p
//   gaussian_blur {prob, sigmas, blur_limit 0}, solarize {prob, threshold}:
//                                             the first global view for dino / dinov2 /
//                                             dinov31 (global_view_1 holds the second's),
//                                             every global view otherwise; null: prob 0
//   local_view {num_views, view_size, random_resize, gaussian_blur}
//                                             --local-views, --local-image-size, local.*
//   paka_num_local, record_geometry (true), paka_high_overlap_iou in (0, 1]:
//                                             dinov31's (the method arg paka_num_local)
//   num_channels, channel_drop {num_channels_keep, weight_drop}, normalize {mean, std}:
//                                             resolved as LightlyTrain's
//                                             MethodTransformArgs into --num-channels,
//                                             --channel-drop, --normalize
// Any other key is one of the program's own (scale_min, local.blur_p), which
// the view parser checks.
#ifndef LTC_CLI_TRANSFORM_ARGS_H
#define LTC_CLI_TRANSFORM_ARGS_H

#include "util/error.h"

// Receives one option as the command line would spell it ("image-size=448",
// "transform=global.scale_min=0.2"); 0 or -1 with err.
typedef int (*TransformArgsEmit)(void *context, const char *argument, ErrorMessage *err);

// entries: "PATH=VALUE" with PATH after "transform_args." (values: numbers,
// true / false, null / None, lists [a, b] or (a, b), text), in the order
// given; method: the --method value (dino, dinov2 and dinov31 have views of
// their own). Emits the options they set; 0, or -1 with err naming the
// LightlyTrain argument that has no counterpart here.
int transform_args_translate(const char *const *entries, int count, const char *method,
                             TransformArgsEmit emit, void *context, ErrorMessage *err);

#endif
