/* appliance-submit: submit a job, list the cluster. One request per run over
 * an authenticated connection to the coordinator. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "conn.h"
#include "log.h"
#include "msg.h"
#include "node.h"
#include "units.h"

/* Exit codes (docs/cli.md). */
enum { EXIT_OK = 0, EXIT_USAGE = 2, EXIT_REFUSED = 3, EXIT_FAILED = 4, EXIT_CANCELLED = 5,
       EXIT_UNREACHABLE = 6 };

#define JOB_FILE_MAX (256u * 1024) /* bytes of job file accepted */

typedef struct client {
    bool cluster;             /* --cluster */
    bool json;                /* --json */
    bool plan;                /* --plan */
    const char *job_path;
    char *job_text;
    int exit_code;
    bool answered;
    char job_id[40];          /* once accepted */
    uint64_t eval_seen;       /* the last evaluation printed */
    auth_secret secret;
    conn_config cfg;
} client;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: appliance-submit [OPTIONS] JOB.toml    submit a job and follow it\n"
            "       appliance-submit --cluster [--json]    list the cluster's members\n"
            "\n"
            "Options:\n"
            "  --coordinator HOST:PORT  the coordinator (env APPLIANCE_COORDINATOR)\n"
            "  --secret-file PATH       cluster secret (env APPLIANCE_SECRET_FILE)\n"
            "  --json                   print the result as one JSON object on stdout\n"
            "  --plan                   compile the job and print its plan, do not run it\n"
            "  --help                   show this text\n"
            "\n"
            "Exit codes: 0 done, 2 usage, 3 refused, 4 failed, 5 cancelled, 6 unreachable.\n");
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static const char *state_name(Appliance__MemberState s)
{
    switch (s) {
    case APPLIANCE__MEMBER_STATE__MEMBER_ALIVE: return "alive";
    case APPLIANCE__MEMBER_STATE__MEMBER_BUSY: return "busy";
    case APPLIANCE__MEMBER_STATE__MEMBER_LOST: return "lost";
    case APPLIANCE__MEMBER_STATE__MEMBER_GONE: return "gone";
    default: return "unknown";
    }
}

static void print_cluster(client *cl, const Appliance__ClusterInfo *info)
{
    if (cl->json) {
        printf("{\"members\": [");
        for (size_t i = 0; i < info->n_members; i++) {
            const Appliance__Member *m = info->members[i];
            printf("%s{\"id\": %u, \"role\": ", i ? ", " : "", m->member_id);
            json_string(stdout, node_role_name(m->role));
            printf(", \"name\": ");
            json_string(stdout, m->name);
            printf(", \"state\": \"%s\", \"addr\": ", state_name(m->state));
            json_string(stdout, m->advertised_addr);
            printf(", \"wafer_memory\": %llu, \"memory\": %llu, \"threads\": %u, "
                   "\"last_seen_ms_ago\": %llu, \"job\": ",
                   (unsigned long long)m->wafer_memory, (unsigned long long)m->memory, m->threads,
                   (unsigned long long)m->last_seen_ms_ago);
            json_string(stdout, m->job_id);
            printf("}");
        }
        printf("]}\n");
        return;
    }
    printf("%-4s %-12s %-20s %-8s %-22s %-12s %s\n", "ID", "ROLE", "NAME", "STATE", "ADDRESS",
           "CAPACITY", "JOB");
    for (size_t i = 0; i < info->n_members; i++) {
        const Appliance__Member *m = info->members[i];
        char cap[32] = "-";
        if (m->wafer_memory)
            units_format_size(m->wafer_memory, cap, sizeof(cap));
        else if (m->memory)
            units_format_size(m->memory, cap, sizeof(cap));
        printf("%-4u %-12s %-20s %-8s %-22s %-12s %s\n", m->member_id, node_role_name(m->role),
               m->name, state_name(m->state), m->advertised_addr, cap,
               m->job_id[0] ? m->job_id : "-");
    }
}

static const char *job_state_name(Appliance__JobState s)
{
    switch (s) {
    case APPLIANCE__JOB_STATE__JOB_QUEUED: return "queued";
    case APPLIANCE__JOB_STATE__JOB_RUNNING: return "running";
    case APPLIANCE__JOB_STATE__JOB_DONE: return "done";
    case APPLIANCE__JOB_STATE__JOB_FAILED: return "failed";
    case APPLIANCE__JOB_STATE__JOB_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

static void print_final(client *cl, const Appliance__JobStatus *st)
{
    if (cl->json) {
        printf("{\"job_id\": ");
        json_string(stdout, st->job_id);
        printf(", \"state\": \"%s\", \"steps\": %llu, \"max_steps\": %llu, \"final_loss\": %.9g, "
               "\"samples_per_sec\": %.3f, \"elapsed_sec\": %.3f, \"model_dir\": ",
               job_state_name(st->state), (unsigned long long)st->step,
               (unsigned long long)st->max_steps, st->loss, st->samples_per_sec, st->elapsed_sec);
        json_string(stdout, st->model_dir);
        printf(", \"message\": ");
        json_string(stdout, st->message);
        if (st->eval_accuracy >= 0 || st->eval_iou >= 0)
            printf(", \"eval_step\": %llu, \"eval_loss\": %.9g, \"eval_accuracy\": %.9g, "
                   "\"eval_iou\": %.9g",
                   (unsigned long long)st->eval_step, st->eval_loss, st->eval_accuracy, st->eval_iou);
        printf("}\n");
        return;
    }
    if (st->state == APPLIANCE__JOB_STATE__JOB_DONE) {
        printf("%s done: %llu steps in %.1f s, final loss %.6f, %.1f samples/s\n", st->job_id,
               (unsigned long long)st->step, st->elapsed_sec, st->loss, st->samples_per_sec);
        if (st->eval_accuracy >= 0)
            printf("test accuracy %.2f%% (eval loss %.4f at step %llu)\n", 100 * st->eval_accuracy,
                   st->eval_loss, (unsigned long long)st->eval_step);
        if (st->eval_iou >= 0)
            printf("test IoU %.4f (eval loss %.4f at step %llu)\n", st->eval_iou, st->eval_loss,
                   (unsigned long long)st->eval_step);
        printf("checkpoints in %s\n", st->model_dir);
    }
    if (st->state != APPLIANCE__JOB_STATE__JOB_DONE)
        fprintf(stderr, "%s %s at step %llu: %s\n", st->job_id, job_state_name(st->state),
                (unsigned long long)st->step, st->message);
}

static void print_plan(client *cl, const Appliance__Plan *p)
{
    static const char *const modes[] = {"auto", "pipelined", "weight_streaming"};
    printf("job %s: mode %s, %zu replica(s), global batch %u, %llu steps, %llu parameters\n",
           p->file_name, modes[p->mode < 3 ? p->mode : 0], p->n_replicas, p->global_batch,
           (unsigned long long)p->max_steps, (unsigned long long)p->total_params);
    printf("\n%-24s %-18s %-16s %12s %14s %14s\n", "LAYER", "TYPE", "OUTPUT", "PARAMS",
           "ACT B/SAMPLE", "FLOPS/SAMPLE");
    for (size_t i = 0; i < p->n_layers; i++) {
        const Appliance__PlanLayer *l = p->layers[i];
        char shape[64] = "";
        for (size_t d = 0; d < l->n_out_shape; d++)
            snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%llu", d ? "x" : "",
                     (unsigned long long)l->out_shape[d]);
        printf("%-24s %-18s %-16s %12llu %14llu %14llu\n", l->name, l->type, shape,
               (unsigned long long)l->params, (unsigned long long)l->act_bytes,
               (unsigned long long)l->flops);
    }
    printf("\n%-8s %-8s %-12s %-14s %-14s\n", "REPLICA", "MEMBER", "BATCH", "NEEDS", "WAFER");
    for (size_t i = 0; i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i];
        char a[32], b[32];
        printf("%-8u %-8u %-12u %-14s %-14s\n", r->index, r->member_id, r->batch,
               units_format_size(r->memory_needed, a, sizeof(a)),
               units_format_size(r->wafer_memory, b, sizeof(b)));
    }
}

static void on_ready(conn *c)
{
    client *cl = c->data;
    if (cl->cluster) {
        Appliance__ClusterQuery q = APPLIANCE__CLUSTER_QUERY__INIT;
        ENVELOPE(env, cluster_query, CLUSTER_QUERY, &q);
        conn_send_msg(c, &env);
        return;
    }
    char cwd[PATH_MAX];
    Appliance__JobSubmit s = APPLIANCE__JOB_SUBMIT__INIT;
    s.file_name = (char *)cl->job_path;
    s.toml = cl->job_text;
    s.follow = true;
    s.plan_only = cl->plan;
    s.base_dir = getcwd(cwd, sizeof(cwd)) ? cwd : "";
    ENVELOPE(env, job_submit, JOB_SUBMIT, &s);
    conn_send_msg(c, &env);
}

static void on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    client *cl = c->data;
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_CLUSTER_INFO:
        print_cluster(cl, env->cluster_info);
        cl->exit_code = EXIT_OK;
        break;
    case APPLIANCE__ENVELOPE__MSG_ERROR:
        fprintf(stderr, "appliance-submit: %s\n", env->error->message);
        cl->exit_code = EXIT_REFUSED;
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_ACCEPTED:
        if (cl->plan) {
            print_plan(cl, env->job_accepted->plan);
            cl->exit_code = EXIT_OK;
            break;
        }
        snprintf(cl->job_id, sizeof(cl->job_id), "%s", env->job_accepted->job_id);
        if (!cl->json)
            printf("%s accepted as %s: %zu replica(s), global batch %u, %llu steps\n", cl->job_path,
                   cl->job_id, env->job_accepted->plan->n_replicas,
                   env->job_accepted->plan->global_batch,
                   (unsigned long long)env->job_accepted->plan->max_steps);
        fflush(stdout);
        return; /* progress follows */
    case APPLIANCE__ENVELOPE__MSG_JOB_STATUS: {
        const Appliance__JobStatus *st = env->job_status;
        bool final = st->state != APPLIANCE__JOB_STATE__JOB_RUNNING &&
                     st->state != APPLIANCE__JOB_STATE__JOB_QUEUED;
        if (!final) {
            if (!cl->json && st->eval_step != cl->eval_seen && (st->eval_accuracy >= 0 || st->eval_iou >= 0)) {
                cl->eval_seen = st->eval_step;
                if (st->eval_iou >= 0)
                    printf("%s eval at step %llu: loss %.6f, IoU %.4f\n", st->job_id,
                           (unsigned long long)st->eval_step, st->eval_loss, st->eval_iou);
                else
                    printf("%s eval at step %llu: loss %.6f, accuracy %.4f\n", st->job_id,
                           (unsigned long long)st->eval_step, st->eval_loss, st->eval_accuracy);
                fflush(stdout);
            } else if (!cl->json && st->step == 0) {
                printf("%s %s\n", st->job_id, st->phase);
                fflush(stdout);
            } else if (!cl->json) {
                printf("%s step %llu/%llu loss %.6f  %.1f samples/s  %.1f s  [%s]\n", st->job_id,
                       (unsigned long long)st->step, (unsigned long long)st->max_steps, st->loss,
                       st->samples_per_sec, st->elapsed_sec, st->phase);
                fflush(stdout);
            }
            return;
        }
        print_final(cl, st);
        cl->exit_code = st->state == APPLIANCE__JOB_STATE__JOB_DONE        ? EXIT_OK
                        : st->state == APPLIANCE__JOB_STATE__JOB_CANCELLED ? EXIT_CANCELLED
                                                                          : EXIT_FAILED;
        break;
    }
    default:
        fprintf(stderr, "appliance-submit: unexpected %s from the coordinator\n",
                frame_msg_name(env->msg_case));
        cl->exit_code = EXIT_FAILED;
        break;
    }
    cl->answered = true;
    conn_close(c, 0, "done");
}

static void on_close(conn *c, int err, const char *reason)
{
    client *cl = c->data;
    if (!cl->answered) {
        fprintf(stderr, "appliance-submit: coordinator at %s: %s\n", c->peer_addr, reason);
        cl->exit_code = EXIT_UNREACHABLE;
    }
}

static const conn_ops ops = {.on_ready = on_ready, .on_frame = on_frame, .on_close = on_close};

static char *read_job_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "appliance-submit: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(JOB_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, JOB_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    if (n > JOB_FILE_MAX) {
        fprintf(stderr, "appliance-submit: %s: larger than %u bytes\n", path, JOB_FILE_MAX);
        free(buf);
        return NULL;
    }
    if (memchr(buf, 0, n)) {
        fprintf(stderr, "appliance-submit: %s: contains a NUL byte\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

int main(int argc, char **argv)
{
    static client cl;
    const char *coordinator = getenv("APPLIANCE_COORDINATOR");
    const char *secret_file = getenv("APPLIANCE_SECRET_FILE");
    enum { O_COORD = 256, O_SECRET, O_JSON, O_CLUSTER, O_PLAN, O_HELP };
    static const struct option longopts[] = {
        {"coordinator", required_argument, NULL, O_COORD},
        {"secret-file", required_argument, NULL, O_SECRET},
        {"json", no_argument, NULL, O_JSON},
        {"cluster", no_argument, NULL, O_CLUSTER},
        {"plan", no_argument, NULL, O_PLAN},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (o) {
        case O_COORD: coordinator = optarg; break;
        case O_SECRET: secret_file = optarg; break;
        case O_JSON: cl.json = true; break;
        case O_CLUSTER: cl.cluster = true; break;
        case O_PLAN: cl.plan = true; break;
        case O_HELP: usage(stdout); return EXIT_OK;
        default:
            fprintf(stderr, "appliance-submit: unknown or incomplete option \"%s\" (see --help)\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (!cl.cluster) {
        if (optind + 1 != argc) {
            usage(stderr);
            return EXIT_USAGE;
        }
        cl.job_path = argv[optind];
        cl.job_text = read_job_file(cl.job_path);
        if (!cl.job_text)
            return EXIT_USAGE;
    } else if (optind != argc) {
        fprintf(stderr, "appliance-submit: --cluster takes no job file\n");
        return EXIT_USAGE;
    }
    if (!coordinator || !secret_file) {
        fprintf(stderr, "appliance-submit: give --coordinator and --secret-file, or set "
                        "APPLIANCE_COORDINATOR and APPLIANCE_SECRET_FILE (deploy/local/appliance-up "
                        "writes them to RUNDIR/env)\n");
        return EXIT_USAGE;
    }
    char err[512], host[256];
    int port;
    if (conn_addr_parse(coordinator, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "appliance-submit: bad coordinator address \"%s\": expected HOST:PORT\n",
                coordinator);
        return EXIT_USAGE;
    }
    if (auth_secret_load(&cl.secret, secret_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "appliance-submit: %s\n", err);
        return EXIT_USAGE;
    }
    log_init("appliance-submit", LOG_WARN);
    conn_config_default(&cl.cfg, &cl.secret, APPLIANCE__ROLE__ROLE_CLIENT, "appliance-submit");
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    cl.exit_code = EXIT_UNREACHABLE;
    if (!conn_connect(loop, host, port, &cl.cfg, &ops, &cl))
        return EXIT_FAILED;
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    free(cl.job_text);
    auth_secret_clear(&cl.secret);
    return cl.exit_code;
}
