/* Reading a Plan the same way in every daemon. */
#include "plan.h"

#include <stdlib.h>

bool plan_eval_at(const Appliance__Plan *p, uint64_t step)
{
    if (!p->eval_input || p->eval_batches == 0)
        return false;
    if (step == p->max_steps)
        return true;
    return p->eval_frequency > 0 && step > 0 && step < p->max_steps && step % p->eval_frequency == 0;
}

bool plan_checkpoint_after(const Appliance__Plan *p, uint64_t step)
{
    uint64_t done = step + 1;
    return done >= p->max_steps || (p->checkpoint_steps && done % p->checkpoint_steps == 0);
}

Appliance__Plan *plan_copy(const Appliance__Plan *p)
{
    size_t len = appliance__plan__get_packed_size(p);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return NULL;
    appliance__plan__pack(p, buf);
    Appliance__Plan *copy = appliance__plan__unpack(NULL, len, buf);
    free(buf);
    return copy;
}
