/* The job driver: what the running job's members report (ready, steps,
 * evaluations, checkpoints, the end, an abort) and the members' comings and
 * goings, turned into the job's progress (jobs.c) or its recovery
 * (recovery.c). Calls go down to those two, never back. */
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "jobview.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "optim_plan.h"
#include "plan.h"
#include "units.h"

static coordinator *co_of(node *n) { return n->data; }

void driver_member_joined(coordinator *co)
{
    jobs_tick(co);
    jobs_schedule(co);
}

/* The running job, if the message is for it and comes from one of its
 * members; NULL (and a log line) otherwise. */
static job *job__of_member(coordinator *co, conn *c, const char *job_id, member **mbp)
{
    member *mb = members_by_conn(&co->members, c);
    job *j = co->running;
    if (j && (!j->run_id[0] || strcmp(j->run_id, job_id) != 0) &&
        strncmp(job_id, j->id, strlen(j->id)) == 0 &&
        (job_id[strlen(j->id)] == 0 || job_id[strlen(j->id)] == '.')) {
        log_debug("message for %s ignored: an earlier attempt of job %s", job_id, j->id);
        return NULL;
    }
    if (!mb || !j || strcmp(j->run_id, job_id) != 0 || strcmp(mb->job, job_id) != 0) {
        log_warn("message for job %s from %s ignored: not a member of a running job with that id",
                 job_id, c->peer_addr);
        return NULL;
    }
    if (mbp)
        *mbp = mb;
    return j;
}

/* Sets the job's phase; followers hear of a change (notify) at once. */
static bool job__set_phase(coordinator *co, job *j, const char *phase, bool notify)
{
    if (strcmp(j->phase, phase) == 0)
        return false;
    snprintf(j->phase, sizeof(j->phase), "%s", phase);
    if (notify)
        job_notify(co, j);
    return true;
}

/* The phase of a job whose members are all ready, from what is done: an
 * evaluation or a checkpoint due and not yet in, else training. */
static const char *job__phase_now(const job *j)
{
    uint64_t n = j->steps_done;
    bool eval_due = plan_eval_at(j->plan, n) && !(j->have_eval && j->last_eval_step == n);
    bool ckpt_due = n > j->first_step && plan_checkpoint_after(j->plan, n - 1) &&
                    !(j->have_ckpt && j->ckpt_step == n - 1);
    if (n >= j->plan->max_steps)
        return eval_due ? "evaluating" : "checkpointing";
    if (ckpt_due)
        return "checkpointing";
    return eval_due ? "evaluating" : "training";
}

void driver_handle_ready(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    member *from = NULL;
    job *j = job__of_member(co, c, env->job_ready->job_id, &from);
    if (!j)
        return;
    j->progress_at = uv_now(n->loop);
    /* the replicas have built their layers and kernels: what is left is
     * memoryx's weights and the links */
    if (from->role == APPLIANCE__ROLE__ROLE_WSE_NODE && ++j->ready_wse == j->plan->n_replicas &&
        j->ready + 1 < j->nmembers)
        job__set_phase(co, j, "loading weights", true);
    if (++j->ready < j->nmembers)
        return;
    snprintf(j->phase, sizeof(j->phase), "%s", job__phase_now(j));
    j->t_train = uv_now(n->loop);
    log_info("job %s: every member ready, training starts", j->id);
    job_log(co, j, "every member ready: training");
    Appliance__JobGo go = APPLIANCE__JOB_GO__INIT;
    go.job_id = j->run_id;
    ENVELOPE(out, job_go, JOB_GO, &go);
    for (size_t i = 0; i < j->plan->n_shards; i++) {
        member *mb = members_by_id(&co->members, j->plan->shards[i]->member_id);
        if (mb && mb->c)
            conn_send_msg(mb->c, &out);
    }
    job_notify(co, j);
}

/* Done once every shard wrote its final checkpoint and every step's
 * reports are in (they travel on other connections and may come later). */
static void job__maybe_finish(coordinator *co, job *j)
{
    bool evaluated = !plan_eval_at(j->plan, j->plan->max_steps) ||
                     (j->have_eval && j->last_eval_step == j->plan->max_steps);
    if (j->finished >= j->plan->n_shards && j->steps_done >= j->plan->max_steps && evaluated)
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_DONE, "done");
}

/* Counts the steps that are complete, in order (steps.h): the loss, the
 * rate, the log, the summaries and the journal of each. */
static void job__count_steps(coordinator *co, job *j)
{
    job_step done;
    while (j->state == APPLIANCE__JOB_STATE__JOB_RUNNING && steps_next(&j->flight, &done)) {
        const job_step *s = &done;
        j->steps_done = j->flight.done;
        uint64_t now = uv_now(co->n->loop);
        j->progress_at = now;
        if (co->last_commit && j->steps_done > j->first_step + 1)
            metrics_hist_observe(&co->step_hist, (double)(now - co->last_commit) / 1000.0);
        co->last_commit = now;
        j->last_loss = s->loss_sum / (double)j->plan->global_batch;
        j->samples += j->plan->global_batch;
        j->t_step = j->step_at = now;
        optim_config cfg;
        if (optim_from_plan(j->plan->optimizer, &cfg) == 0)
            j->last_lr = optim_lr_at(&cfg, (int64_t)s->step);
        double compute = s->compute_max;
        job_point pt = {.step = j->steps_done, .loss = j->last_loss,
                        .samples_per_sec = steps_rate(j->samples, j->t_train, now),
                        .compute_sec = compute};
        jobview_record_step(j, &pt);
        bool last = j->steps_done >= j->plan->max_steps;
        bool changed = job__set_phase(co, j, job__phase_now(j), false);
        if (last || j->steps_done % j->log_steps == 0) {
            changed = false; /* the status below says it */
            Appliance__JobStatus st;
            job_status(co, j, &st);
            log_info("job %s: step %llu/%llu loss %.6f", j->id, (unsigned long long)j->steps_done,
                     (unsigned long long)j->plan->max_steps, j->last_loss);
            job_log(co, j, "step %llu/%llu loss %.6f lr %.6g samples/s %.1f",
                    (unsigned long long)j->steps_done, (unsigned long long)j->plan->max_steps,
                    j->last_loss, j->last_lr, st.samples_per_sec);
            if (j->sum && j->steps_done > j->summarized) { /* a replayed step is written once */
                j->summarized = j->steps_done;
                int64_t step = (int64_t)j->steps_done;
                summaries_scalar(j->sum, "loss", step, j->last_loss);
                summaries_scalar(j->sum, "learning_rate", step, j->last_lr);
                summaries_scalar(j->sum, "samples_per_sec", step, st.samples_per_sec);
                summaries_scalar(j->sum, "step_compute_sec/slowest_replica", step, compute);
                size_t slowest = 0;
                for (size_t i = 0; i < j->plan->n_replicas && i < 64; i++) {
                    char tag[64];
                    snprintf(tag, sizeof(tag), "step_compute_sec/replica_%zu", i);
                    summaries_scalar(j->sum, tag, step, j->replica_sec[i]);
                    if (j->replica_sec[i] > j->replica_sec[slowest])
                        slowest = i;
                }
                /* where the slowest replica's step went */
                for (size_t i = 0; i < j->nphases; i++) {
                    char tag[64];
                    snprintf(tag, sizeof(tag), "step_phase_sec/%s", j->phase_name[i]);
                    summaries_scalar(j->sum, tag, step, j->replica_phase[slowest][i]);
                }
                summaries_flush(j->sum);
            }
            job_save(co, j);
            job_notify(co, j);
        }
        if (changed)
            job_notify(co, j);
        job__maybe_finish(co, j);
    }
}

void driver_handle_step_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__StepReport *r = env->step_report;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    char why[160];
    if (!isfinite(r->loss_sum)) {
        snprintf(why, sizeof(why), "loss of replica %u is not finite at step %llu: training diverged",
                 r->replica, (unsigned long long)r->step);
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    if (steps_report(&j->flight, r->step, r->loss_sum, r->compute_sec) < 0) {
        snprintf(why, sizeof(why), "step report for step %llu from replica %u out of order",
                 (unsigned long long)r->step, r->replica);
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    if (r->replica < 64) {
        j->replica_sec[r->replica] = r->compute_sec;
        for (size_t i = 0; i < r->n_phases && i < JOB_PHASES; i++) {
            const Appliance__StepPhase *ph = r->phases[i];
            if (i >= j->nphases) {
                snprintf(j->phase_name[i], sizeof(j->phase_name[i]), "%s", ph->name);
                j->nphases = i + 1;
            }
            j->replica_phase[r->replica][i] = isfinite(ph->sec) ? ph->sec : 0;
        }
    }
    job__count_steps(co, j);
}

void driver_handle_step_committed(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__StepCommitted *r = env->step_committed;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    if (steps_commit(&j->flight, r->step) < 0) {
        char why[160];
        snprintf(why, sizeof(why), "commit of step %llu from shard %u out of order",
                 (unsigned long long)r->step, r->shard);
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    job__count_steps(co, j);
}

void driver_handle_eval_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__EvalReport *r = env->eval_report;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    char why[160];
    if (msgcheck_eval_report(r, j->plan, why, sizeof(why)) < 0) {
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    evals_report er = {.step = r->step, .samples = r->samples, .correct = r->correct,
                       .loss_sum = r->loss_sum, .nclasses = r->n_intersection,
                       .inter = r->intersection, .uni = r->union_};
    bool count_background = j->spec && j->spec->model && j->spec->model->eval_ignore;
    evals_result res;
    int done = evals_add(&j->pending_evals, &er, (uint32_t)j->plan->n_replicas, count_background, &res);
    j->progress_at = uv_now(n->loop);
    if (res.dropped_step)
        log_warn("job %s: the evaluation at step %llu had %u of %zu reports when the one at step "
                 "%llu began; it is dropped", j->id, (unsigned long long)res.dropped_step,
                 res.dropped_reports, (size_t)j->plan->n_replicas, (unsigned long long)r->step);
    if (!done)
        return;
    j->have_eval = true;
    j->last_eval_step = r->step;
    j->last_eval_loss = res.loss;
    j->last_eval_accuracy = res.accuracy;
    j->last_eval_iou = res.iou;
    job_eval_point ep = {.step = r->step, .loss = j->last_eval_loss,
                         .accuracy = j->last_eval_accuracy, .iou = j->last_eval_iou};
    jobview_record_eval(j, &ep);
    bool seg = res.accuracy < 0;
    char dice[32] = "";
    if (seg)
        snprintf(dice, sizeof(dice), ", Dice %.4f", res.dice);
    log_info("job %s: evaluation at step %llu over %llu samples: loss %.6f%s%.4f%s", j->id,
             (unsigned long long)r->step, (unsigned long long)res.samples, res.loss,
             seg ? ", IoU " : ", accuracy ", seg ? res.iou : res.accuracy, dice);
    job_log(co, j, "evaluation at step %llu over %llu samples: loss %.6f%s%.4f%s",
            (unsigned long long)r->step, (unsigned long long)res.samples, res.loss,
            seg ? ", IoU " : ", accuracy ", seg ? res.iou : res.accuracy, dice);
    if (j->sum) {
        summaries_scalar(j->sum, "eval/loss", (int64_t)r->step, j->last_eval_loss);
        if (seg) {
            summaries_scalar(j->sum, "eval/iou", (int64_t)r->step, j->last_eval_iou);
            summaries_scalar(j->sum, "eval/dice", (int64_t)r->step, res.dice);
        }
        else
            summaries_scalar(j->sum, "eval/accuracy", (int64_t)r->step, j->last_eval_accuracy);
        summaries_flush(j->sum);
    }
    job_save(co, j);
    if (j->ready >= j->nmembers)
        job__set_phase(co, j, job__phase_now(j), false);
    job_notify(co, j);
    job__maybe_finish(co, j);
}

void driver_handle_finished(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobFinished *f = env->job_finished;
    job *j = job__of_member(co, c, f->job_id, NULL);
    if (!j)
        return;
    j->progress_at = uv_now(n->loop);
    log_info("job %s: shard %u wrote %s", j->id, f->shard, f->checkpoint);
    j->finished++;
    job__maybe_finish(co, j);
}

void driver_handle_abort(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    member *mb = NULL;
    job *j = job__of_member(co, c, env->job_abort->job_id, &mb);
    if (!j)
        return;
    char why[900];
    snprintf(why, sizeof(why), "%s %s: %s", msg_role_name(mb->role), mb->name,
             env->job_abort->reason ? env->job_abort->reason : "aborted");
    if (env->job_abort->fault)
        job_fault(co, j, why);
    else
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
}

void driver_handle_checkpoint(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__CheckpointWritten *w = env->checkpoint_written;
    job *j = job__of_member(co, c, w->job_id, NULL);
    if (!j)
        return;
    if (w->shard >= j->plan->n_shards || w->shard >= 64) {
        log_warn("checkpoint report from %s for shard %u of a job with %zu: ignored", c->peer_addr,
                 w->shard, j->plan->n_shards);
        return;
    }
    j->progress_at = uv_now(n->loop);
    j->shard_ckpt[w->shard] = w->step + 1;
    uint64_t all = UINT64_MAX;
    for (size_t k = 0; k < j->plan->n_shards; k++)
        if (j->shard_ckpt[k] < all)
            all = j->shard_ckpt[k];
    if (all == 0 || (j->have_ckpt && all - 1 == j->ckpt_step))
        return;
    j->have_ckpt = true;
    j->ckpt_step = all - 1;
    log_info("job %s: checkpoint of step %llu complete on every shard", j->id,
             (unsigned long long)j->ckpt_step);
    job_save_recovery(co, j);
    if (j->ready >= j->nmembers)
        job__set_phase(co, j, job__phase_now(j), true);
}

void driver_member_lost(coordinator *co, member *mb)
{
    job *j = co->running;
    if (!j || !j->run_id[0] || strcmp(mb->job, j->run_id) != 0)
        return;
    char why[256];
    snprintf(why, sizeof(why), "lost %s %s (member %u)", msg_role_name(mb->role), mb->name, mb->id);
    job_fault(co, j, why);
}
