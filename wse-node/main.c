/* wse-node: one emulated CS-2 system. It declares its on-wafer memory to the
 * coordinator (default 40 GB as on a CS-2, or a share of the host's memory;
 * never more than the host has). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_check.h"
#include "host.h"
#include "kernels.h"
#include "log.h"
#include "op_conv2d.h"
#include "replica.h"
#include "units.h"

#define WAFER_DEFAULT (40ull * 1000 * 1000 * 1000) /* 40 GB of SRAM on a CS-2 */

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static wse_node w;
    wse_node_role(&role, &w, &n);
    node_parse_args(&n.opt, &role, argc, argv);
    /* before any thread starts: the guards may run the program again */
    char err[512];
    log_init(role.component, (enum log_level)n.opt.log_level);
    int omp = kernels_omp_wait(argv);
    if (omp < 0)
        log_warn("cannot start again with GOMP_SPINCOUNT=%s: the compute threads spin for "
                 "libgomp's default between regions", KERNELS_OMP_SPINCOUNT);
    else if (omp > 0)
        log_info("the compute threads (OpenMP) wait between regions with OMP_WAIT_POLICY=%s "
                 "GOMP_SPINCOUNT=%s", getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)",
                 getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(unset)");
    if (blas_guard(argv, &w.blas, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    if (w.blas.failed[0])
        log_warn("OpenBLAS core %s failed its start-up self-check (%s): the kernels run on core "
                 "type %s", w.blas.failed, w.blas.why, w.blas.core);
    else if (w.blas.named[0])
        log_info("OpenBLAS named core %s, %s (%s) allows: tried %s; "
                 "the kernels run on core type %s, the newest that passed its self-check",
                 w.blas.named,
                 strstr(w.blas.tried, "beyond the cap") ? "newer than the kernels' cap"
                                                        : "older than this processor",
                 kernels_isa_name(kernels_isa_level()), w.blas.tried, w.blas.core);
    else if (w.blas.tried[0])
        log_info("OpenBLAS core %s passed its start-up self-check; no newer core computes right "
                 "here, or one at under half its speed (%s)", w.blas.core, w.blas.tried);
    else
        log_info("OpenBLAS core %s passed its start-up self-check", w.blas.core);
    if (kernels_isa_level() != kernels_isa_processor())
        log_info("the kernels run this processor's %s paths as an older one's: %s (%s)",
                 kernels_isa_name(kernels_isa_processor()), kernels_isa_name(kernels_isa_level()),
                 getenv("ONEDNN_MAX_CPU_ISA") ? "ONEDNN_MAX_CPU_ISA" : "DNNL_MAX_CPU_ISA");
    else
        log_info("instruction set %s: the convolutions' blocked groups in blocks of %d channels",
                 kernels_isa_name(kernels_isa_level()), op_conv2d_block_size());
    if (strcmp(kernels_bf16_isa(), "none") != 0)
        log_info("mixed-precision jobs compute their dense layers and convolutions in bfloat16 "
                 "(oneDNN on %s)",
                 kernels_bf16_isa());
    else
        log_info("mixed-precision jobs compute in float32 here: no bfloat16 instructions, or a "
                 "build without oneDNN");
    if (sim_config_parse(&w.sim, w.opt.simulate, err, sizeof(err)) < 0) {
        fprintf(stderr, "wse-node: %s\n", err);
        return 2;
    }
    if (w.sim.mode != SIM_OFF)
        log_info("simulated compute: %s; the kernels do not run and no activation is allocated",
                 sim_config_describe(&w.sim, err, sizeof(err)));
    if (w.opt.spill_dir[0]) {
        /* given, it must take a spill file now, not at a job's first step */
        char room[32];
        if (wn_spill_dir_check(w.opt.spill_dir, room, sizeof(room), err, sizeof(err)) < 0) {
            fprintf(stderr, "wse-node: --spill-dir %s\n", err);
            return 2;
        }
        log_info("spill directory %s: %s free", w.opt.spill_dir, room);
    }
    uint64_t host = n.opt.host_memory; /* --host-memory, or what this host (its cgroup) has */
    char a[32], b[32];
    if (!w.opt.wafer_memory && w.opt.wafer_share[0]) {
        double share;
        if (host_share_parse(w.opt.wafer_share, &share) < 0) {
            fprintf(stderr, "wse-node: --wafer-share \"%s\": expected a fraction of the host's "
                    "memory above 0 and at most 1 (0.375), or one divided by a whole number "
                    "(0.75/2)\n", w.opt.wafer_share);
            return 2;
        }
        if (!host) {
            fprintf(stderr, "wse-node: --wafer-share: the host's memory is unknown; give "
                    "--wafer-memory or --host-memory\n");
            return 2;
        }
        uint64_t want = (uint64_t)((double)host * share) & ~((UINT64_C(1) << 20) - 1);
        w.opt.wafer_memory = want < WAFER_DEFAULT ? want : WAFER_DEFAULT;
        if (w.opt.wafer_memory < (UINT64_C(1) << 20))
            w.opt.wafer_memory = UINT64_C(1) << 20;
        log_info("wafer memory %s: %s of the host's %s%s", units_format_size(w.opt.wafer_memory, a, sizeof(a)),
                 w.opt.wafer_share, units_format_size(host, b, sizeof(b)),
                 want > WAFER_DEFAULT ? ", at most the default" : "");
    }
    if (!w.opt.wafer_memory) {
        w.opt.wafer_memory = WAFER_DEFAULT < host ? WAFER_DEFAULT : host;
    } else if (host && w.opt.wafer_memory > host && w.sim.mode != SIM_OFF) {
        /* it fills no wafer: plans for larger wafers than the host (a
         * CS-2's) are simulated within what the host has */
        log_info("wafer memory %s, more than this host's %s: simulated compute allocates no "
                 "activation, the coordinator counts what it holds",
                 units_format_size(w.opt.wafer_memory, a, sizeof(a)),
                 units_format_size(host, b, sizeof(b)));
    } else if (host && w.opt.wafer_memory > host) {
        fprintf(stderr, "wse-node: --wafer-memory %s is more than this host can give (%s)\n",
                units_format_size(w.opt.wafer_memory, a, sizeof(a)),
                units_format_size(host, b, sizeof(b)));
        return 2;
    }
    n.threads = w.opt.threads;
    n.memory_limit = w.opt.wafer_memory;
    n.data = &w;
    metrics_hist_init(&w.step_hist, "appliance_step_compute_seconds",
                      "Kernel time of one training step on this replica.");
    int rc = compute_start(&w.comp, uv_default_loop(), (int)w.opt.threads);
    if (rc < 0) {
        fprintf(stderr, "wse-node: cannot start the compute thread: %s\n", uv_strerror(rc));
        return 1;
    }
    return node_run(&n, &role, uv_default_loop());
}
