/* memoryx: weights, optimizer state and checkpoints of a shard. */
#include <stdio.h>
#include <stdlib.h>

#include "mx.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static memoryx mx;
    memoryx_role(&role, &mx, &n);
    node_parse_args(&n.opt, &role, argc, argv);
    n.threads = mx.opt.threads;
    /* libuv's thread pool runs the updates, the load and the checkpoints:
     * room for --threads updates and a checkpoint or load beside them
     * (the pool reads this when it is first used) */
    if (!getenv("UV_THREADPOOL_SIZE") && mx.opt.threads + 1 > 4) {
        char size[16];
        snprintf(size, sizeof(size), "%u", mx.opt.threads + 1);
        setenv("UV_THREADPOOL_SIZE", size, 1);
    }
    n.memory_limit = mx.opt.memory;
    metrics_hist_init(&mx.chunk_hist, "appliance_chunk_write_seconds",
                      "A weight chunk, from queued to written to the socket.");
    n.data = &mx;
    return node_run(&n, &role, uv_default_loop());
}
