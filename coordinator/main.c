/* coordinator: membership, jobs, the compiler and the job driver. */
#include <uv.h>

#include "coordinator.h"
#include "log.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static coordinator co;
    coordinator_role(&role);
    node_parse_args(&n.opt, &role, argc, argv);
    n.data = &co;
    uv_loop_t *loop = uv_default_loop();
    n.loop = loop;
    log_init(role.component, (enum log_level)n.opt.log_level); /* the journal logs as it loads */
    coordinator_init(&co, &n);
    int rc = node_run(&n, &role, loop);
    members_deinit(&co.members);
    return rc;
}
