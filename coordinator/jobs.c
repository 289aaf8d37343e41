/* Jobs on the coordinator. The compiler and the job driver are not built
 * yet: a submitted job is refused with a message saying so, and the daemons'
 * job messages are logged and dropped. */
#include <errno.h>
#include <string.h>

#include "coordinator.h"
#include "log.h"

void jobs_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    const char *file = env->job_submit->file_name ? env->job_submit->file_name : "job";
    log_warn("job %s from %s refused: job execution is not available yet", file, c->peer_addr);
    node_reply_error(c, -ENOSYS, "%s: job execution is not available in this version of the coordinator",
                     file);
}

void jobs_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    node_reply_error(c, -ENOENT, "no job %s", env->job_status_query->job_id);
}

static void jobs__unexpected(node *n, conn *c, Appliance__Envelope *env)
{
    log_warn("%s from %s for no known job: dropped", frame_msg_name(env->msg_case), c->peer_addr);
}

void jobs_handle_ready(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    jobs__unexpected(n, c, env);
}

void jobs_handle_step_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    jobs__unexpected(n, c, env);
}

void jobs_handle_step_committed(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    jobs__unexpected(n, c, env);
}

void jobs_handle_finished(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    jobs__unexpected(n, c, env);
}

void jobs_handle_abort(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    jobs__unexpected(n, c, env);
}

void jobs_member_lost(coordinator *co, member *mb) {}

void jobs_client_closed(coordinator *co, conn *c) {}

void jobs_shutdown(coordinator *co) {}
