/* worker: an input worker streaming batches to wse-nodes. */
#include "worker.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static worker w;
    worker_role(&role);
    node_parse_args(&n.opt, &role, argc, argv);
    w.n = &n;
    n.data = &w;
    return node_run(&n, &role, uv_default_loop());
}
