// Method groups of host parameters for the gradient-average tests: each
// group a ParameterSet of 1-d tensors of the given sizes (a 0 ends a
// group's list), named "group<g>" with tensors "p<i>".
#ifndef LTC_TESTS_FIXTURE_GROUPS_H
#define LTC_TESTS_FIXTURE_GROUPS_H

#include "backend/backend.h"
#include "ssl_methods/method.h"

#define FIXTURE_GROUP_TENSORS 4

// sets[g] and groups[g] for g < count (fails the test on an error).
void fixture_groups_make(Backend *backend, const int sizes[][FIXTURE_GROUP_TENSORS], int count,
                         ParameterSet *sets, MethodGroup *groups);

#endif
