// A YOLO (nn/yolo.h) as the checkpoint Ultralytics' YOLO.save writes and
// its loader reads: torch.save of {"date", "version", "license", "docs",
// "ema": None, "modelopt": None, "model": DetectionModel (its task's:
// SegmentationModel, PoseModel, OBBModel, ClassificationModel)}, the model a whole
// pickled module tree written from
// our tables (weights/pt_writer.h): each module its class (torch.nn's and
// ultralytics') with the __dict__ Ultralytics 8.4's modules carry (their
// attributes, _parameters, _buffers, _modules and the two hook dicts that
// nn.Module.__setstate__ does not restore), every layer its i, f, type and
// np, the DetectionModel its yaml dict (the family's YAML with the size),
// save, names, stride, task and args (Detect / Segment its empty anchors and strides;
// every module training=True, as saved). Weights F32 (Ultralytics' own files are
// F16; it loads both with .float()). What LightlyTrain's export writes
// (Ultralytics' YOLO.save): ultralytics.YOLO(path) loads it and fine-tunes
// it (tools/check_ultralytics_export.py; checked with ultralytics 8.4.190).
#ifndef LTC_WEIGHTS_ULTRALYTICS_EXPORT_H
#define LTC_WEIGHTS_ULTRALYTICS_EXPORT_H

#include "nn/yolo.h"
#include "util/error.h"

// The Ultralytics version the files say they were written with (and were
// checked against).
#define ULTRALYTICS_CHECKED_VERSION "8.4.190"

int export_ultralytics(const Yolo *model, const char *path, ErrorMessage *err);

#endif
