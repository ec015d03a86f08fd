// Method groups of host parameters (see fixture_groups.h).
#include "fixture_groups.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

void fixture_groups_make(Backend *backend, const int sizes[][FIXTURE_GROUP_TENSORS], int count,
                         ParameterSet *sets, MethodGroup *groups) {
    ErrorMessage err = {{0}};
    for (int g = 0; g < count; g++) {
        parameter_set_init(&sets[g], backend, 1);
        for (int i = 0; i < FIXTURE_GROUP_TENSORS && sizes[g][i]; i++) {
            char name[16];
            snprintf(name, sizeof name, "p%d", i);
            assert_true(parameter_declare(&sets[g], name, PARAM_WEIGHT, 1, &sizes[g][i], NULL,
                                          &err) >= 0);
        }
        assert_int_equal(parameter_set_allocate(&sets[g], &err), 0);
        groups[g] = (MethodGroup){.params = &sets[g]};
        snprintf(groups[g].name, sizeof groups[g].name, "group%d", g);
    }
}
