/* Fuzz target: what appliance-submit does with the coordinator's answers
 * (client/render.c): the member table, a plan, status lines live and
 * final, job lists, as text and as JSON. The input is a protobuf Envelope;
 * the text goes to /dev/null, the JSON must be JSON. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"
#include "render.h"

/* A strict JSON syntax check (RFC 8259) of what --json prints. */
typedef struct json {
    const char *p, *end;
} json;

static bool json_value(json *j, int depth);

static void json_ws(json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool json_lit(json *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return false;
    j->p += n;
    return true;
}

static bool json_digits(json *j)
{
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > s;
}

static bool json_number(json *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (!json_digits(j))
        return false;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!json_digits(j))
            return false;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (!json_digits(j))
            return false;
    }
    return true;
}

static bool json_string(json *j)
{
    if (j->p >= j->end || *j->p != '"')
        return false;
    for (j->p++; j->p < j->end; j->p++) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            if (++j->p >= j->end)
                return false;
            if (*j->p == 'u') {
                for (int k = 0; k < 4; k++)
                    if (++j->p >= j->end || !strchr("0123456789abcdefABCDEF", *j->p))
                        return false;
            } else if (!strchr("\"\\/bfnrt", *j->p)) {
                return false;
            }
        }
    }
    return false;
}

static bool json_value(json *j, int depth)
{
    json_ws(j);
    if (j->p >= j->end || depth > 16)
        return false;
    char open = *j->p;
    if (open == '{' || open == '[') {
        char close = open == '{' ? '}' : ']';
        j->p++;
        json_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            if (open == '{') {
                json_ws(j);
                if (!json_string(j))
                    return false;
                json_ws(j);
                if (j->p >= j->end || *j->p++ != ':')
                    return false;
            }
            if (!json_value(j, depth + 1))
                return false;
            json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return true;
            }
            return false;
        }
    }
    if (open == '"')
        return json_string(j);
    if (json_lit(j, "true") || json_lit(j, "false") || json_lit(j, "null"))
        return true;
    return json_number(j);
}

/* stderr as it was, for reports while the renderings' stderr is /dev/null. */
static FILE *real_stderr;

/* What a --json rendering printed is one JSON value. */
static void check_json(const char *text, size_t len)
{
    FILE *keep = stderr;
    stderr = real_stderr;
    json j = {text, text + len};
    bool ok = json_value(&j, 0);
    json_ws(&j);
    if (!ok || j.p != j.end)
        fprintf(stderr, "not JSON: %.*s\n", (int)len, text);
    FUZZ_ASSERT(ok && j.p == j.end);
    stderr = keep;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *null;
    if (!null) {
        null = fopen("/dev/null", "w");
        FUZZ_ASSERT(null != NULL);
    }
    Appliance__Envelope *env = frame_envelope_unpack(data, size);
    if (!env)
        return 0;
    /* Sanitizer reports go to file descriptor 2, not through these. */
    FILE *out = stdout, *err = stderr;
    real_stderr = err;
    stdout = stderr = null;
    char *text = NULL;
    size_t len = 0;
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_CLUSTER_INFO:
        render_cluster(env->cluster_info, false);
        if ((stdout = open_memstream(&text, &len)) != NULL) {
            render_cluster(env->cluster_info, true);
            fclose(stdout);
            check_json(text, len);
            free(text);
        }
        stdout = null;
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_ACCEPTED:
        if (env->job_accepted->plan) /* the client asked for a plan */
            render_plan(env->job_accepted->plan);
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_STATUS:
        render_progress(env->job_status, false);
        render_progress(env->job_status, true);
        render_progress_done(true);
        render_final(env->job_status, false);
        if ((stdout = open_memstream(&text, &len)) != NULL) {
            render_final(env->job_status, true);
            fclose(stdout);
            check_json(text, len);
            free(text);
        }
        stdout = null;
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_LIST:
        render_list(env->job_list, false);
        if ((stdout = open_memstream(&text, &len)) != NULL) {
            render_list(env->job_list, true);
            fclose(stdout);
            check_json(text, len);
            free(text);
        }
        stdout = null;
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_LOG_LINES:
        for (size_t i = 0; i < env->job_log_lines->n_lines; i++)
            render_json_string(stdout, env->job_log_lines->lines[i]);
        break;
    default:
        break;
    }
    stdout = out;
    stderr = err;
    appliance__envelope__free_unpacked(env, NULL);
    return 0;
}
