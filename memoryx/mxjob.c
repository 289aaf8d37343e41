/* The lifetime of memoryx's job (mxjob.h). */
#include "mxjob.h"

#include <stdlib.h>

#include "pages.h"
#include "tier.h"

/* The tensors' memory, unless the disk tier's mappings hold it. */
static void mxjob__free_tensors(mx_job *j)
{
    for (size_t i = 0; i < j->nt; i++) {
        if (!tier_files(j)) {
            pages_free(j->t[i].w);
            pages_free(j->t[i].w16);
            pages_free(j->t[i].g16);
            pages_free(j->t[i].g);
        }
        free(j->t[i].mask);
        free(j->t[i].bits);
        free(j->t[i].rank);
        j->t[i].mask = NULL;
        j->t[i].bits = NULL;
        j->t[i].rank = NULL;
        j->t[i].w = j->t[i].g = NULL;
        j->t[i].w16 = j->t[i].g16 = NULL;
        optim_state_deinit(&j->t[i].st);
    }
    if (j->tier)
        tier_close(j->tier);
}

void mxjob_free(mx_job *j)
{
    if (!j)
        return;
    mxjob__free_tensors(j);
    if (j->tier) {
        free(j->tier->gbuf);
        j->tier->gbuf = NULL;
        j->tier->job = NULL;
        tier_put(j->tier);
    }
    for (size_t i = 0; j->t && i < j->nt; i++)
        free(j->t[i].parts);
    free(j->t);
    free(j->by_id);
    free(j->gpack);
    free(j->ready);
    while (j->held) {
        mx_held *h = j->held;
        j->held = h->next;
        free(h);
    }
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    free(j);
}

/* In the thread pool: a released job's tensors go; the rest goes on the
 * loop. */
static void mxjob__free_work(uv_work_t *req)
{
    mx_job *j = container_of(req, mx_job, free_req);
    mxjob__free_tensors(j);
}

static void mxjob__free_done(uv_work_t *req, int status)
{
    mxjob_free(container_of(req, mx_job, free_req));
}

void mxjob_free_later(mx_job *j)
{
    if (uv_queue_work(j->mx->n->loop, &j->free_req, mxjob__free_work, mxjob__free_done) < 0)
        mxjob_free(j);
}

bool mxjob_pool_back(mx_job *j)
{
    j->pool_work--;
    if (!j->released)
        return false;
    if (j->pool_work == 0)
        mxjob_free_later(j);
    return true;
}

const char *mxjob_down_name(const mx_job *j)
{
    return j->plan && j->plan->n_swarm == 0 ? "the wse-node" : "swarmx";
}
