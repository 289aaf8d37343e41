/* appliance-submit: submit a job and follow it; status, cancel, logs and
 * list of the coordinator's jobs; the cluster's members. One request per
 * run over an authenticated connection to the coordinator. */
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
#include "offline.h"
#include "render.h"
#include "units.h"

/* Exit codes (docs/cli.md). */
enum { EXIT_OK = 0, EXIT_USAGE = 2, EXIT_REFUSED = 3, EXIT_FAILED = 4, EXIT_CANCELLED = 5,
       EXIT_UNREACHABLE = 6 };

/* Bytes of job file sent at most: what fits in a frame header. The
 * coordinator has its own limit (max_job_file) and says so when it is less. */
#define JOB_FILE_MAX (960u * 1024)

enum command { CMD_SUBMIT, CMD_PLAN, CMD_CLUSTER, CMD_STATUS, CMD_CANCEL, CMD_LOGS, CMD_LIST };

typedef struct client {
    enum command cmd;
    bool json;                /* --json */
    bool detach;              /* --detach */
    bool follow;              /* --follow (status, logs) */
    bool tty;                 /* stdout is a terminal: a live progress line */
    const char *arg;          /* the job file, or a job id */
    char *job_text;
    int exit_code;
    bool answered;            /* the request got its final answer */
    char job_id[40];          /* once accepted */
    bool eval_shown;          /* an evaluation was printed: eval_seen is its step */
    uint64_t eval_seen;       /* the last evaluation printed */
    uint64_t line_step;       /* the step and phase of the last progress line printed */
    char line_phase[32];      /* (not on a terminal: a line the same as the last is not
                                 printed again, as around an evaluation) */
    bool live;                /* a live progress line is on the screen */
    conn *c;
    uv_signal_t sigint;
    uv_timer_t ask;           /* prints the question */
    uv_tty_t in;              /* the answer to the Ctrl-C question */
    bool asking;
    char inbuf[64];
    auth_secret secret;       /* the cluster secret, or the user's key */
    conn_config cfg;
    uint8_t *list;            /* the JobList frames so far, packed one after the other */
    size_t list_len;
} client;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: appliance-submit [OPTIONS] JOB.toml   submit a job and follow it to its end\n"
            "       appliance-submit --plan JOB.toml      compile the job, print its plan\n"
            "       appliance-submit --plan --wafer-memory SIZE JOB.toml\n"
            "                                             what fits a wafer of SIZE, without a cluster\n"
            "       appliance-submit status [JOB]         a job's status (default: the newest)\n"
            "       appliance-submit cancel JOB           stop a queued or running job\n"
            "       appliance-submit logs JOB             a job's log\n"
            "       appliance-submit list                 every job the coordinator knows\n"
            "       appliance-submit --cluster            the cluster's members\n"
            "\n"
            "Options:\n"
            "  --coordinator HOST:PORT  the coordinator (env APPLIANCE_COORDINATOR)\n"
            "  --secret-file PATH       cluster secret (env APPLIANCE_SECRET_FILE)\n"
            "  --user NAME              authenticate as a user of the coordinator's users file\n"
            "                           (env APPLIANCE_USER); sees only that user's jobs\n"
            "  --key-file PATH          that user's key (env APPLIANCE_KEY_FILE)\n"
            "  --insecure               no secret, for a cluster started with --insecure\n"
            "                           (env APPLIANCE_INSECURE=1)\n"
            "  --wafer-memory SIZE      with --plan: plan for wse-nodes of SIZE, here, without a\n"
            "                           cluster (the largest batch and square input that fit)\n"
            "  --threads N              with --wafer-memory: threads of each wse-node (default 1)\n"
            "  --spill-room SIZE        with --wafer-memory: the room of each wse-node's\n"
            "                           --spill-dir (default: what TMPDIR, or /tmp, has free;\n"
            "                           0: none)\n"
            "  --format toml|yaml       the job file's syntax (default: by its name, .yaml or\n"
            "                           .yml for a Model Zoo params.yaml, else by its text)\n"
            "  --json                   JSON on stdout (submit: one object at the end)\n"
            "  --detach                 submit: print the job id and return at once\n"
            "  --follow                 status, logs: keep following until the job ends\n"
            "  --help                   show this text\n"
            "\n"
            "Ctrl-C while following a job asks whether to cancel it or detach.\n"
            "Exit codes: 0 done (or answered), 2 usage, 3 refused, 4 failed, 5 cancelled,\n"
            "6 coordinator unreachable.\n");
}

static int exit_of(Appliance__JobState s)
{
    switch (s) {
    case APPLIANCE__JOB_STATE__JOB_FAILED: return EXIT_FAILED;
    case APPLIANCE__JOB_STATE__JOB_CANCELLED: return EXIT_CANCELLED;
    default: return EXIT_OK;
    }
}

static void finish(client *cl, int code)
{
    cl->exit_code = code;
    cl->answered = true;
    if (cl->asking) {
        uv_read_stop((uv_stream_t *)&cl->in);
        cl->asking = false;
    }
    conn_close(cl->c, 0, "done");
}

static void send_cancel(client *cl)
{
    Appliance__JobCancel q = APPLIANCE__JOB_CANCEL__INIT;
    q.job_id = cl->job_id;
    ENVELOPE(env, job_cancel, JOB_CANCEL, &q);
    conn_send_msg(cl->c, &env);
}

/* ---- Ctrl-C while following ---- */

static void on_ask(uv_timer_t *t)
{
    client *cl = t->data;
    if (!cl->asking)
        return;
    render_progress_done(cl->tty && cl->live);
    cl->live = false;
    fprintf(stderr, "%s: [c]ancel the job, [d]etach (it goes on), or Enter to keep following? ",
            cl->job_id);
}

static void on_answer_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    client *cl = h->data;
    *b = uv_buf_init(cl->inbuf, sizeof(cl->inbuf));
}

static void on_answer(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    client *cl = s->data;
    uv_read_stop(s);
    cl->asking = false;
    char a = n > 0 ? b->base[0] : 'd';
    if (a == 'c' || a == 'C') {
        fprintf(stderr, "cancelling %s\n", cl->job_id);
        send_cancel(cl);
    } else if (a == 'd' || a == 'D' || n < 0) {
        fprintf(stderr, "detached from %s; it goes on (appliance-submit status %s)\n", cl->job_id,
                cl->job_id);
        finish(cl, EXIT_OK);
    }
}

static void on_sigint(uv_signal_t *s, int sig)
{
    client *cl = s->data;
    if (!cl->job_id[0] || cl->answered || cl->cmd != CMD_SUBMIT) {
        fprintf(stderr, "\ninterrupted\n");
        exit(130);
    }
    if (cl->asking || !isatty(0)) { /* a second Ctrl-C, or nobody to ask */
        render_progress_done(cl->tty && cl->live);
        cl->live = false;
        fprintf(stderr, "\ndetached from %s; it goes on (appliance-submit status %s)\n", cl->job_id,
                cl->job_id);
        finish(cl, EXIT_OK);
        return;
    }
    if (!uv_is_active((uv_handle_t *)&cl->in) &&
        uv_read_start((uv_stream_t *)&cl->in, on_answer_alloc, on_answer) == 0) {
        cl->asking = true;
        /* The terminal drops what is written as it delivers the signal:
         * ask a moment later. */
        uv_timer_start(&cl->ask, on_ask, 100, 0);
    }
}
/* ---- the conversation ---- */

static void on_ready(conn *c)
{
    client *cl = c->data;
    switch (cl->cmd) {
    case CMD_CLUSTER: {
        Appliance__ClusterQuery q = APPLIANCE__CLUSTER_QUERY__INIT;
        ENVELOPE(env, cluster_query, CLUSTER_QUERY, &q);
        conn_send_msg(c, &env);
        return;
    }
    case CMD_SUBMIT:
    case CMD_PLAN: {
        char cwd[PATH_MAX];
        Appliance__JobSubmit s = APPLIANCE__JOB_SUBMIT__INIT;
        s.file_name = (char *)cl->arg;
        s.toml = cl->job_text;
        s.follow = !cl->detach;
        s.plan_only = cl->cmd == CMD_PLAN;
        s.base_dir = getcwd(cwd, sizeof(cwd)) ? cwd : "";
        ENVELOPE(env, job_submit, JOB_SUBMIT, &s);
        conn_send_msg(c, &env);
        return;
    }
    case CMD_STATUS: {
        Appliance__JobStatusQuery q = APPLIANCE__JOB_STATUS_QUERY__INIT;
        q.job_id = (char *)(cl->arg ? cl->arg : "");
        q.follow = cl->follow;
        ENVELOPE(env, job_status_query, JOB_STATUS_QUERY, &q);
        conn_send_msg(c, &env);
        return;
    }
    case CMD_CANCEL: {
        snprintf(cl->job_id, sizeof(cl->job_id), "%s", cl->arg);
        send_cancel(cl);
        return;
    }
    case CMD_LOGS: {
        Appliance__JobLogQuery q = APPLIANCE__JOB_LOG_QUERY__INIT;
        q.job_id = (char *)cl->arg;
        q.follow = cl->follow;
        ENVELOPE(env, job_log_query, JOB_LOG_QUERY, &q);
        conn_send_msg(c, &env);
        return;
    }
    case CMD_LIST: {
        Appliance__JobListQuery q = APPLIANCE__JOB_LIST_QUERY__INIT;
        ENVELOPE(env, job_list_query, JOB_LIST_QUERY, &q);
        conn_send_msg(c, &env);
        return;
    }
    }
}

/* A status while following (submit, status --follow). */
static void on_status(client *cl, const Appliance__JobStatus *st)
{
    bool ended = st->state != APPLIANCE__JOB_STATE__JOB_RUNNING &&
                 st->state != APPLIANCE__JOB_STATE__JOB_QUEUED;
    bool following = cl->cmd == CMD_SUBMIT || (cl->cmd == CMD_STATUS && cl->follow);
    if (!following || ended) {
        render_progress_done(cl->tty && cl->live);
        cl->live = false;
        if (cl->cmd == CMD_STATUS && !cl->json && !ended)
            render_progress(st, false);
        else if (cl->cmd == CMD_STATUS && cl->json) {
            render_status_json(st);
            printf("\n");
        } else
            render_final(st, cl->json);
        finish(cl, exit_of(st->state));
        return;
    }
    if (cl->json)
        return; /* one object at the end */
    if ((!cl->eval_shown || st->eval_step != cl->eval_seen) &&
        (st->eval_accuracy >= 0 || st->eval_iou >= 0)) {
        cl->eval_shown = true;
        cl->eval_seen = st->eval_step;
        render_progress_done(cl->tty && cl->live);
        cl->live = false;
        if (st->eval_iou >= 0)
            printf("%s eval at step %llu: loss %.6f, IoU %.4f\n", st->job_id,
                   (unsigned long long)st->eval_step, st->eval_loss, st->eval_iou);
        else
            printf("%s eval at step %llu: loss %.6f, accuracy %.4f\n", st->job_id,
                   (unsigned long long)st->eval_step, st->eval_loss, st->eval_accuracy);
    }
    if (cl->asking)
        return; /* the question stays on the screen */
    if (!cl->tty && st->state == APPLIANCE__JOB_STATE__JOB_RUNNING && st->step == cl->line_step &&
        strcmp(st->phase, cl->line_phase) == 0)
        return;
    cl->line_step = st->step;
    snprintf(cl->line_phase, sizeof(cl->line_phase), "%s", st->phase);
    render_progress(st, cl->tty);
    cl->live = cl->tty;
}

static void on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    client *cl = c->data;
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_CLUSTER_INFO:
        render_cluster(env->cluster_info, cl->json);
        finish(cl, EXIT_OK);
        return;
    case APPLIANCE__ENVELOPE__MSG_ERROR:
        render_progress_done(cl->tty && cl->live);
        fprintf(stderr, "appliance-submit: %s\n", env->error->message);
        finish(cl, cl->cmd == CMD_STATUS || cl->cmd == CMD_LOGS || cl->cmd == CMD_CANCEL
                       ? EXIT_USAGE
                       : EXIT_REFUSED);
        return;
    case APPLIANCE__ENVELOPE__MSG_JOB_ACCEPTED:
        if (cl->cmd == CMD_PLAN) {
            if (!env->job_accepted->plan) {
                fprintf(stderr, "appliance-submit: the coordinator accepted the job without a plan\n");
                finish(cl, EXIT_FAILED);
                return;
            }
            render_plan(env->job_accepted->plan);
            finish(cl, EXIT_OK);
            return;
        }
        snprintf(cl->job_id, sizeof(cl->job_id), "%s", env->job_accepted->job_id);
        if (cl->detach) {
            if (cl->json)
                printf("{\"job_id\": \"%s\"}\n", cl->job_id);
            else
                printf("%s\n", cl->job_id);
            finish(cl, EXIT_OK);
        } else if (!cl->json) {
            printf("%s accepted as %s\n", cl->arg, cl->job_id);
            fflush(stdout);
        }
        return;
    case APPLIANCE__ENVELOPE__MSG_JOB_STATUS:
        on_status(cl, env->job_status);
        return;
    case APPLIANCE__ENVELOPE__MSG_JOB_LIST: {
        /* A long list comes in several frames; packed protobuf messages
         * concatenate into one whose repeated fields are joined. */
        size_t add = appliance__job_list__get_packed_size(env->job_list);
        uint8_t *buf = realloc(cl->list, cl->list_len + add + 1);
        if (!buf) {
            fprintf(stderr, "appliance-submit: out of memory\n");
            finish(cl, EXIT_FAILED);
            return;
        }
        cl->list = buf;
        cl->list_len += appliance__job_list__pack(env->job_list, buf + cl->list_len);
        if (env->job_list->more)
            return;
        Appliance__JobList *all = appliance__job_list__unpack(NULL, cl->list_len, cl->list);
        if (!all) {
            fprintf(stderr, "appliance-submit: cannot decode the job list\n");
            finish(cl, EXIT_FAILED);
            return;
        }
        render_list(all, cl->json);
        appliance__job_list__free_unpacked(all, NULL);
        finish(cl, EXIT_OK);
        return;
    }
    case APPLIANCE__ENVELOPE__MSG_JOB_LOG_LINES: {
        const Appliance__JobLogLines *l = env->job_log_lines;
        for (size_t i = 0; i < l->n_lines; i++)
            printf("%s\n", l->lines[i]);
        fflush(stdout);
        if (l->end)
            finish(cl, EXIT_OK);
        return;
    }
    default:
        fprintf(stderr, "appliance-submit: unexpected %s from the coordinator\n",
                frame_msg_name(env->msg_case));
        finish(cl, EXIT_FAILED);
        return;
    }
}

static void on_close(conn *c, int err, const char *reason)
{
    client *cl = c->data;
    if (!cl->answered) {
        render_progress_done(cl->tty && cl->live);
        fprintf(stderr, "appliance-submit: coordinator at %s: %s\n", c->peer_addr, reason);
        cl->exit_code = EXIT_UNREACHABLE;
    }
    uv_close((uv_handle_t *)&cl->sigint, NULL);
    uv_close((uv_handle_t *)&cl->ask, NULL);
    if (uv_is_active((uv_handle_t *)&cl->in) || cl->in.data)
        uv_close((uv_handle_t *)&cl->in, NULL);
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

/* Reads the command and its argument; returns EXIT_OK or EXIT_USAGE. */
static int parse_command(client *cl, int argc, char **argv, bool cluster, bool plan)
{
    static const struct {
        const char *name;
        enum command cmd;
        int args_min, args_max;
    } commands[] = {
        {"status", CMD_STATUS, 0, 1},
        {"cancel", CMD_CANCEL, 1, 1},
        {"logs", CMD_LOGS, 1, 1},
        {"list", CMD_LIST, 0, 0},
    };
    int nargs = argc - optind;
    if (cluster) {
        cl->cmd = CMD_CLUSTER;
        return nargs == 0 ? EXIT_OK : EXIT_USAGE;
    }
    if (nargs >= 1)
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
            if (strcmp(argv[optind], commands[i].name) == 0) {
                if (plan || nargs - 1 < commands[i].args_min || nargs - 1 > commands[i].args_max)
                    return EXIT_USAGE;
                cl->cmd = commands[i].cmd;
                cl->arg = nargs > 1 ? argv[optind + 1] : NULL;
                return EXIT_OK;
            }
    if (nargs != 1)
        return EXIT_USAGE;
    cl->cmd = plan ? CMD_PLAN : CMD_SUBMIT;
    cl->arg = argv[optind];
    cl->job_text = read_job_file(cl->arg);
    return cl->job_text ? EXIT_OK : EXIT_USAGE;
}

/* Credentials from one place: the command line if it names any, else the
 * environment. Returns EXIT_OK or EXIT_USAGE after saying what is wrong. */
static int credentials(const char **secret_file, const char **user, const char **key_file,
                       bool *insecure, bool from_cli)
{
    if (!from_cli) {
        const char *v;
        *secret_file = (v = getenv("APPLIANCE_SECRET_FILE")) && v[0] ? v : NULL;
        *user = (v = getenv("APPLIANCE_USER")) && v[0] ? v : NULL;
        *key_file = (v = getenv("APPLIANCE_KEY_FILE")) && v[0] ? v : NULL;
        *insecure = (v = getenv("APPLIANCE_INSECURE")) &&
                    (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "yes") == 0);
    }
    const char *where = from_cli ? "the command line" : "the environment";
    if (*insecure && (*secret_file || *user || *key_file)) {
        fprintf(stderr, "appliance-submit: %s gives both insecure mode and a %s: choose one\n",
                where, *secret_file ? "cluster secret" : "user key");
        return EXIT_USAGE;
    }
    if (*user && *secret_file && from_cli) {
        fprintf(stderr, "appliance-submit: give either --user with --key-file, or --secret-file\n");
        return EXIT_USAGE;
    }
    if (!*user != !*key_file) {
        fprintf(stderr, "appliance-submit: %s: a user needs a key file and a key file a user "
                        "(--user NAME --key-file PATH, or APPLIANCE_USER and APPLIANCE_KEY_FILE)\n",
                where);
        return EXIT_USAGE;
    }
    if (*user)
        *secret_file = NULL; /* the environment's operator secret gives way to a user */
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    static client cl;
    const char *coordinator = getenv("APPLIANCE_COORDINATOR");
    const char *secret_file = NULL, *user = NULL, *key_file = NULL;
    bool insecure = false, cli_credentials = false;
    bool cluster = false, plan = false;
    uint64_t wafer = 0, threads = 1, spill_room = OFFLINE_SPILL_ROOM_HERE;
    enum { O_COORD = 256, O_SECRET, O_JSON, O_CLUSTER, O_PLAN, O_DETACH, O_FOLLOW, O_HELP,
           O_INSECURE, O_USER, O_KEY_FILE, O_WAFER, O_THREADS, O_SPILL_ROOM, O_FORMAT };
    jobspec_format format = JOBSPEC_FORMAT_AUTO;
    static const struct option longopts[] = {
        {"coordinator", required_argument, NULL, O_COORD},
        {"secret-file", required_argument, NULL, O_SECRET},
        {"insecure", no_argument, NULL, O_INSECURE},
        {"user", required_argument, NULL, O_USER},
        {"key-file", required_argument, NULL, O_KEY_FILE},
        {"json", no_argument, NULL, O_JSON},
        {"cluster", no_argument, NULL, O_CLUSTER},
        {"plan", no_argument, NULL, O_PLAN},
        {"detach", no_argument, NULL, O_DETACH},
        {"follow", no_argument, NULL, O_FOLLOW},
        {"wafer-memory", required_argument, NULL, O_WAFER},
        {"threads", required_argument, NULL, O_THREADS},
        {"spill-room", required_argument, NULL, O_SPILL_ROOM},
        {"format", required_argument, NULL, O_FORMAT},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (o) {
        case O_COORD: coordinator = optarg; break;
        case O_SECRET: secret_file = optarg; cli_credentials = true; break;
        case O_INSECURE: insecure = true; cli_credentials = true; break;
        case O_USER: user = optarg; cli_credentials = true; break;
        case O_KEY_FILE: key_file = optarg; cli_credentials = true; break;
        case O_JSON: cl.json = true; break;
        case O_CLUSTER: cluster = true; break;
        case O_PLAN: plan = true; break;
        case O_DETACH: cl.detach = true; break;
        case O_FOLLOW: cl.follow = true; break;
        case O_WAFER:
            if (units_parse_size(optarg, &wafer) < 0 || wafer == 0) {
                fprintf(stderr, "appliance-submit: --wafer-memory \"%s\": expected bytes with an "
                                "optional K, M, G or T suffix\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_THREADS:
            if (units_parse_size(optarg, &threads) < 0 || threads == 0 || threads > 4096) {
                fprintf(stderr, "appliance-submit: --threads \"%s\": expected from 1 to 4096\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case O_SPILL_ROOM:
            if (units_parse_size(optarg, &spill_room) < 0) {
                fprintf(stderr, "appliance-submit: --spill-room \"%s\": expected bytes with an "
                                "optional K, M, G or T suffix\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_FORMAT:
            if (jobspec_format_parse(optarg, &format) < 0) {
                fprintf(stderr, "appliance-submit: --format \"%s\": expected toml or yaml\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case O_HELP: usage(stdout); return EXIT_OK;
        default:
            fprintf(stderr, "appliance-submit: unknown or incomplete option \"%s\" (see --help)\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (parse_command(&cl, argc, argv, cluster, plan) != EXIT_OK) {
        if (!cl.arg || cl.cmd != CMD_SUBMIT || cl.job_text)
            usage(stderr);
        return EXIT_USAGE;
    }
    if (wafer && cl.cmd != CMD_PLAN) {
        fprintf(stderr, "appliance-submit: --wafer-memory goes with --plan\n");
        return EXIT_USAGE;
    }
    if (wafer) { /* planned here: no cluster asked */
        int rc = offline_plan(cl.arg, cl.job_text, format, wafer, (int)threads, spill_room,
                              cl.json);
        free(cl.job_text);
        return rc == 0 ? EXIT_OK : EXIT_REFUSED; /* the job file, or what it asks, refused */
    }
    if (cl.job_text && format != JOBSPEC_FORMAT_AUTO &&
        format != jobspec_format_of(cl.arg, cl.job_text, strlen(cl.job_text))) {
        /* the cluster reads the file by its name and text: say here what
         * the asked syntax makes of it */
        char err[1024];
        jobspec *spec = jobspec_parse_as(cl.job_text, strlen(cl.job_text), cl.arg, format, NULL,
                                         err, sizeof(err));
        if (spec)
            fprintf(stderr, "appliance-submit: %s reads as %s, but the cluster would read it as "
                            "%s by its name: name it .%s\n", cl.arg, jobspec_format_name(format),
                    jobspec_format_name(jobspec_format_of(cl.arg, cl.job_text,
                                                          strlen(cl.job_text))),
                    jobspec_format_name(format));
        else
            fprintf(stderr, "%s\n", err);
        jobspec_free(spec);
        free(cl.job_text);
        return EXIT_REFUSED;
    }
    if (cli_credentials && user && !key_file && getenv("APPLIANCE_KEY_FILE"))
        key_file = getenv("APPLIANCE_KEY_FILE");
    if (credentials(&secret_file, &user, &key_file, &insecure, cli_credentials) != EXIT_OK)
        return EXIT_USAGE;
    if (!coordinator || (!secret_file && !key_file && !insecure)) {
        fprintf(stderr, "appliance-submit: give --coordinator and --secret-file (or --user and "
                        "--key-file), or set APPLIANCE_COORDINATOR and APPLIANCE_SECRET_FILE "
                        "(deploy/local/appliance-up writes them to RUNDIR/env)\n");
        return EXIT_USAGE;
    }
    if (user && (strlen(user) >= 64 || !user[0])) {
        fprintf(stderr, "appliance-submit: user name \"%s\": 1 to 63 characters\n", user);
        return EXIT_USAGE;
    }
    char err[512], host[256];
    int port;
    if (conn_addr_parse(coordinator, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "appliance-submit: bad coordinator address \"%s\": expected HOST:PORT\n",
                coordinator);
        return EXIT_USAGE;
    }
    if (!insecure &&
        auth_secret_load(&cl.secret, user ? key_file : secret_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "appliance-submit: %s\n", err);
        return EXIT_USAGE;
    }
    log_init("appliance-submit", LOG_WARN);
    if (insecure)
        log_warn("--insecure: no cluster secret; this only reaches a cluster that runs without "
                 "authentication");
    cl.tty = isatty(1) && !cl.json;
    conn_config_default(&cl.cfg, insecure ? NULL : &cl.secret, APPLIANCE__ROLE__ROLE_CLIENT,
                        "appliance-submit");
    cl.cfg.user = user;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    uv_signal_init(loop, &cl.sigint);
    cl.sigint.data = &cl;
    uv_signal_start(&cl.sigint, on_sigint, SIGINT);
    uv_timer_init(loop, &cl.ask);
    cl.ask.data = &cl;
    if (isatty(0) && uv_tty_init(loop, &cl.in, 0, 1) == 0)
        cl.in.data = &cl;
    cl.exit_code = EXIT_UNREACHABLE;
    cl.c = conn_connect(loop, host, port, &cl.cfg, &ops, &cl);
    if (!cl.c)
        return EXIT_FAILED;
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    free(cl.job_text);
    free(cl.list);
    auth_secret_clear(&cl.secret);
    return cl.exit_code;
}
