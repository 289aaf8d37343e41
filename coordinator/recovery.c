/* Recovery of a running job: a fault stops the attempt everywhere and,
 * while restarts remain, the next attempt starts from the newest complete
 * checkpoint on the members there are (docs/architecture.md, "Faults and
 * recovery"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "log.h"
#include "msg.h"
#include "planner.h"

#define JOB_SETTLE_MS 1000            /* after a fault, before the next attempt: the members let go */
#define JOB_FULL_WAIT_MS 5000         /* how long a recovery waits for replacements of lost replicas */
#define JOB_GIVE_UP_MS 120000         /* how long it waits for members it cannot do without */

void job_fault(coordinator *co, job *j, const char *why)
{
    if (j->state != APPLIANCE__JOB_STATE__JOB_RUNNING || j->recovering)
        return;
    if (j->restarts >= j->max_restarts) {
        char msg[900];
        snprintf(msg, sizeof(msg), "%s (no restarts left: runconfig.max_num_restarts = %u)", why,
                 j->max_restarts);
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, msg);
        return;
    }
    j->restarts++;
    snprintf(j->fault, sizeof(j->fault), "%s", why);
    char from[64] = "its first step";
    if (j->have_ckpt)
        snprintf(from, sizeof(from), "the checkpoint of step %llu", (unsigned long long)j->ckpt_step);
    log_warn("job %s: fault at step %llu: %s; restart %u of %u from %s", j->id,
             (unsigned long long)j->steps_done, why, j->restarts, j->max_restarts, from);
    job_log(co, j, "fault at step %llu: %s; restart %u of %u from %s",
            (unsigned long long)j->steps_done, why, j->restarts, j->max_restarts, from);
    Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
    a.job_id = j->run_id;
    a.reason = (char *)why;
    a.fault = true;
    ENVELOPE(env, job_abort, JOB_ABORT, &a);
    job__send_all(co, j, &env);
    job__release(co, j);
    co->running = j; /* the members it had stay free for its next attempt */
    job__drop_run(j, false);
    j->run_id[0] = 0;
    j->recovering = true;
    uint64_t now = uv_now(co->n->loop);
    uint64_t wait = 2ull * co->members.timeout_ms;
    j->recover_at = now + JOB_SETTLE_MS;
    j->full_until = now + (wait > JOB_FULL_WAIT_MS ? wait : JOB_FULL_WAIT_MS);
    j->give_up_at = now + JOB_GIVE_UP_MS;
    snprintf(j->phase, sizeof(j->phase), "recovering");
    job_save_recovery(co, j);
    job_save(co, j);
    job_notify(co, j);
}

int job_recover_loaded(coordinator *co, job *j)
{
    char err[1024];
    const jobspec *spec = j->spec;
    const char *why = "the coordinator stopped while the job was running";
    if (co->journal) {
        journal_recovery r;
        if (journal_get_recovery(co->journal, j->id, &r) == 0) {
            j->restarts = r.restarts;
            j->have_ckpt = r.have_ckpt;
            j->ckpt_step = r.ckpt_step;
            if (r.kind == PLANNER_REAL || r.kind == PLANNER_SIMULATED)
                j->kind = (uint8_t)r.kind; /* its later attempts keep the first one's kind */
        }
    }
    if (!spec || co->running || j->restarts >= (uint32_t)spec->max_num_restarts) {
        snprintf(err, sizeof(err), "%s; %s", why,
                 !spec ? "its job file no longer compiles"
                 : co->running ? "another job is recovering"
                               : "no restarts left (runconfig.max_num_restarts)");
        j->state = APPLIANCE__JOB_STATE__JOB_QUEUED; /* so that job_end takes it */
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, err);
        return -1;
    }
    j->max_restarts = (uint32_t)spec->max_num_restarts;
    j->run_id[0] = 0;
    j->summarized = j->steps_done;
    co->running = j;
    job_fault(co, j, why); /* counts the restart, sets the deadlines */
    return 0;
}

recovery_verdict recovery_decide(jobspec *spec, const recovery_idle *idle, bool full_wait_over,
                                 bool give_up)
{
    /* with spatial partitions a replica is a whole group of stripes */
    size_t parts = (size_t)jobspec_parts(spec);
    size_t reps = idle->wse_nodes - idle->wse_nodes % parts;
    /* with no swarmx left, one replica may go on streaming from its shard
     * directly */
    bool lone = idle->swarmx == 0 && planner_direct_alone(spec); /* one part, one shard */
    if (lone && reps > 1)
        reps = 1;
    bool others = idle->memoryx >= (size_t)spec->num_wgt_servers && idle->workers >= 1 &&
                  (idle->swarmx >= 1 || lone);
    if (!full_wait_over || !others || reps < (size_t)spec->min_num_csx || reps < parts)
        return give_up ? RECOVERY_GIVE_UP : RECOVERY_WAIT;
    /* Go on with what is left, a tree as wide as the swarmx nodes left need. */
    if (reps < (size_t)spec->num_csx)
        spec->num_csx = (int64_t)reps;
    while (planner_tree_nodes(spec) > idle->swarmx && spec->swarmx_fanout < 1024)
        spec->swarmx_fanout++;
    return RECOVERY_GO;
}

/* Idle live members of a role; of wse-nodes, those of the kind j's
 * attempts take. */
static size_t job__idle(coordinator *co, const job *j, Appliance__Role role)
{
    size_t k = 0;
    for (size_t i = 0; i < co->members.n; i++) {
        const member *mb = &co->members.v[i];
        bool kind = role != APPLIANCE__ROLE__ROLE_WSE_NODE || j->kind == PLANNER_ANY ||
                    mb->simulated == (j->kind == PLANNER_SIMULATED);
        k += mb->role == role && kind && !mb->job[0] &&
             mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
    }
    return k;
}

/* The next attempt of a recovering job: from its newest complete
 * checkpoint (or its start), on a full complement of replicas when they
 * come back in time, else on the survivors down to runconfig.min_num_csx,
 * with a SwarmX tree as wide as the SwarmX nodes left need. */
static void job__restart(coordinator *co, job *j, uint64_t now)
{
    char err[1024];
    if (!j->spec) {
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, j->spec_error);
        return;
    }
    /* this attempt's copy of the job (its model, document and text the
     * job's, read only): a checkpoint to resume, fewer replicas */
    jobspec attempt = *j->spec, *spec = &attempt;
    if (j->have_ckpt && j->ckpt_step >= (uint64_t)spec->max_steps) {
        /* The fault came after the final checkpoint: training is complete. */
        bool eval = spec->eval.present;
        j->steps_done = j->ckpt_step;
        if (!eval) {
            job_end(co, j, APPLIANCE__JOB_STATE__JOB_DONE, "done");
        } else {
            snprintf(err, sizeof(err), "training and its final checkpoint are complete, but the final "
                     "evaluation was lost to a fault: %s", j->fault);
            job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, err);
        }
        return;
    }
    if (j->have_ckpt) {
        char path[PATH_MAX + 80];
        int len = snprintf(path, sizeof(path), "%s/checkpoint_%llu-shard1-of-%lld.safetensors",
                           spec->model_dir, (unsigned long long)j->ckpt_step,
                           (long long)spec->num_wgt_servers);
        if (len < 0 || (size_t)len >= sizeof(spec->checkpoint_path)) {
            job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, "the checkpoint's path is too long");
            return;
        }
        memcpy(spec->checkpoint_path, path, (size_t)len + 1);
    }
    planner_place pl;
    if (!planner_place_members(&co->members, spec, true, (planner_kind)j->kind, &pl)) {
        recovery_idle idle = {job__idle(co, j, APPLIANCE__ROLE__ROLE_WSE_NODE),
                              job__idle(co, j, APPLIANCE__ROLE__ROLE_MEMORYX),
                              job__idle(co, j, APPLIANCE__ROLE__ROLE_SWARMX),
                              job__idle(co, j, APPLIANCE__ROLE__ROLE_WORKER)};
        int64_t had = spec->num_csx;
        switch (recovery_decide(spec, &idle, now >= j->full_until, now >= j->give_up_at)) {
        case RECOVERY_WAIT:
            j->recover_at = now + 250;
            return;
        case RECOVERY_GIVE_UP: {
            size_t parts = (size_t)jobspec_parts(spec);
            char stripes[128] = "";
            if (parts > 1)
                snprintf(stripes, sizeof(stripes), "; each replica needs %zu wse-nodes, one "
                         "per stripe of its samples (runconfig.spatial_partitions)", parts);
            snprintf(err, sizeof(err), "%s; the members to recover on did not come back within "
                     "%u s (idle now: %zu wse-node(s), %zu memoryx, %zu swarmx, %zu worker(s))%s",
                     j->fault, JOB_GIVE_UP_MS / 1000, idle.wse_nodes, idle.memoryx, idle.swarmx,
                     idle.workers, stripes);
            job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, err);
            return;
        }
        case RECOVERY_GO:
            if (spec->num_csx < had)
                job_log(co, j, "%lld of %lld replica(s) available: going on with them "
                        "(min_num_csx %lld)", (long long)spec->num_csx, (long long)had,
                        (long long)spec->min_num_csx);
            break;
        }
    }
    job__launch(co, j, spec);
}

void jobs_tick(coordinator *co)
{
    job *j = co->running;
    if (!j || co->n->stopping)
        return;
    uint64_t now = uv_now(co->n->loop);
    if (!j->recovering) {
        /* Every member may be alive and still the job make no progress (a
         * stuck stream): past runconfig.step_timeout_seconds it is a fault. */
        if (j->step_timeout_ms && j->state == APPLIANCE__JOB_STATE__JOB_RUNNING &&
            now - j->progress_at > j->step_timeout_ms) {
            char why[160];
            snprintf(why, sizeof(why), "no progress for %llu s after step %llu "
                     "(runconfig.step_timeout_seconds): the job stalled",
                     (unsigned long long)(j->step_timeout_ms / 1000), (unsigned long long)j->steps_done);
            job_fault(co, j, why);
        }
        return;
    }
    if (now >= j->recover_at)
        job__restart(co, j, now);
}
