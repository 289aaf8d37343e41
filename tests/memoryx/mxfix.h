/* What memoryx's unit tests share: a memoryx on the default loop with no
 * daemon around it (no coordinator, no links), plans made from a short list
 * of tensors, and jobs made by hand as mx.c's start and load make them,
 * whose modules report to counters here (fix_ops). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mx.h"
#include "mxjob.h"

typedef struct fix_tensor {
    const char *name;
    uint64_t rows, cols;    /* dims rows x cols; rows alone when cols is 0 */
    uint32_t shard;
    const char *init;       /* "he_normal", "xavier_uniform", "zeros", "ones" */
    bool trainable;
} fix_tensor;

typedef struct fix_spec {
    const fix_tensor *tensors;
    size_t nt;
    uint32_t shards;        /* memoryx shards, members 1.. */
    const char *optimizer;  /* "adam", "adamw", "sgd" */
    double momentum;        /* sgd */
    double max_norm;        /* max_gradient_norm; 0: no clipping */
    uint64_t chunk;         /* chunk_elems */
    uint64_t seed;
    uint64_t max_steps;
    bool bf16;              /* wire_bf16 */
    const char *model_dir;
} fix_spec;

/* The plan of spec, owned by the caller (or the job given it). Its stream
 * is every tensor forward, then the trainable ones backward in reverse. */
Appliance__Plan *fix_plan(const fix_spec *s);

extern memoryx fix_mx;
extern node fix_node;

/* Clears the memoryx the tests run in (--threads threads) and ties it to
 * fix_node on uv_default_loop. With own_jobhost its jobhost releases a job
 * as fix_release does (it records why); else as mx.c does. */
void fix_init(unsigned threads, bool own_jobhost);

extern int fix_releases;      /* jobs released through fix's jobhost */
extern char fix_why[512];     /* why the last one was */

/* The news of a job's modules (mx_job_ops), counted. */
extern const mx_job_ops fix_ops;
extern int fix_update_backs, fix_chunk_reads, fix_grads_written, fix_checkpoints;
extern uint64_t fix_grad_elems;   /* elements grad_written reported */
extern mx_ckpt_kind fix_ckpt_kind;
extern uint64_t fix_ckpt_step;
void fix_reset_news(void);

enum {
    FIX_G16 = 1,      /* trainable tensors keep a bfloat16 gradient (g16) */
    FIX_TWINS = 2,    /* the weights have their bfloat16 twin (w16) */
    FIX_TIER = 4,     /* in the disk tier's files, in dir, through window bytes */
    FIX_NOFILL = 8,   /* weights left as they are made (zeros) */
};

/* Shard `shard` of plan p (the job owns p) as mx.c's start and load make
 * it, its weights fix_value(id, i) unless FIX_NOFILL; memoryx's job, in
 * state MX_RUNNING, reporting to fix_ops. */
mx_job *fix_job(Appliance__Plan *p, uint32_t shard, unsigned flags, const char *dir,
                uint64_t window);

/* Ends memoryx's job (JobEnd) and runs the loop until it is freed. */
void fix_end(void);

/* A value in [-1, 1) of (stream, i). */
float fix_value(uint64_t stream, uint64_t i);

/* Runs the loop until it has nothing left to do. */
void fix_run(void);

/* A new directory (len bytes for its path), and one removed with its files. */
void fix_tmpdir(char *out, size_t len);
void fix_rmdir(const char *dir);

/* Every element of a and b has the same bits. */
bool fix_same(const float *a, const float *b, size_t n);
