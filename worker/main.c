/* worker: an input worker streaming batches to wse-nodes. */
#include <stdio.h>
#include <stdlib.h>

#include "worker.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static worker w;
    worker_role(&role, &w, &n);
    node_parse_args(&n.opt, &role, argc, argv);
    /* Decoding runs in libuv's thread pool, sized before its first use. */
    char threads[16];
    snprintf(threads, sizeof(threads), "%u", w.opt.threads);
    setenv("UV_THREADPOOL_SIZE", threads, 1);
    metrics_hist_init(&w.batch_hist, "appliance_batch_seconds", "Producing one batch: reading, decoding, augmenting.");
    w.max_inflight = w.opt.threads;
    n.threads = w.opt.threads;
    n.data = &w;
    return node_run(&n, &role, uv_default_loop());
}
