/* wse-node: a released job's memory given back, the large buffers on the
 * compute thread, the rest and the job on the loop (wjob.h). Called by
 * replica.c (its links closed) and step.c (its task came back); calls down
 * only. */
#include "wjob.h"
#include "pages.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The job's compute time by layer stays in /metrics after it ends. */
static void wn__keep_layers(wn_job *j)
{
    wse_node *w = wn_of(j->n);
    if (!j->layer_sec[0] || !j->m)
        return;
    char(*names)[MODEL_NAME_MAX] = calloc((size_t)j->m->nlayers + 1, sizeof(*names));
    if (!names)
        return;
    for (int l = 0; l < j->m->nlayers; l++)
        snprintf(names[l], sizeof(names[l]), "%s", j->m->layers[l].name);
    free(w->layer_names);
    free(w->layer_sec);
    w->layer_names = names;
    w->layer_sec = j->layer_sec[0];
    w->nlayers = j->m->nlayers;
    j->layer_sec[0] = j->layer_sec[1] = NULL;
}

/* On the compute thread: the job's large buffers (the arena, the weight
 * slots or resident weights, the tensors, the batches) go; gigabytes take
 * long enough to give back that the event loop must not do it. */
static void wn__free_large(void *arg)
{
    wn_job *j = arg;
    if (j->ex_ready)
        exec_deinit(&j->ex);
    j->ex_ready = false;
    if (j->spill_fd >= 0)
        close(j->spill_fd);
    j->spill_fd = -1;
    if (j->ws_ready)
        wslots_deinit(&j->ws);
    j->ws_ready = false;
    if (j->res_ready)
        wresident_deinit(&j->res);
    j->res_ready = false;
    if (j->t && j->plan)
        for (size_t i = 0; i < j->plan->n_tensors; i++) {
            pages_free(j->t[i].w);
            pages_free(j->t[i].g);
            if (j->t[i].rg != j->t[i].g)
                pages_free(j->t[i].rg);
            pages_free(j->t[i].w16);
            j->t[i].w = j->t[i].g = j->t[i].rg = NULL;
            j->t[i].w16 = NULL;
            optim_state_deinit(&j->t[i].st);
        }
    if (j->batches)
        for (size_t i = 0; i < j->nbatches; i++) {
            pages_free(j->batches[i].data);
            j->batches[i].data = NULL;
        }
    pages_free(j->ebuf[0].data);
    pages_free(j->ebuf[1].data);
    j->ebuf[0].data = j->ebuf[1].data = NULL;
}

/* Back on the loop (or at once): the rest, and the job. */
static void wn__free_rest(void *arg)
{
    wn_job *j = arg;
    wn__free_large(j); /* a task the stopped thread never ran owes it */
    wn__keep_layers(j);
    while (j->staged) {
        wn_staged *next = j->staged->next;
        free(j->staged);
        j->staged = next;
    }
    free(j->packed_buf);
    for (size_t i = 0; j->t && j->plan && i < j->plan->n_tensors; i++)
        free(j->t[i].kept_bits);
    free(j->t);
    free(j->gq);
    free(j->layer_sec[0]);
    free(j->wp);
    free(j->gp);
    free(j->w16p);
    free(j->batches);
    free(j->feeds);
    wn_stripes_free(j->stripes);
    sim_times_deinit(&j->sim_t);
    model_free(j->m);
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    free(j);
}

void wn__free_buffers(wn_job *j)
{
    compute *c = &wn_of(j->n)->comp;
    if (!c->started || compute_submit(c, wn__free_large, wn__free_rest, j) < 0)
        wn__free_rest(j);
}
