/* A job file (job.toml) read into a checked structure. Section and key names
 * follow the Cerebras Model Zoo params files; every key has a type and a
 * default; an unknown key, a wrong type or a value out of range is an error
 * "FILE:LINE:COL: ..." that names it. docs/job-file.md documents each key. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "jobspec_sparsity.h"
#include "model.h"
#include "optim.h"
#include "toml.h"

#define JOBSPEC_AUTO (-1) /* a key given as "auto" */

typedef struct jobspec_input {
    bool present;                 /* the section was given */
    char data_processor[64];      /* "synthetic_classification", "mnist", ... */
    char data_dir[PATH_MAX];      /* resolved against the submit directory */
    int64_t batch_size;           /* effective (global) batch, split over num_csx */
    int64_t micro_batch_size;     /* train: samples a replica computes at once, its share in
                                   * micro-batches; 0: the whole share; JOBSPEC_AUTO: the plan's
                                   * choice, the largest that fits */
    bool shuffle;
    int64_t shuffle_seed;
    int64_t num_classes;
    int64_t num_samples;          /* synthetic data sets: size of the set */
    double noise;                 /* synthetic data sets: noise around class centres */
    bool random_flip_horizontal;  /* augmentation: mirror left-right, seeded */
    bool random_flip_vertical;    /* augmentation: mirror top-bottom, seeded */
    int64_t random_crop_padding;  /* random crops from the image padded this much; 0: none */
    /* The Model Zoo's keys (PlanInput's fields of the same names) */
    char normalize_data_method[16]; /* "zero_one" (default), "zero_centered", "standard_score",
                                     * "none" */
    bool augment_data;            /* the processor's own augmentation */
    double train_test_split;      /* fraction that trains, of a set without evaluation files */
    int64_t class_id;             /* the class a binary processor reads; -1: none */
    char echo_type[24];           /* SkmDataProcessor: "echo1", "echo2", "echo1-echo2-mc",
                                   * "root_sum_of_squares" */
    bool aggregate_cartilage;     /* SkmDataProcessor: six tissues into four (default true) */
} jobspec_input;

/* How an input's samples travel (sample.h): every data set of stored images
 * (MNIST, PNG, synthetic images of 8-bit pixels) as its 8-bit values, only
 * synthetic_classification's Gaussian features as float32; labels as bytes
 * when every class is below 256. A job's batches, training and eval, all
 * travel in the encoding both of its inputs can take: its model's
 * input_unorm8 and labels_u8. */
void jobspec_input_encoding(const jobspec_input *in, bool *input_unorm8, bool *labels_u8);

typedef struct jobspec {
    char source[256];             /* the job file's name, for messages */
    /* [runconfig] */
    int64_t max_steps;
    int64_t log_steps;
    int64_t checkpoint_steps;     /* 0: only at the end */
    bool save_initial_checkpoint;
    int64_t eval_frequency;
    char model_dir[PATH_MAX];     /* resolved against the submit directory */
    char checkpoint_path[PATH_MAX]; /* resume from this checkpoint file; "" for a fresh start */
    int64_t seed;
    int64_t num_csx;              /* wse-node replicas */
    int64_t min_num_csx;          /* recovery may go on with this few (0: num_csx) */
    int64_t max_num_restarts;     /* recoveries after faults before the job fails */
    int64_t step_timeout_seconds; /* no step (or start-up progress) this long: a fault; 0: none;
                                   * JOBSPEC_AUTO (not given): the plan's (planner_step_timeout_ms) */
    int64_t num_workers_per_csx;  /* input workers feeding each replica */
    int64_t num_act_servers;      /* the Model Zoo's name for them: wins when given (0: not) */
    int64_t num_wgt_servers;      /* memoryx shards */
    int64_t swarmx_fanout;
    bool swarmx_relay;            /* a lone replica streams through a swarmx even with one shard */
    char mode[32];                /* "auto", "pipelined", "weight_streaming" */
    char job_priority[4];         /* "p1" (first) to "p3" */
    int64_t spatial_partitions;   /* stripes each sample is split into, over as many wse-nodes
                                   * (num_csx counts wse-nodes: replicas x stripes); JOBSPEC_AUTO:
                                   * the plan's choice, 1 when a sample fits a wafer */
    bool sync_batchnorm;          /* batch norm's statistics over every replica's samples */
    /* [train_input], [eval_input] */
    jobspec_input train;
    jobspec_input eval;
    /* [optimizer] */
    char optimizer_type[16];      /* "sgd", "adam", "adamw" (given in any case) */
    double learning_rate;         /* base learning rate (with a schedule: its first rate) */
    /* learning_rate as the Model Zoo's schedule (a table) or list of them,
     * run one after another; 0 segments: the number above and lr_schedule */
    size_t n_lr_segments;
    optim_segment lr_segments[OPTIM_MAX_SEGMENTS];
    char lr_schedule[16];         /* "constant", "cosine", "step" (after the warm-up) */
    int64_t warmup_steps;         /* linear warm-up, 0: none */
    int64_t decay_steps;          /* cosine: steps to reach end_learning_rate; 0: max_steps */
    double end_learning_rate;     /* cosine */
    int64_t step_size;            /* step: steps between decays */
    double gamma;                 /* step: factor per decay */
    double momentum;              /* sgd */
    double dampening;             /* sgd */
    bool nesterov;                /* sgd */
    double beta1, beta2, eps;     /* adam, adamw */
    double weight_decay;          /* L2 (sgd, adam) or decoupled (adamw); also weight_decay_rate */
    bool correct_bias;            /* adam, adamw: bias correction (default true) */
    double loss_scaling_factor;   /* accepted, no effect (float32 needs no loss scaling): >= 1,
                                   * or 0 for "dynamic" */
    double max_gradient_norm;     /* 0: no clipping */
    /* [sparsity] (jobspec_sparsity.h): which tensors are pruned, how far,
     * and how their masks change; present false: every tensor dense */
    jobspec_sparsity sparsity;
    /* [model] */
    model *model;                 /* owned */
    /* The document the job was read from (owned): its [model] table is
     * compiled again for other inputs (stripes, larger images) without
     * reading the text again (jobspec_model_table). */
    toml_value *doc;
    char *text;                   /* the job file's text (owned): what a plan carries to
                                   * the daemons that compile the model again */
} jobspec;

/* The syntaxes of a job file: TOML, or the Model Zoo's params.yaml. */
typedef enum jobspec_format {
    JOBSPEC_FORMAT_AUTO, /* by its name, else by its text (jobspec_format_of) */
    JOBSPEC_FORMAT_TOML,
    JOBSPEC_FORMAT_YAML,
} jobspec_format;

/* The format of the job file `name` with this text: by the name's
 * extension (.toml; .yaml or .yml), else TOML when its first line that is
 * not blank or a comment is a TOML header ("[...") or assignment
 * ("key = ..."), else YAML. A job file that is valid in one syntax is
 * never read as the other: a TOML file cannot start with "key:", nor a
 * YAML job (a mapping) with "[" or "key =". */
jobspec_format jobspec_format_of(const char *name, const char *text, size_t len);

/* "toml" or "yaml"; for messages and option values. NULL parses "auto". */
const char *jobspec_format_name(jobspec_format f);
int jobspec_format_parse(const char *s, jobspec_format *out);

/* Reads a job file from text, in the syntax format says. base_dir resolves
 * relative paths (the submitter's working directory). Returns NULL with
 * "FILE:LINE:COL: message" in err. Free with jobspec_free. */
jobspec *jobspec_parse_as(const char *text, size_t len, const char *name, jobspec_format format,
                          const char *base_dir, char *err, size_t errlen);
/* jobspec_parse_as with JOBSPEC_FORMAT_AUTO: what every daemon that
 * compiles the job again does, so that it reads what the submitter read. */
jobspec *jobspec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                       char *err, size_t errlen);
void jobspec_free(jobspec *j);

/* The [model] table of the job's document: what model_compile_as and
 * spatial_compile compile again. */
const toml_value *jobspec_model_table(const jobspec *j);

/* The stripes per sample a job asks for: spatial_partitions, or 1 for
 * "auto" (which the plan resolves). */
int64_t jobspec_parts(const jobspec *j);
