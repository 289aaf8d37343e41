/* Evaluation totals per step: evals.h. */
#include "evals.h"

#include <string.h>

void evals_reset(evals *e)
{
    memset(e, 0, sizeof(*e));
}

/* The slot of the evaluation at `step`, or a free one; with none free the
 * oldest evaluation's (its missing report never came: a replica was lost),
 * which *dropped names. */
static evals_slot *evals__slot(evals *e, uint64_t step, evals_result *dropped)
{
    evals_slot *free_slot = NULL, *oldest = NULL;
    for (size_t i = 0; i < EVALS_PENDING; i++) {
        evals_slot *s = &e->slot[i];
        if (s->reports && s->step == step)
            return s;
        if (!s->reports && !free_slot)
            free_slot = s;
        if (s->reports && (!oldest || s->step < oldest->step))
            oldest = s;
    }
    evals_slot *s = free_slot;
    if (!s) {
        s = oldest;
        dropped->dropped_step = s->step;
        dropped->dropped_reports = s->reports;
    }
    memset(s, 0, sizeof(*s));
    s->step = step;
    return s;
}

int evals_add(evals *e, const evals_report *r, uint32_t need, bool count_background, evals_result *out)
{
    memset(out, 0, sizeof(*out));
    evals_slot *s = evals__slot(e, r->step, out);
    s->samples += r->samples;
    s->correct += r->correct;
    s->loss_sum += r->loss_sum;
    size_t nc = r->nclasses < EVALS_CLASSES ? r->nclasses : EVALS_CLASSES;
    if (nc > s->classes)
        s->classes = (uint32_t)nc;
    for (size_t i = 0; i < nc; i++) {
        s->inter[i] += r->inter[i];
        s->uni[i] += r->uni[i];
    }
    if (++s->reports < need)
        return 0;
    out->step = s->step;
    out->samples = s->samples;
    out->loss = s->samples ? s->loss_sum / (double)s->samples : 0;
    out->accuracy = -1;
    out->iou = out->dice = -1;
    if (s->classes == 0) {
        out->accuracy = s->samples ? (double)s->correct / (double)s->samples : 0;
    } else {
        double sum = 0, dsum = 0;
        int k = 0;
        for (uint32_t cls = count_background ? 0 : 1; cls < s->classes; cls++)
            if (s->uni[cls] > 0) {
                double in = (double)s->inter[cls], un = (double)s->uni[cls];
                sum += in / un;
                dsum += 2 * in / (in + un);
                k++;
            }
        out->iou = k ? sum / k : 0;
        out->dice = k ? dsum / k : 0;
    }
    memset(s, 0, sizeof(*s)); /* free again */
    return 1;
}
