// timm's pretrained weights of the architectures this program builds under
// "timm/..." names: which weights timm.create_model(ARCH, pretrained=True)
// loads (timm's default tag), and the "ARCH.TAG" spelling of a timm model
// name. LightlyTrain passes its model_args to timm.create_model, so
// model_args={"pretrained": True} means these weights (cli/model_weights.c).
#ifndef LTC_WEIGHTS_TIMM_TAGS_H
#define LTC_WEIGHTS_TIMM_TAGS_H

#include <stddef.h>

// timm's default tag of an architecture ("resnet50": "a1_in1k"), "" when
// timm has no weights for it ("resnet200"), NULL for an architecture not in
// the table. The weights are the Hugging Face Hub repository
// timm/ARCH.TAG.
const char *timm_default_tag(const char *architecture);

// Every architecture of the table in order, NULL after the last (tests).
const char *timm_tag_architecture(int index);

// Splits a timm model name with a tag, "timm/resnet50.a1_in1k", into the
// name without it ("timm/resnet50", into model[size]) and *tag (pointing into
// name: "a1_in1k"). Returns 1 for such a name; 0 for any other text (no
// "timm/" prefix, no tag, a tag of other characters than [a-z0-9_]).
int timm_split_tag(const char *name, char *model, size_t size, const char **tag);

#endif
