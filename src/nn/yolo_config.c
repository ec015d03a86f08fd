// The YOLO models' names and structure: Ultralytics' yolov5.yaml,
// yolov8.yaml, yolo11.yaml, yolo12.yaml, yolo26.yaml and the others of
// their families (ultralytics 8.4.190, cfg/models) as tables,
// scaled per size as parse_model scales them (see yolo.h):
//   repeats  n' = max(round(n * depth), 1) when n > 1 (Python's round: half to even)
//   channels c2' = ceil(min(c2, max_channels) * width / 8) * 8
//   C3k2     c3k forced on for the m, l and x sizes
//   A2C2f    the l and x sizes' residual gamma and MLP ratio 1.2 (else 2.0)
//   C2fAttn  heads nh' = int(max(min(nh, max_channels // 64) * width, 1)) when nh > 1
// and each layer's input channels from the layers it reads.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/yolo.h"

const char *const yolo_model_names[] = {"yolov8n", "yolov8s", "yolov8m", "yolov8l", "yolov8x",
    "yolo11n", "yolo11s", "yolo11m", "yolo11l", "yolo11x", "yolo26n", "yolo26s", "yolo26m",
    "yolo26l", "yolo26x", "yolov8n-seg", "yolov8s-seg", "yolov8m-seg", "yolov8l-seg",
    "yolov8x-seg", "yolo11n-seg", "yolo11s-seg", "yolo11m-seg", "yolo11l-seg", "yolo11x-seg",
    "yolo26n-seg", "yolo26s-seg", "yolo26m-seg", "yolo26l-seg", "yolo26x-seg", "yolov8n-pose",
    "yolov8s-pose", "yolov8m-pose", "yolov8l-pose", "yolov8x-pose", "yolo11n-pose",
    "yolo11s-pose", "yolo11m-pose", "yolo11l-pose", "yolo11x-pose", "yolo26n-pose",
    "yolo26s-pose", "yolo26m-pose", "yolo26l-pose", "yolo26x-pose", "yolov8n-obb", "yolov8s-obb",
    "yolov8m-obb", "yolov8l-obb", "yolov8x-obb", "yolo11n-obb", "yolo11s-obb", "yolo11m-obb",
    "yolo11l-obb", "yolo11x-obb", "yolo26n-obb", "yolo26s-obb", "yolo26m-obb", "yolo26l-obb",
    "yolo26x-obb", "yolov8n-cls", "yolov8s-cls", "yolov8m-cls", "yolov8l-cls", "yolov8x-cls",
    "yolo11n-cls", "yolo11s-cls", "yolo11m-cls", "yolo11l-cls", "yolo11x-cls", "yolo26n-cls",
    "yolo26s-cls", "yolo26m-cls", "yolo26l-cls", "yolo26x-cls", "yolov5nu", "yolov5su",
    "yolov5mu", "yolov5lu", "yolov5xu", "yolov5n", "yolov5s", "yolov5m", "yolov5l", "yolov5x",
    "yolo12n", "yolo12s", "yolo12m", "yolo12l", "yolo12x", "yolov8n-oiv7", "yolov8s-oiv7",
    "yolov8m-oiv7", "yolov8l-oiv7", "yolov8x-oiv7", "yolov5n6u", "yolov5s6u", "yolov5m6u",
    "yolov5l6u", "yolov5x6u", "yolo26n-p6", "yolo26s-p6", "yolo26m-p6", "yolo26l-p6",
    "yolo26x-p6", "yolo26n-p2", "yolo26s-p2", "yolo26m-p2", "yolo26l-p2", "yolo26x-p2",
    "yolov8n-pose-p6", "yolov8s-pose-p6", "yolov8m-pose-p6", "yolov8l-pose-p6", "yolov8x-pose-p6",
    "yolov6n", "yolov6s", "yolov6m", "yolov6l", "yolov6x", "yolo26n-sem", "yolo26s-sem",
    "yolo26m-sem", "yolo26l-sem", "yolo26x-sem", "yolo26n-depth", "yolo26s-depth",
    "yolo26m-depth", "yolo26l-depth", "yolo26x-depth", "yolo26n-sem-ade20k",
    "yolo26s-sem-ade20k", "yolo26m-sem-ade20k", "yolo26l-sem-ade20k", "yolo26x-sem-ade20k",
    "yolov8s-world", "yolov8m-world", "yolov8l-world", "yolov8x-world", "yolov8s-worldv2",
    "yolov8m-worldv2", "yolov8l-worldv2", "yolov8x-worldv2", NULL};

#define PREV {-1}, 1
// yolov5.yaml (YOLOv5u: anchor-free, YOLOv8's Detect): a 6x6 stem of
// padding 2, C3 blocks (shortcut in the backbone, none in the neck).
static const YoloYamlLine yolov5_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 6, 2, 0, 0, 0, 2},   {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 128, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C3, 256, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 9, YOLO_C3, 512, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 1024, 0, 0, 1, 0, 0, 0},   {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 1, 1, 0, 0, 0, 0},  {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 1, 1, 0, 0, 0, 0},  {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 256, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},  {{-1, 14}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 512, 0, 0, 0, 0, 0, 0},    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {{-1, 10}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 1024, 0, 0, 0, 0, 0, 0},
    {{17, 20, 23}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};

// yolov5-p6.yaml (the released yolov5n6u.pt ...): yolov5.yaml with a P6/64
// stage (Conv 768 at P5, Conv 1024 at P6), a neck one level deeper and a
// Detect over P3 ... P6.
static const YoloYamlLine yolov5_p6_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 6, 2, 0, 0, 0, 2},   {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 128, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C3, 256, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 9, YOLO_C3, 512, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 768, 0, 0, 1, 0, 0, 0},    {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 1024, 0, 0, 1, 0, 0, 0},   {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 768, 1, 1, 0, 0, 0, 0},  {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 8}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 768, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 1, 1, 0, 0, 0, 0},  {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 1, 1, 0, 0, 0, 0},  {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 256, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},  {{-1, 20}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 512, 0, 0, 0, 0, 0, 0},    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {{-1, 16}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C3, 768, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},  {{-1, 12}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C3, 1024, 0, 0, 0, 0, 0, 0},
    {{23, 26, 29, 32}, 4, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};

// yolov8.yaml; yolov8-world.yaml and yolov8-worldv2.yaml share its backbone
// rows (layers 0-9).
#define YOLOV8_BACKBONE_ROWS                                                                      \
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},      {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},   \
    {PREV, 3, YOLO_C2F, 128, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},   \
    {PREV, 6, YOLO_C2F, 256, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},   \
    {PREV, 6, YOLO_C2F, 512, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},  \
    {PREV, 3, YOLO_C2F, 1024, 0, 0, 1, 0, 0, 0},     {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0}
static const YoloYamlLine yolov8_yaml[] = {
    YOLOV8_BACKBONE_ROWS,
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},   {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 512, 0, 0, 0, 0, 0, 0},      {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C2F, 256, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},     {{-1, 12}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 512, 0, 0, 0, 0, 0, 0},      {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {{-1, 9}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C2F, 1024, 0, 0, 0, 0, 0, 0},
    {{15, 18, 21}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};

// yolov8-world.yaml and yolov8-worldv2.yaml: YOLOv8's backbone; the neck's
// C2f rows are C2fAttn [c2, ec, nh] (no shortcut; parse_model scales nh and
// sets ec to the block's hidden width), v1 adds ImagePoolingAttn [256] on
// P3 ... P5 as layer 16 (its output: the text embeddings, read by no
// layer); the row after P3 reads layer 15 by number in both YAMLs.
#define YOLOV8_WORLD_ROWS_TO_P3                                                                    \
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},                                                 \
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},                                             \
    {PREV, 3, YOLO_C2F_ATTN, 512, 256, 0, 0, 0, 8, 0},                                          \
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},                                                 \
    {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},                                             \
    {PREV, 3, YOLO_C2F_ATTN, 256, 128, 0, 0, 0, 4, 0}
#define YOLOV8_WORLD_ROWS_TO_P5                                                                    \
    {{15}, 1, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},                                                \
    {{-1, 12}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},                                            \
    {PREV, 3, YOLO_C2F_ATTN, 512, 256, 0, 0, 0, 8, 0},                                          \
    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},                                                   \
    {{-1, 9}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},                                             \
    {PREV, 3, YOLO_C2F_ATTN, 1024, 512, 0, 0, 0, 16, 0}
// WorldDetect [nc, 512, with_bn]: ContrastiveHead (v1) or BNContrastiveHead (v2).
static const YoloYamlLine yolov8_world_yaml[] = {
    YOLOV8_BACKBONE_ROWS, YOLOV8_WORLD_ROWS_TO_P3,
    {{15, 12, 9}, 3, 1, YOLO_IMAGE_POOLING_ATTN, 0, 256, 0, 0, 0, 0, 0},
    YOLOV8_WORLD_ROWS_TO_P5,
    {{15, 19, 22}, 3, 1, YOLO_WORLD_DETECT, 0, YOLO_WORLD_EMBED, 0, 0, 0, 0, 0},
};
static const YoloYamlLine yolov8_worldv2_yaml[] = {
    YOLOV8_BACKBONE_ROWS, YOLOV8_WORLD_ROWS_TO_P3, YOLOV8_WORLD_ROWS_TO_P5,
    {{15, 18, 21}, 3, 1, YOLO_WORLD_DETECT, 0, YOLO_WORLD_EMBED, 0, 1, 0, 0, 0},
};
#undef YOLOV8_BACKBONE_ROWS
#undef YOLOV8_WORLD_ROWS_TO_P3
#undef YOLOV8_WORLD_ROWS_TO_P5

static const YoloYamlLine yolo11_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},        {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0},
    {PREV, 2, YOLO_C2PSA, 1024, 0, 0, 0, 0, 0, 0},     {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},     {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {{-1, 13}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},       {{-1, 10}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},      {{16, 19, 22}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};

// YOLO11's layout with YOLO26's rows: SPPF [1024, 5, 3, True], the neck's
// C3k2 with c3k, the last one [1024, True, 0.5, True] (attention blocks);
// its Detect has reg_max 1 and end2end (yolo_reg_max, yolo_end2end).
// yolo26-sem.yaml and yolo26-depth.yaml share its rows: the backbone and the
// neck up to P3 (layers 0-16), and (-depth) its way down to P5 (17-22).
#define YOLO26_ROWS_TO_P3                                                                         \
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},        {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},  \
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},  \
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},  \
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0}, \
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_SPPF, 1024, 5, 1, 1, 0, 0, 0}, \
    {PREV, 2, YOLO_C2PSA, 1024, 0, 0, 0, 0, 0, 0},     {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0}, \
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},   \
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},     {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, \
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 1, 0, 0, 0}
#define YOLO26_ROWS_TO_P5                                                                         \
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},       {{-1, 13}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, \
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},  \
    {{-1, 10}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 1, YOLO_C3K2, 1024, 0, 0, 1, 0.5f, 1, 0}
static const YoloYamlLine yolo26_yaml[] = {
    YOLO26_ROWS_TO_P3, YOLO26_ROWS_TO_P5, {{16, 19, 22}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};
// yolo26-sem.yaml: SemanticSegment on P3 and P4 (its args [nc]).
static const YoloYamlLine yolo26_sem_yaml[] = {
    YOLO26_ROWS_TO_P3, {{16, 13}, 2, 1, YOLO_SEMANTIC, 0, 0, 0, 0, 0, 0, 0},
};
// yolo26-depth.yaml: Depth [256] on P3 ... P5 (its width, YOLO_DEPTH_WIDTH,
// is not scaled).
static const YoloYamlLine yolo26_depth_yaml[] = {
    YOLO26_ROWS_TO_P3, YOLO26_ROWS_TO_P5, {{16, 19, 22}, 3, 1, YOLO_DEPTH, 0, 0, 0, 0, 0, 0, 0},
};
#undef YOLO26_ROWS_TO_P3
#undef YOLO26_ROWS_TO_P5
// yolo26-p6.yaml: YOLO26's blocks with a Conv to 768 at P5 and a Conv to
// 1024 with a C3k2 at P6/64, SPPF [1024, 5, 3, False] (no shortcut, an
// unactivated cv1), a neck one level deeper, Detect over P3 ... P6.
static const YoloYamlLine yolo26_p6_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},        {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 768, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_SPPF, 1024, 5, 1, 2, 0, 0, 0},
    {PREV, 2, YOLO_C2PSA, 1024, 0, 0, 0, 0, 0, 0},     {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 8}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 768, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},     {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 256, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},       {{-1, 18}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {{-1, 15}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 768, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},       {{-1, 12}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_C3K2, 1024, 0, 0, 1, 0.5f, 1, 0},
    {{21, 24, 27, 30}, 4, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};
// yolo26-p2.yaml: yolo26.yaml's backbone; the neck goes up to P2/4 (a third
// Upsample, C3k2 of 128 on the P2 concat) and back down, Detect over P2 ... P5.
static const YoloYamlLine yolo26_p2_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},        {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},   {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_SPPF, 1024, 5, 1, 1, 0, 0, 0},
    {PREV, 2, YOLO_C2PSA, 1024, 0, 0, 0, 0, 0, 0},     {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},     {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 2}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 128, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},       {{-1, 16}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 1, 0, 0, 0},       {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {{-1, 13}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},       {{-1, 10}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_C3K2, 1024, 0, 0, 1, 0.5f, 1, 0},
    {{19, 22, 25, 28}, 4, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};
// yolov8-pose-p6.yaml (the released yolov8x-pose-p6.pt): YOLOv8's blocks with a
// Conv to 768 and a C2f at P5, a Conv to 1024 and a C2f at P6/64, SPPF; a
// neck of C2 blocks ([c2, False]) one level deeper; Pose over P3 ... P6.
static const YoloYamlLine yolov8_pose_p6_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},      {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 128, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C2F, 256, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C2F, 512, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 768, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 1024, 0, 0, 1, 0, 0, 0},     {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},   {{-1, 8}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2, 768, 0, 0, 0, 0, 0, 0},       {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C2, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},   {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2, 256, 0, 0, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {{-1, 17}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C2, 512, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},     {{-1, 14}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2, 768, 0, 0, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 768, 3, 2, 0, 0, 0, 0},
    {{-1, 11}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 3, YOLO_C2, 1024, 0, 0, 0, 0, 0, 0},
    {{20, 23, 26, 29}, 4, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};
// yolov6.yaml (activation: torch.nn.ReLU()): plain Convs, rows of n > 1 a
// Sequential of n 3x3 Convs; a neck of 1x1 Convs, 2x2 stride-2
// ConvTranspose2d upsamplings ([c2, 2, 2, 0]) and Conv rows; YOLOv8's Detect.
#define CONVT(c) {PREV, 1, YOLO_CONV_TRANSPOSE, c, 2, 2, 0, 0, 0, 0}
static const YoloYamlLine yolov6_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},        {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_CONV, 128, 3, 1, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 12, YOLO_CONV, 256, 3, 1, 0, 0, 0, 0},      {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 18, YOLO_CONV, 512, 3, 1, 0, 0, 0, 0},      {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_CONV, 1024, 3, 1, 0, 0, 0, 0},      {PREV, 1, YOLO_SPPF, 1024, 5, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 1, 1, 0, 0, 0, 0},       CONVT(256),
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 1, YOLO_CONV, 256, 3, 1, 0, 0, 0, 0},
    {PREV, 9, YOLO_CONV, 256, 3, 1, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 128, 1, 1, 0, 0, 0, 0},
    CONVT(128),                                        {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 128, 3, 1, 0, 0, 0, 0},       {PREV, 9, YOLO_CONV, 128, 3, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},       {{-1, 15}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 1, 0, 0, 0, 0},       {PREV, 9, YOLO_CONV, 256, 3, 1, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},       {{-1, 10}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CONV, 512, 3, 1, 0, 0, 0, 0},       {PREV, 9, YOLO_CONV, 512, 3, 1, 0, 0, 0, 0},
    {{19, 23, 27}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};
#undef CONVT
// yolo12.yaml: YOLO11's stem, A2C2f (area attention: [c2, True, area];
// [c2, False, -1]: C3k blocks) in the backbone and the neck.
static const YoloYamlLine yolo12_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},         {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},    {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 4, YOLO_A2C2F, 512, 0, 0, 1, 0, 4, 0},       {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 4, YOLO_A2C2F, 1024, 0, 0, 1, 0, 1, 0},      {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},
    {{-1, 6}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},  {PREV, 2, YOLO_A2C2F, 512, 0, 0, 0, 0, -1, 0},
    {PREV, 1, YOLO_UPSAMPLE, 0, 0, 0, 0, 0, 0, 0},      {{-1, 4}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_A2C2F, 256, 0, 0, 0, 0, -1, 0},      {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {{-1, 11}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0}, {PREV, 2, YOLO_A2C2F, 512, 0, 0, 0, 0, -1, 0},
    {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},        {{-1, 8}, 2, 1, YOLO_CONCAT, 0, 0, 0, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},       {{14, 17, 20}, 3, 1, YOLO_DETECT, 0, 0, 0, 0, 0, 0, 0},
};

// yolov8-cls.yaml: YOLOv8's backbone without SPPF, then Classify.
static const YoloYamlLine yolov8_cls_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},   {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 128, 0, 0, 1, 0, 0, 0},   {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C2F, 256, 0, 0, 1, 0, 0, 0},   {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 6, YOLO_C2F, 512, 0, 0, 1, 0, 0, 0},   {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 3, YOLO_C2F, 1024, 0, 0, 1, 0, 0, 0},  {PREV, 1, YOLO_CLASSIFY, 0, 0, 0, 0, 0, 0, 0},
};

// yolo11-cls.yaml (and yolo26-cls.yaml, the same rows): YOLO11's backbone
// without SPPF, C2PSA at layer 9, then Classify.
static const YoloYamlLine yolo11_cls_yaml[] = {
    {PREV, 1, YOLO_CONV, 64, 3, 2, 0, 0, 0, 0},       {PREV, 1, YOLO_CONV, 128, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 256, 0, 0, 0, 0.25f, 0, 0},  {PREV, 1, YOLO_CONV, 256, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 0, 0.25f, 0, 0},  {PREV, 1, YOLO_CONV, 512, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 512, 0, 0, 1, 0, 0, 0},      {PREV, 1, YOLO_CONV, 1024, 3, 2, 0, 0, 0, 0},
    {PREV, 2, YOLO_C3K2, 1024, 0, 0, 1, 0, 0, 0},     {PREV, 2, YOLO_C2PSA, 1024, 0, 0, 0, 0, 0, 0},
    {PREV, 1, YOLO_CLASSIFY, 0, 0, 0, 0, 0, 0, 0},
};
#undef PREV

static const YoloScale yolov5_scales[] = {{'n', 0.33, 0.25, 1024}, {'s', 0.33, 0.50, 1024},
                                          {'m', 0.67, 0.75, 1024}, {'l', 1.00, 1.00, 1024},
                                          {'x', 1.33, 1.25, 1024}};
static const YoloScale yolov8_scales[] = {{'n', 0.33, 0.25, 1024}, {'s', 0.33, 0.50, 1024},
                                          {'m', 0.67, 0.75, 768},  {'l', 1.00, 1.00, 512},
                                          {'x', 1.00, 1.25, 512}};
// yolov8-cls.yaml's: YOLOv8's depths and widths, max_channels 1024 at every size.
static const YoloScale yolov8_cls_scales[] = {{'n', 0.33, 0.25, 1024}, {'s', 0.33, 0.50, 1024},
                                              {'m', 0.67, 0.75, 1024}, {'l', 1.00, 1.00, 1024},
                                              {'x', 1.00, 1.25, 1024}};
static const YoloScale yolo11_scales[] = {{'n', 0.50, 0.25, 1024}, {'s', 0.50, 0.50, 1024},
                                          {'m', 0.50, 1.00, 512},  {'l', 1.00, 1.00, 512},
                                          {'x', 1.00, 1.50, 512}};

const YoloYamlLine *yolo_yaml_lines(YoloFamily family, YoloTask task, int *count) {
    if (task == YOLO_TASK_CLASSIFY && family == YOLO_V8) {
        *count = (int)(sizeof yolov8_cls_yaml / sizeof *yolov8_cls_yaml);
        return yolov8_cls_yaml;
    }
    if (task == YOLO_TASK_CLASSIFY) {
        *count = (int)(sizeof yolo11_cls_yaml / sizeof *yolo11_cls_yaml);
        return yolo11_cls_yaml;
    }
    if (task == YOLO_TASK_SEMANTIC) {  // YOLO26's only
        *count = (int)(sizeof yolo26_sem_yaml / sizeof *yolo26_sem_yaml);
        return yolo26_sem_yaml;
    }
    if (task == YOLO_TASK_DEPTH) {
        *count = (int)(sizeof yolo26_depth_yaml / sizeof *yolo26_depth_yaml);
        return yolo26_depth_yaml;
    }
    switch (family) {
    case YOLO_V5: *count = (int)(sizeof yolov5_yaml / sizeof *yolov5_yaml); return yolov5_yaml;
    case YOLO_V5_P6:
        *count = (int)(sizeof yolov5_p6_yaml / sizeof *yolov5_p6_yaml);
        return yolov5_p6_yaml;
    case YOLO_V8: *count = (int)(sizeof yolov8_yaml / sizeof *yolov8_yaml); return yolov8_yaml;
    case YOLO_11: *count = (int)(sizeof yolo11_yaml / sizeof *yolo11_yaml); return yolo11_yaml;
    case YOLO_12: *count = (int)(sizeof yolo12_yaml / sizeof *yolo12_yaml); return yolo12_yaml;
    case YOLO_26_P6:
        *count = (int)(sizeof yolo26_p6_yaml / sizeof *yolo26_p6_yaml);
        return yolo26_p6_yaml;
    case YOLO_26_P2:
        *count = (int)(sizeof yolo26_p2_yaml / sizeof *yolo26_p2_yaml);
        return yolo26_p2_yaml;
    case YOLO_V8_P6:
        *count = (int)(sizeof yolov8_pose_p6_yaml / sizeof *yolov8_pose_p6_yaml);
        return yolov8_pose_p6_yaml;
    case YOLO_V6: *count = (int)(sizeof yolov6_yaml / sizeof *yolov6_yaml); return yolov6_yaml;
    case YOLO_V8_WORLD:
        *count = (int)(sizeof yolov8_world_yaml / sizeof *yolov8_world_yaml);
        return yolov8_world_yaml;
    case YOLO_V8_WORLDV2:
        *count = (int)(sizeof yolov8_worldv2_yaml / sizeof *yolov8_worldv2_yaml);
        return yolov8_worldv2_yaml;
    case YOLO_26: break;
    }
    *count = (int)(sizeof yolo26_yaml / sizeof *yolo26_yaml);
    return yolo26_yaml;
}

// YOLO12's and YOLO26's scales are YOLO11's.
const YoloScale *yolo_yaml_scales(YoloFamily family, YoloTask task) {
    if (family == YOLO_V5 || family == YOLO_V5_P6) return yolov5_scales;
    if (family == YOLO_V8) return task == YOLO_TASK_CLASSIFY ? yolov8_cls_scales : yolov8_scales;
    if (family == YOLO_V8_P6 || family == YOLO_V6 || yolo_is_world(family))
        return yolov8_scales;  // theirs are YOLOv8's
    return yolo11_scales;
}

const char *yolo_task_suffix(YoloTask task) {
    static const char *const suffixes[] = {"", "-seg", "-pose", "-obb", "-cls", "-sem", "-depth"};
    return suffixes[task];
}

int yolo_is_26(YoloFamily family) {
    return family == YOLO_26 || family == YOLO_26_P6 || family == YOLO_26_P2;
}
int yolo_is_world(YoloFamily family) {
    return family == YOLO_V8_WORLD || family == YOLO_V8_WORLDV2;
}
int yolo_reg_max(YoloFamily family) { return yolo_is_26(family) ? 1 : 16; }
int yolo_end2end(YoloFamily family) { return yolo_is_26(family); }
int yolo_legacy_head(YoloFamily family) {
    return family == YOLO_V5 || family == YOLO_V5_P6 || family == YOLO_V8 ||
           family == YOLO_V8_P6 || family == YOLO_V6 || yolo_is_world(family);
}
int yolo_default_act(YoloFamily family) {
    return family == YOLO_V6 ? YOLO_ACT_RELU : YOLO_ACT_SILU;
}
int yolo_backbone_layers(YoloFamily family) {  // the P6 models' C3 / C2f before SPPF: layer 10
    if (family == YOLO_V5_P6 || family == YOLO_V8_P6) return 11;
    if (family == YOLO_26_P6) return 13;  // its first Upsample is layer 13
    return yolo_legacy_head(family) || family == YOLO_12 ? 9 : 11;
}
int yolo_yaml_backbone_rows(YoloFamily family) {  // v5, v8: the cut plus SPPF
    return yolo_legacy_head(family) ? yolo_backbone_layers(family) + 1
                                    : yolo_backbone_layers(family);
}

static int ends_with(const char *text, size_t length, const char *suffix) {
    const size_t n = strlen(suffix);
    return length >= n && memcmp(text + length - n, suffix, n) == 0;
}

int yolo_parse_name(const char *text, YoloConfig *config, int *pretrained, ErrorMessage *err) {
    memset(config, 0, sizeof *config);
    *pretrained = 0;
    const char *name = text;
    if (strncmp(name, "ultralytics/", 12) == 0) name += 12;
    size_t length = strlen(name);
    if (ends_with(name, length, ".yaml")) length -= 5;
    else if (ends_with(name, length, ".pt")) length -= 3, *pretrained = 1;
    for (int i = 0; yolo_model_names[i]; i++) {
        if (strlen(yolo_model_names[i]) != length || memcmp(yolo_model_names[i], name, length))
            continue;
        config->family = strncmp(name, "yolo11", 6) == 0   ? YOLO_11
                         : strncmp(name, "yolo12", 6) == 0 ? YOLO_12
                         : ends_with(name, length, "-world")   ? YOLO_V8_WORLD
                         : ends_with(name, length, "-worldv2") ? YOLO_V8_WORLDV2
                         : strncmp(name, "yolov8", 6) == 0 && ends_with(name, length, "-p6")
                             ? YOLO_V8_P6
                         : ends_with(name, length, "-p6")  ? YOLO_26_P6
                         : ends_with(name, length, "-p2")  ? YOLO_26_P2
                         : strncmp(name, "yolo26", 6) == 0 ? YOLO_26
                         : strncmp(name, "yolov6", 6) == 0 ? YOLO_V6
                         : strncmp(name, "yolov5", 6) == 0 ? (name[7] == '6' ? YOLO_V5_P6 : YOLO_V5)
                                                           : YOLO_V8;
        // Ultralytics released YOLOv5's anchor-free weights as yolov5nu.pt ...
        if (*pretrained && config->family == YOLO_V5 && name[length - 1] != 'u')
            return error_set(err, "no Ultralytics weights '%s': YOLOv5's are %.*su.pt", text,
                             (int)length, name);
        if (*pretrained && (config->family == YOLO_26_P6 || config->family == YOLO_26_P2 ||
                            config->family == YOLO_V6))
            return error_set(err, "no Ultralytics weights '%s': Ultralytics releases none of "
                                  "%s; train ultralytics/%.*s.yaml (--checkpoint FILE "
                                  "for weights of your own)", text,
                             config->family == YOLO_26_P6   ? "YOLO26-P6"
                             : config->family == YOLO_26_P2 ? "YOLO26-P2"
                                                            : "YOLOv6",
                             (int)length, name);
        // yolov8n-oiv7.pt: yolov8n.yaml trained on Open Images V7, the model
        // yolov8n's with 601 classes (its name; there is no yolov8n-oiv7.yaml)
        const int open_images = ends_with(name, length, "-oiv7");
        // yolo26n-sem-ade20k.pt: yolo26n-sem.yaml trained on ADE20K, the model
        // yolo26n-sem's with 150 classes (likewise no yolo26n-sem-ade20k.yaml)
        const int ade20k = ends_with(name, length, "-sem-ade20k");
        // the task's suffix comes before a levels suffix ("yolov8x-pose-p6")
        const size_t stem = ends_with(name, length, "-p6") || ends_with(name, length, "-p2")
                                ? length - 3
                            : ade20k ? length - 7
                                     : length;
        config->task = ends_with(name, stem, "-seg")    ? YOLO_TASK_SEGMENT
                       : ends_with(name, stem, "-pose") ? YOLO_TASK_POSE
                       : ends_with(name, stem, "-obb")  ? YOLO_TASK_OBB
                       : ends_with(name, stem, "-cls")  ? YOLO_TASK_CLASSIFY
                       : ends_with(name, stem, "-sem")  ? YOLO_TASK_SEMANTIC
                       : ends_with(name, stem, "-depth") ? YOLO_TASK_DEPTH
                                                        : YOLO_TASK_DETECT;
        config->scale = name[6];  // "yolov8n", "yolo11n-seg": the size follows the family
        snprintf(config->name, sizeof config->name, "%.*s",
                 open_images ? 7 : ade20k ? (int)length - 7 : (int)length, yolo_model_names[i]);
        // the YAMLs' nc: 80, but yolov8-pose.yaml's 1 (people), the -cls ones' 1000
        // (ImageNet), yolo26-sem.yaml's 19 (Cityscapes; ADE20K's weights 150), -depth's 1
        config->classes = config->task == YOLO_TASK_CLASSIFY                          ? 1000
                          : config->task == YOLO_TASK_SEMANTIC ? (ade20k ? 150 : 19)
                          : config->task == YOLO_TASK_DEPTH                             ? 1
                          : (config->family == YOLO_V8 || config->family == YOLO_V8_P6) &&
                                    config->task == YOLO_TASK_POSE
                              ? 1
                          : open_images                                                 ? 601
                                                                                        : 80;
        // initialize_weights' BatchNorm settings; ClassificationModel never calls
        // it, so a -cls model's BatchNorms keep PyTorch's defaults
        const int classify = config->task == YOLO_TASK_CLASSIFY;
        config->bn_momentum = classify ? 0.1f : 0.03f;
        config->bn_eps = classify ? 1e-5f : 1e-3f;
        return 0;
    }
    return error_set(err, "unknown Ultralytics model '%s' (ultralytics/yolov8n.yaml ... "
                          "yolov8x.yaml, yolo11n.yaml ... yolo11x.yaml, yolo26n.yaml ... "
                          "yolo26x.yaml, each also as -seg, -pose, -obb or -cls (yolo11n-seg.yaml), "
                          "yolov5nu.yaml ... yolov5xu.yaml, yolo12n.yaml ... yolo12x.yaml, or .pt "
                          "for Ultralytics' weights, also yolov8n-oiv7.pt ... yolov8x-oiv7.pt, "
                          "yolov5n6u.pt ... yolov5x6u.pt; yolo26n-p6.yaml ... yolo26x-p6.yaml and "
                          "yolo26n-p2.yaml ... yolo26x-p2.yaml; yolov8n-pose-p6.yaml ... "
                          "yolov8x-pose-p6.yaml, yolov8x-pose-p6.pt; yolov6n.yaml ... "
                          "yolov6x.yaml; yolo26n-sem.yaml ... yolo26x-sem.yaml, "
                          "yolo26n-depth.yaml ... yolo26x-depth.yaml, "
                          "yolo26n-sem-ade20k.pt ... yolo26x-sem-ade20k.pt; "
                          "yolov8s-world.yaml ... yolov8x-world.yaml and yolov8s-worldv2.yaml "
                          "... yolov8x-worldv2.yaml)",
                     text);
}

int yolo_is_model_name(const char *text) {
    YoloConfig config;
    int pretrained;
    ErrorMessage ignored;
    return yolo_parse_name(text, &config, &pretrained, &ignored) == 0;
}

static int make_divisible(double x) { return (int)ceil(x / 8.0) * 8; }

// Fills model->layers from the family's table scaled to config->scale.
int yolo_build_layers(Yolo *model, ErrorMessage *err) {
    const YoloConfig *config = &model->config;
    int count;
    const YoloYamlLine *yaml = yolo_yaml_lines(config->family, config->task, &count);
    const YoloScale *scales = yolo_yaml_scales(config->family, config->task);
    const YoloScale *scale = NULL;
    for (int i = 0; i < 5; i++)
        if (scales[i].scale == config->scale) scale = &scales[i];
    if (!scale) return error_set(err, "%s: no scale '%c'", config->name, config->scale);
    if (count > YOLO_MAX_LAYERS)
        return error_set(err, "%s: %d layers, more than %d", config->name, count, YOLO_MAX_LAYERS);
    int channels[YOLO_MAX_LAYERS], strides[YOLO_MAX_LAYERS];
    for (int i = 0; i < count; i++) {
        const YoloYamlLine *line = &yaml[i];
        YoloModule *layer = &model->layers[i];
        memset(layer, 0, sizeof *layer);
        layer->kind = line->kind;
        layer->from_count = line->from_count;
        for (int f = 0; f < line->from_count; f++)
            layer->from[f] = line->from[f] < 0 ? i + line->from[f] : line->from[f];
        const int c1 = i == 0 ? 3 : channels[layer->from[0]];
        layer->in_channels = c1;
        layer->repeats = line->repeats > 1
                             ? (int)fmax(nearbyint(line->repeats * scale->depth), 1.0)
                             : line->repeats;
        int c2 = c1;
        if (line->channels) {
            const int capped = line->channels < scale->max_channels ? line->channels
                                                                    : scale->max_channels;
            c2 = make_divisible(capped * scale->width);
        }
        if (line->kind == YOLO_CONCAT) {
            c2 = 0;
            for (int f = 0; f < line->from_count; f++) c2 += channels[layer->from[f]];
        }
        layer->out_channels = c2;
        layer->kernel = line->kernel;
        layer->stride = line->stride;
        layer->padding = line->padding ? line->padding : line->kernel / 2;
        layer->inner_group = 1;
        layer->gamma_index = -1;
        layer->expansion = line->expansion > 0 ? line->expansion : 0.5f;
        switch (line->kind) {
        case YOLO_CONV:  // a row of n > 1: Sequential(*(Conv(c1, c2, k, s) for _ in range(n)))
            if (layer->repeats > 1 && (c1 != c2 || layer->stride != 1))
                return error_set(err, "%s: a Conv row of %d repeats from %d to %d channels, "
                                      "stride %d", config->name, layer->repeats, c1, c2,
                                 layer->stride);
            break;
        case YOLO_C2F:
        case YOLO_C3:
        case YOLO_C2:
            layer->shortcut = line->flag;
            layer->hidden = (int)(c2 * layer->expansion);
            if (line->kind == YOLO_C2 && i < yolo_backbone_layers(config->family))
                return error_set(err, "%s: C2 in the backbone (layer %d)", config->name, i);
            break;
        case YOLO_C3K2:
            layer->shortcut = 1;
            layer->c3k = line->flag || strchr("mlx", config->scale) != NULL;
            layer->attn = line->attn;  // Bottleneck + PSABlock, whatever c3k says
            layer->hidden = (int)(c2 * layer->expansion);
            if (layer->attn && i < yolo_backbone_layers(config->family))
                return error_set(err, "%s: attention C3k2 in the backbone (layer %d)",
                                 config->name, i);
            break;
        case YOLO_SPPF:
            layer->hidden = c1 / 2;
            layer->plain_cv1 = line->flag != 0;  // parse_model: SiLU for rows of up to 3 args
            layer->shortcut = line->flag == 1 && c1 == c2;
            break;
        case YOLO_A2C2F:  // A2C2f(c1, c2, n, a2, area, residual, mlp_ratio, e=0.5)
            layer->hidden = (int)(c2 * 0.5f);
            layer->area = line->flag ? line->attn : 0;
            layer->inner_group = line->flag ? 2 : 1;  // Sequential(ABlock, ABlock) or C3k
            layer->mlp_ratio = strchr("lx", config->scale) ? 1.2f : 2.0f;
            layer->shortcut = line->flag && strchr("lx", config->scale);  // residual: gamma
            if (layer->hidden % 32)
                return error_set(err, "%s: A2C2f of %d hidden channels, not a multiple of 32",
                                 config->name, layer->hidden);
            if (layer->shortcut && c1 != c2)
                return error_set(err, "%s: A2C2f residual of %d -> %d channels", config->name, c1,
                                 c2);
            break;
        case YOLO_C2PSA:
            if (c1 != c2) return error_set(err, "%s: C2PSA of %d -> %d channels", config->name, c1, c2);
            layer->hidden = c1 / 2;
            break;
        case YOLO_C2F_ATTN:  // nh' = int(max(min(nh, max_channels // 64) * width, 1)) when nh > 1
            layer->shortcut = line->flag;
            layer->hidden = (int)(c2 * 0.5f);
            layer->heads = line->attn;
            if (line->attn > 1) {
                const int capped = line->attn < scale->max_channels / 64 ? line->attn
                                                                         : scale->max_channels / 64;
                layer->heads = (int)fmax(capped * scale->width, 1.0);
            }
            if (layer->hidden % layer->heads)
                return error_set(err, "%s: C2fAttn of %d hidden channels in %d heads", config->name,
                                 layer->hidden, layer->heads);
            if (i < yolo_backbone_layers(config->family))
                return error_set(err, "%s: C2fAttn in the backbone (layer %d)", config->name, i);
            break;
        case YOLO_DETECT:  // Segment's npr: its 256 scaled as a layer's channels
            if (config->task == YOLO_TASK_SEGMENT) {
                const int npr = 256 < scale->max_channels ? 256 : scale->max_channels;
                layer->hidden = make_divisible(npr * scale->width);
            }
            break;
        default: break;
        }
        channels[i] = c2;
        // the layer's stride in pixels: Conv's stride multiplies it, Upsample halves it
        strides[i] = i == 0 ? 1 : strides[layer->from[0]];
        if (line->kind == YOLO_CONV) strides[i] *= layer->stride;
        if (line->kind == YOLO_UPSAMPLE || line->kind == YOLO_CONV_TRANSPOSE) strides[i] /= 2;
        if (line->kind == YOLO_DETECT || line->kind == YOLO_WORLD_DETECT)
            for (int f = 0; f < line->from_count; f++)
                model->head_strides[f] = strides[layer->from[f]];
    }
    model->layer_count = count;
    // LightlyTrain's cut: before SPPF (v5, v8), the first Upsample (11, 26) or Classify (-cls)
    model->backbone_layers = config->task == YOLO_TASK_CLASSIFY ? count - 1
                                                                : yolo_backbone_layers(config->family);
    for (int i = 0; i < count; i++) model->layers[i].trained = i < model->backbone_layers;
    model->feature_dim = channels[model->backbone_layers - 1];
    return 0;
}
