/* worker: an input worker streaming batches to wse-nodes. */
#include <stdio.h>
#include <stdlib.h>

#include "worker.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static worker w;
    worker_role(&role);
    node_parse_args(&n.opt, &role, argc, argv);
    if (!n.opt.threads)
        n.opt.threads = 1;
    /* Decoding runs in libuv's thread pool, sized before its first use. */
    char threads[16];
    snprintf(threads, sizeof(threads), "%d", n.opt.threads);
    setenv("UV_THREADPOOL_SIZE", threads, 1);
    w.n = &n;
    metrics_hist_init(&w.batch_hist, "appliance_batch_seconds", "Producing one batch: reading, decoding, augmenting.");
    w.max_inflight = (unsigned)n.opt.threads;
    n.data = &w;
    return node_run(&n, &role, uv_default_loop());
}
