/* Reading a Plan the same way in every daemon. */
#include "plan.h"

bool plan_eval_at(const Appliance__Plan *p, uint64_t step)
{
    if (!p->eval_input || p->eval_batches == 0)
        return false;
    if (step == p->max_steps)
        return true;
    return p->eval_frequency > 0 && step > 0 && step < p->max_steps && step % p->eval_frequency == 0;
}
