/* A job's plan against the model a daemon compiled from the same job file:
 * what the wire check (msgcheck) cannot see without the model. */
#include "model_plan.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "errmsg.h"

/* Elements of a plan tensor, saturated at UINT64_MAX. */
static uint64_t model_plan__elems(const Appliance__PlanTensor *t)
{
    uint64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++)
        n = t->dims[d] && n > UINT64_MAX / t->dims[d] ? UINT64_MAX : n * t->dims[d];
    return n;
}

int model_plan_check(const Appliance__Plan *p, const model *m, char *err, size_t errlen)
{
    if (p->n_tensors != (size_t)m->ntensors)
        return errmsg(-EINVAL, err, errlen, "plan: %zu tensors, the model has %d",
                                p->n_tensors, m->ntensors);
    for (size_t i = 0; i < p->n_tensors; i++)
        if (model_plan__elems(p->tensors[i]) != m->tensors[i].elems)
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu (%s) has %llu elements, "
                                    "the model's %s has %llu", i, p->tensors[i]->name,
                                    (unsigned long long)model_plan__elems(p->tensors[i]),
                                    m->tensors[i].name, (unsigned long long)m->tensors[i].elems);
    return 0;
}

