/* The plan's first answers without a cluster: needs, fit, largest batch,
 * largest square input, and the memory table of a replica. */
#include "offline.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <string.h>

#include "fit.h"
#include "plan.h"
#include "jobspec.h"
#include "render.h"
#include "toml.h"
#include "units.h"

#define OFFLINE_MAX_BATCH (1 << 20) /* the largest batch looked for */

static const char *offline__mode_name(Appliance__ExecMode mode)
{
    return mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? "pipelined" : "weight_streaming";
}

/* What fits in one mode. */
typedef struct offline_fit {
    Appliance__ExecMode mode;
    uint64_t need;       /* bytes per replica at the job's batch share */
    int batch;           /* the largest batch share at the job's input; 0: none */
    int side;            /* the largest square input at the job's share; 0: none; -1: not an image */
    model_shape aspect;  /* a volume's largest input of the job's aspect (when side > 0) */
} offline_fit;

static void offline__table(const model *m, int share, int micro, int threads)
{
    footprint f;
    if (footprint_init_micro(&f, m, share, micro, threads) < 0)
        return;
    char shape[64], a[5][32];
    printf("memory of a replica, %d sample(s) at once, per layer (the output: kept for the "
           "backward pass, or recomputed there):\n", f.n);
    int width = 24; /* the longest name (a Model Zoo U-Net's are module paths) */
    for (int i = 0; i < m->nlayers; i++)
        if ((int)strlen(m->layers[i].name) > width)
            width = (int)strlen(m->layers[i].name);
    printf("  %-*s %-16s %-16s %12s %-10s %12s %12s %12s\n", width, "layer", "type", "output",
           "output", "", "gradient", "saved", "workspace");
    for (int i = 0; i < m->nlayers; i++) {
        const footprint_layer *l = &f.layers[i];
        printf("  %-*s %-16s %-16s %12s %-10s %12s %12s %12s\n", width, m->layers[i].name,
               layer_type_name(m->layers[i].type), model_shape_str(&m->layers[i].out, shape, sizeof(shape)),
               units_format_size(l->act, a[0], sizeof(a[0])),
               l->act == 0 ? "(a view)" : l->packed ? "kept bf16" : l->kept ? "kept" : "recomputed",
               units_format_size(l->dact, a[1], sizeof(a[1])),
               units_format_size(l->aux, a[2], sizeof(a[2])),
               units_format_size(l->workspace, a[3], sizeof(a[3])));
    }
    printf("  step buffers (lean plan): %s at most (outputs kept %s of %s; gradients by "
           "liveness; %u outputs recomputed per step); keeping every buffer would take %s\n",
           units_format_size(f.arena, a[0], sizeof(a[0])),
           units_format_size(f.kept, a[1], sizeof(a[1])),
           units_format_size(f.act, a[2], sizeof(a[2])), f.plan.recomputes,
           units_format_size(f.eager - f.workspace - f.input, a[3], sizeof(a[3])));
    printf("  workspace %s, float inputs %s, %s in flight %s, weights %s, weight "
           "slots %s\n",
           units_format_size(f.workspace, a[0], sizeof(a[0])),
           units_format_size(f.input, a[1], sizeof(a[1])),
           m->eval_batch ? (m->feed_one ? "one training and one evaluation batch"
                                        : "two training and two evaluation batches")
           : m->feed_one ? "one batch"
                         : "two batches",
           units_format_size(f.batches, a[2], sizeof(a[2])),
           units_format_size(f.weights, a[3], sizeof(a[3])),
           units_format_size(f.wslots, a[4], sizeof(a[4])));
    if (f.rounded)
        printf("  in Pipelined, the dense layers' weights kept rounded to bfloat16: %s\n",
               units_format_size(f.rounded, a[0], sizeof(a[0])));
    footprint_free(&f);
}

int offline_plan(const char *file, const char *text, jobspec_format format, uint64_t wafer,
                 int threads, uint64_t spill_room, bool json)
{
    char err[1024];
    jobspec *spec = jobspec_parse_as(text, strlen(text), file, format, NULL, err, sizeof(err));
    if (!spec) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const toml_value *mt = jobspec_model_table(spec);
    int replicas = spec->num_csx > 0 ? (int)spec->num_csx : 1;
    /* with spatial partitions a wse-node computes one stripe of its group's samples */
    fit_stripes ps;
    if (fit_choose_stripes(spec, (size_t)replicas, (unsigned)threads, wafer,
                           FIT_DEFAULT_CHUNK_ELEMS, &ps, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        jobspec_free(spec);
        return 3;
    }
    const jobspec *full = spec;
    if (ps.parts > 1 || ps.rows) /* what a wse-node computes (fit_stripes_spec) */
        spec = &ps.spec;
    const model *m = spec->model;
    int groups = replicas / ps.parts;
    int share = (int)((spec->train.batch_size + groups - 1) / groups);
    unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
    /* wse-nodes whose --spill-dir offers what this host's TMPDIR does */
    const char *tmp = getenv("TMPDIR");
    struct statvfs vs;
    uint64_t room = spill_room != OFFLINE_SPILL_ROOM_HERE ? spill_room
                    : statvfs(tmp && tmp[0] ? tmp : "/tmp", &vs) == 0
                        ? (uint64_t)vs.f_bavail * vs.f_frsize
                        : 0;
    model searched = *m; /* the searches count on spilling as the plan would */
    searched.spill_room = room;
    offline_fit fits[2] = {{.mode = APPLIANCE__EXEC_MODE__MODE_PIPELINED},
                           {.mode = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING}};
    for (int i = 0; i < 2; i++) {
        offline_fit *o = &fits[i];
        o->need = fit_replica_bytes(m, share, threads, o->mode, states) +
                  spatial_extra_bytes(&ps.sp, share);
        o->batch = fit_largest_batch(&searched, threads, o->mode, states, wafer,
                                     OFFLINE_MAX_BATCH);
        o->side = mt && ps.parts == 1
                      ? fit_largest_side(mt, &searched, share, threads, o->mode, states, wafer)
                      : -1;
        /* a volume's sides are seldom equal (160x512x512): its own aspect too */
        if (o->side > 0 && full->model->input.ndim == 4 &&
            fit_largest_aspect(mt, &searched, share, threads, o->mode, states, wafer,
                               &o->aspect) <= 0)
            o->aspect.ndim = 0;
    }
    /* what mode = "auto" picks, and the micro-batch: the planner's decision */
    fit_choice choice;
    if (fit_choose(spec, (uint64_t)share, (unsigned)threads, wafer, &choice, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        fit_stripes_free(&ps);
        jobspec_free((jobspec *)full);
        return 3;
    }
    if (choice.micro)
        fits[0].need = choice.need_pipe + spatial_extra_bytes(&ps.sp, (int)choice.micro);
    /* the outputs kept, none made again, where the wafer holds them (as the plan decides) */
    uint64_t halo = spatial_extra_bytes(&ps.sp, (int)(choice.micro ? choice.micro : (uint64_t)share));
    fit_keep_outputs(spec, (uint64_t)share, (unsigned)threads, wafer, halo, &choice);
    fit_feed_one(spec, (uint64_t)share, (unsigned)threads, wafer, halo, &choice);
    fit_spill(spec, (uint64_t)share, (unsigned)threads, wafer, halo, room, &choice);
    if (choice.keep_outputs || choice.keep_costly || choice.feed_one || choice.spill) {
        int k = choice.mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? 0 : 1;
        fits[k].need = (k ? choice.need_ws : choice.need_pipe) + halo;
    }
    uint64_t part = 0; /* Weight Streaming in parts, as a default coordinator's plan would */
    fits[1].need = fit_ws_parts(m, fits[1].need, wafer, FIT_DEFAULT_CHUNK_ELEMS, &part);
    const offline_fit *pick =
        choice.mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? &fits[0] : &fits[1];
    char in[64], w[32], n[32], whole[64];
    bool vol = full->model->input.ndim == 4; /* a volume: the largest cube */
    model_shape_str(ps.rows ? &full->model->input : &m->input, in, sizeof(in));
    model_shape_str(&full->model->input, whole, sizeof(whole));
    units_format_size(wafer, w, sizeof(w));
    /* memoryx: what each shard holds, balanced as the plan balances */
    size_t nshards = spec->num_wgt_servers > 0 ? (size_t)spec->num_wgt_servers : 1;
    uint32_t *owner = calloc((size_t)m->ntensors + 1, sizeof(uint32_t));
    /* a Pipelined job's gradients never reach memoryx */
    bool grads = pick->mode != APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    footprint_sparse fsp = {full->sparsity.tensor_level, jobspec_sparsity_compact(&full->sparsity)};
    const footprint_sparse *lv = full->sparsity.present ? &fsp : NULL;
    uint64_t shard_most = owner ? footprint_shards(m, states, grads, lv, nshards, owner, NULL)
                                : UINT64_MAX;
    free(owner);
    uint64_t shard_all = 0;
    for (int i = 0; i < m->ntensors; i++)
        shard_all += footprint_shard_bytes_of(m, (size_t)i, states, grads, lv);
    if (json) {
        printf("{\"file\": \"%s\", \"input\": \"%s\", \"spatial_partitions\": %d, "
               "\"stripe_input\": \"%s\", \"stripe_halo_bytes\": %llu, ", file, whole, ps.parts,
               in, (unsigned long long)spatial_extra_bytes(&ps.sp, share));
        printf("\"replicas\": %d, \"batch_per_replica\": %d, "
               "\"threads\": %d, \"wafer_memory\": %llu, \"mode\": \"%s\", \"micro_batch\": %llu, "
               "\"fits\": %s, \"keep_outputs\": %s, \"keep_costly\": %s, \"feed_credits\": %d, "
               "\"rows_as_depth\": %s, \"spill_bytes\": %llu, "
               "\"memoryx_shards\": %zu, "
               "\"memoryx_bytes\": %llu, \"memoryx_bytes_per_shard\": %llu, \"modes\": [",
               groups, share, threads, (unsigned long long)wafer,
               offline__mode_name(pick->mode), (unsigned long long)choice.micro,
               pick->need <= wafer ? "true" : "false", choice.keep_outputs ? "true" : "false",
               choice.keep_costly ? "true" : "false", choice.feed_one ? 1 : PLAN_FEED_CREDITS,
               ps.rows ? "true" : "false", (unsigned long long)choice.spilled, nshards, (unsigned long long)shard_all,
               (unsigned long long)shard_most);
        for (int i = 0; i < 2; i++) {
            printf("%s{\"mode\": \"%s\", \"bytes_per_replica\": %llu, \"fits\": %s, "
                   "\"largest_batch\": %d, \"%s\": %d", i ? ", " : "",
                   offline__mode_name(fits[i].mode), (unsigned long long)fits[i].need,
                   fits[i].need <= wafer ? "true" : "false", fits[i].batch,
                   vol ? "largest_cube_input" : "largest_square_input", fits[i].side);
            if (fits[i].aspect.ndim) {
                char a[64];
                model_shape_str(&fits[i].aspect, a, sizeof(a));
                printf(", \"largest_aspect_input\": \"%s\"", a);
            }
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("%s: input %s, %d replica(s) of %d sample(s), %d thread(s) per wse-node, "
               "wafer memory %s (planned here, no cluster asked)\n",
               file, whole, groups, share, threads, w);
        if (ps.parts > 1) {
            char h1[32];
            const char *piece = vol ? "slab" : "stripe";
            printf("spatial partitions: each sample in %d %ss of %s%s, one per wse-node (%d "
                   "wse-nodes); the memory below is per %s, %s of it halo %s and their "
                   "buffers\n", ps.parts, piece,
                   ps.parts * m->input.d[1] != full->model->input.d[1] ? "at most " : "", in,
                   replicas, piece,
                   units_format_size(spatial_extra_bytes(&ps.sp, share), h1, sizeof(h1)),
                   vol ? "planes" : "rows");
        }
        if (ps.rows) {
            char r[64];
            model_shape_str(&m->input, r, sizeof(r));
            printf("rows as depth: the image does not fit as it is; its 2-D layers run as 3-D "
                   "ones over %s (convolutions in bands of rows, their backward passes in two), "
                   "as the layers below show\n", r);
        }
        printf("  %-18s %14s %6s %20s %26s\n", "mode", "per replica", "fits", "largest batch",
               vol ? "largest cube input" : "largest square input");
        for (int i = 0; i < 2; i++) {
            const offline_fit *o = &fits[i];
            char side[48] = "not an image";
            if (o->side == 0)
                snprintf(side, sizeof(side), "none");
            else if (o->side > 0 && vol)
                snprintf(side, sizeof(side), "%lldx%dx%dx%d", (long long)m->input.d[0], o->side,
                         o->side, o->side);
            else if (o->side > 0)
                snprintf(side, sizeof(side), "%lldx%dx%d", (long long)m->input.d[0], o->side, o->side);
            else if (ps.parts > 1)
                snprintf(side, sizeof(side), "(of the whole job)");
            printf("  %-18s %14s %6s %20d %26s\n", offline__mode_name(o->mode),
                   units_format_size(o->need, n, sizeof(n)), o->need <= wafer ? "yes" : "no",
                   o->batch, side);
        }
        if (pick->aspect.ndim) {
            char a[64];
            model_shape_str(&pick->aspect, a, sizeof(a));
            printf("largest input of the job's aspect in %s: %s\n", offline__mode_name(pick->mode), a);
        }
        if (part && pick->mode == APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING && pick->need <= wafer)
            printf("weight_streaming in parts: dense layers of more than %llu weights stream and "
                   "compute a slice of their rows at a time (the wafer holds parts, not whole "
                   "layers)\n", (unsigned long long)part);
        if (pick->need <= wafer && choice.micro)
            printf("mode %s: %s, in micro-batches of %llu sample(s) (train_input.micro_batch_size)"
                   "\n", spec->mode, offline__mode_name(pick->mode),
                   (unsigned long long)choice.micro);
        else if (pick->need <= wafer)
            printf("mode %s: %s\n", spec->mode, offline__mode_name(pick->mode));
        else if (pick->batch >= 1)
            printf("mode %s: %s does not fit %d sample(s) per replica; at most %d fit: lower "
                   "train_input.batch_size, raise runconfig.num_csx, or compute the share in "
                   "micro-batches (train_input.micro_batch_size = \"auto\")\n", spec->mode,
                   offline__mode_name(pick->mode), share, pick->batch);
        else {
            model half = *m; /* what bfloat16 activations would need */
            half.act_bf16 = true;
            uint64_t need_half = fit_replica_bytes(&half, 1, threads, pick->mode, states);
            char h1[32];
            printf("mode %s: %s does not fit one sample of %s: it needs a larger wafer "
                   "(--wafer-memory)%s", spec->mode, offline__mode_name(pick->mode), in,
                   pick->side > 0 ? ", or a smaller image" : "");
            if (!m->act_bf16 && need_half <= wafer)
                printf(", or [model] activation_dtype = \"bfloat16\" (needs %s)",
                       units_format_size(need_half, h1, sizeof(h1)));
            printf("\n");
        }
        char s1[32], s2[32], s3[32];
        printf("memoryx: the weights (%s)%s optimizer state take %s, at most %s "
               "on each of %zu shard(s) (runconfig.num_wgt_servers)\n",
               units_format_size((uint64_t)m->total_params * sizeof(float), s1, sizeof(s1)),
               grads ? ", their gradients and" : " and their",
               units_format_size(shard_all, s2, sizeof(s2)),
               units_format_size(shard_most, s3, sizeof(s3)), nshards);
        if (pick->need <= wafer)
            printf("%s\n", render_keep_outputs(choice.keep_outputs, choice.keep_costly));
        if (pick->need <= wafer && choice.feed_one)
            printf("%s\n", render_feed_credits(1));
        if (choice.spill) {
            char sp[32];
            printf("the bfloat16 copies of the kept outputs spill to a file in each wse-node's "
                   "--spill-dir (%s, written and read back each step): the replica fits only so\n",
                   units_format_size(choice.spilled, sp, sizeof(sp)));
        }
        model planned = *m; /* the plan's: its outputs kept or not */
        planned.keep_outputs = choice.keep_outputs;
        planned.lighten = !choice.keep_costly;
        planned.feed_one = choice.feed_one;
        planned.spill_packed = choice.spill;
        offline__table(&planned, share, choice.micro ? (int)choice.micro : share, threads);
    }
    fit_stripes_free(&ps);
    jobspec_free((jobspec *)full);
    return 0;
}
