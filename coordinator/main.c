/* coordinator: membership, jobs, the compiler and the job driver. */
#include <uv.h>

#include "coordinator.h"

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
    coordinator_init(&co, &n);
    int rc = node_run(&n, &role, loop);
    members_deinit(&co.members);
    return rc;
}
