/* memoryx: weights, optimizer state and checkpoints of a shard. */
#include "mx.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static memoryx mx;
    memoryx_role(&role, &mx, &n);
    node_parse_args(&n.opt, &role, argc, argv);
    n.threads = mx.opt.threads;
    n.memory_limit = mx.opt.memory;
    metrics_hist_init(&mx.chunk_hist, "appliance_chunk_write_seconds",
                      "A weight chunk, from queued to written to the socket.");
    n.data = &mx;
    return node_run(&n, &role, uv_default_loop());
}
