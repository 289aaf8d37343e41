/* The web page and JSON API of the coordinator, on its own loop. Requests
 * are answered whole from the coordinator's state in one call: each answer
 * is bounded (WEB_LOG_LINES_MAX lines, WEB_POINTS_MAX points), bodies are
 * bounded (WEB_MAX_BODY), and connections are bounded (WEB_MAX_CONNECTIONS,
 * 503 past WEB_BUSY_CONNECTIONS). */
#include "web.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "job.h"
#include "jsonbuf.h"
#include "log.h"
#include "msg.h"
#include "web_assets.h"

#define WEB_TOKEN_LEN 32 /* random bytes of a session token (64 hex characters) */
#define WEB_COOKIE "appliance_session"

/* A logged-in browser or script. */
typedef struct web_session {
    char token[2 * WEB_TOKEN_LEN + 1]; /* hex; "" for a free slot */
    char user[USERS_NAME_MAX];         /* "" for an operator (the cluster secret) */
    bool operator_;                    /* sees and cancels every job */
    uint64_t expires;                  /* uv_now after which it is gone */
} web_session;

/* A request being read: its body so far. */
typedef struct web_request {
    char body[WEB_MAX_BODY + 1];
    size_t len;
    bool too_big;
} web_request;

struct web {
    coordinator *co;
    const users *u;
    struct MHD_Daemon *d;
    uv_poll_t poll;         /* libmicrohttpd's epoll descriptor */
    uv_timer_t timer;       /* its timeouts */
    int open_handles;       /* handles not yet closed (web_stop) */
    unsigned connections;   /* open now */
    web_session sessions[WEB_SESSIONS_MAX];
    uint64_t requests, refused; /* answered; refused for load (503) */
};

/* ---- answers ---- */

static enum MHD_Result web__send(struct MHD_Connection *c, unsigned status, const char *type,
                                 const void *data, size_t len, enum MHD_ResponseMemoryMode mode,
                                 const char *cookie)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    if (cookie)
        MHD_add_response_header(r, "Set-Cookie", cookie);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result web__json(struct MHD_Connection *c, unsigned status, jsonbuf *b,
                                 const char *cookie)
{
    size_t len;
    char *text = jsonbuf_steal(b, &len);
    if (!text) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        return web__send(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                         sizeof(oom) - 1, MHD_RESPMEM_PERSISTENT, NULL);
    }
    return web__send(c, status, "application/json", text, len, MHD_RESPMEM_MUST_FREE, cookie);
}

static enum MHD_Result web__error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result web__error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"error\":");
    jsonbuf_str(&b, msg);
    jsonbuf_printf(&b, "}");
    return web__json(c, status, &b, NULL);
}

/* ---- sessions ---- */

static uint64_t web__now(web *w) { return uv_now(w->co->n->loop); }

static web_session *web__session(web *w, struct MHD_Connection *c)
{
    const char *tok = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, WEB_COOKIE);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && strncmp(auth, "Bearer ", 7) == 0)
        tok = auth + 7;
    if (!tok || strlen(tok) != 2 * WEB_TOKEN_LEN)
        return NULL;
    uint64_t now = web__now(w);
    for (size_t i = 0; i < WEB_SESSIONS_MAX; i++) {
        web_session *s = &w->sessions[i];
        if (s->token[0] && sodium_memcmp(s->token, tok, 2 * WEB_TOKEN_LEN) == 0) {
            if (s->expires <= now) {
                memset(s, 0, sizeof(*s));
                return NULL;
            }
            return s;
        }
    }
    return NULL;
}

static web_session *web__session_new(web *w, const char *user, bool operator_)
{
    web_session *s = &w->sessions[0];
    for (size_t i = 0; i < WEB_SESSIONS_MAX; i++) {
        if (!w->sessions[i].token[0]) {
            s = &w->sessions[i];
            break;
        }
        if (w->sessions[i].expires < s->expires)
            s = &w->sessions[i];
    }
    uint8_t raw[WEB_TOKEN_LEN];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(s->token, sizeof(s->token), raw, sizeof(raw));
    sodium_memzero(raw, sizeof(raw));
    snprintf(s->user, sizeof(s->user), "%s", user);
    s->operator_ = operator_;
    s->expires = web__now(w) + (uint64_t)WEB_SESSION_SEC * 1000u;
    return s;
}

/* Whether key (len bytes) is secret, in time that does not depend on
 * where they differ nor on their lengths: both are hashed first. */
static bool web__key_matches(const auth_secret *secret, const char *key, size_t len)
{
    if (!secret || !secret->len)
        return false;
    uint8_t a[crypto_generichash_BYTES], b[crypto_generichash_BYTES];
    crypto_generichash(a, sizeof(a), secret->key, secret->len, NULL, 0);
    crypto_generichash(b, sizeof(b), (const uint8_t *)key, len, NULL, 0);
    return sodium_memcmp(a, b, sizeof(a)) == 0;
}

/* Decodes one application/x-www-form-urlencoded value of name from body
 * into out; false when absent or too long. */
static bool web__form_value(const char *body, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = body; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, name, nl) != 0 || p[nl] != '=')
            continue;
        size_t k = 0;
        for (const char *q = p + nl + 1; *q && *q != '&'; q++) {
            char ch = *q;
            if (ch == '+') {
                ch = ' ';
            } else if (ch == '%' && q[1] && q[2]) {
                char hex[3] = {q[1], q[2], 0};
                char *end;
                long v = strtol(hex, &end, 16);
                if (*end)
                    return false;
                ch = (char)v;
                q += 2;
            }
            if (k + 1 >= outlen)
                return false;
            out[k++] = ch;
        }
        out[k] = 0;
        return true;
    }
    return false;
}

static const char *web__peer(struct MHD_Connection *c, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, len, "?");
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, buf,
                  (socklen_t)len);
    return buf;
}

static enum MHD_Result web__login(web *w, struct MHD_Connection *c, const char *body)
{
    char user[USERS_NAME_MAX] = "", key[AUTH_SECRET_MAX + 1] = "", peer[64];
    web__peer(c, peer, sizeof(peer));
    if (!web__form_value(body, "key", key, sizeof(key)))
        return web__error(c, MHD_HTTP_BAD_REQUEST,
                          "login: expected a form with key=KEY and, for a user, user=NAME");
    if (!web__form_value(body, "user", user, sizeof(user)))
        user[0] = 0;
    bool insecure = w->co->n->opt.insecure;
    bool ok;
    if (insecure)
        ok = true; /* no secret: every client is an operator, as on the CLI */
    else if (!user[0])
        ok = web__key_matches(&w->co->n->secret, key, strlen(key));
    else
        ok = w->u && web__key_matches(users_key((void *)w->u, user), key, strlen(key));
    sodium_memzero(key, sizeof(key));
    if (!ok) {
        log_info("web login refused from %s: wrong key for %s%s%s", peer, user[0] ? "user \"" : "",
                 user[0] ? user : "the cluster secret", user[0] ? "\"" : "");
        if (user[0])
            return web__error(c, MHD_HTTP_UNAUTHORIZED,
                              "authentication failed: wrong key for user \"%s\", or no such user",
                              user);
        return web__error(c, MHD_HTTP_UNAUTHORIZED,
                          "authentication failed: that is not the cluster secret");
    }
    web_session *s = web__session_new(w, user, !user[0] || insecure);
    log_info("web login from %s: %s%s", peer, s->operator_ ? "operator" : "user ",
             s->operator_ ? "" : s->user);
    char cookie[256];
    snprintf(cookie, sizeof(cookie), WEB_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d",
             s->token, WEB_SESSION_SEC);
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"user\":");
    jsonbuf_str(&b, s->user);
    jsonbuf_printf(&b, ",\"operator\":%s,\"token\":\"%s\",\"expires_in\":%d}",
                   s->operator_ ? "true" : "false", s->token, WEB_SESSION_SEC);
    return web__json(c, MHD_HTTP_OK, &b, cookie);
}

/* ---- the API ---- */

static bool web__visible(const web_session *s, const job *j)
{
    return s->operator_ || strcmp(s->user, j->owner) == 0;
}

static void web__status(jsonbuf *b, coordinator *co, job *j, const web_session *s)
{
    Appliance__JobStatus st;
    job_status(co, j, &st);
    jsonbuf_printf(b, "{\"id\":");
    jsonbuf_str(b, j->id);
    jsonbuf_printf(b, ",\"state\":\"%s\",\"phase\":", msg_job_state_name(j->state));
    jsonbuf_str(b, st.phase);
    jsonbuf_printf(b, ",\"file\":");
    jsonbuf_str(b, j->file);
    jsonbuf_printf(b, ",\"owner\":");
    jsonbuf_str(b, j->owner);
    jsonbuf_printf(b, ",\"priority\":%u,\"queue_position\":%u,\"step\":%llu,\"max_steps\":%llu,"
                      "\"loss\":",
                   j->priority, st.queue_position, (unsigned long long)st.step,
                   (unsigned long long)st.max_steps);
    jsonbuf_num(b, st.step > j->first_step ? st.loss : NAN);
    jsonbuf_printf(b, ",\"learning_rate\":");
    jsonbuf_num(b, st.learning_rate);
    jsonbuf_printf(b, ",\"samples_per_sec\":");
    jsonbuf_num(b, st.samples_per_sec);
    jsonbuf_printf(b, ",\"elapsed_sec\":");
    jsonbuf_num(b, st.elapsed_sec);
    jsonbuf_printf(b, ",\"eta_sec\":");
    jsonbuf_num(b, st.eta_sec);
    jsonbuf_printf(b, ",\"submitted_at\":");
    jsonbuf_num(b, st.submitted_at);
    jsonbuf_printf(b, ",\"message\":");
    jsonbuf_str(b, st.message);
    bool running = j->state == APPLIANCE__JOB_STATE__JOB_QUEUED ||
                   j->state == APPLIANCE__JOB_STATE__JOB_RUNNING;
    jsonbuf_printf(b, ",\"can_cancel\":%s}", running && web__visible(s, j) ? "true" : "false");
}

static uint64_t web__arg_u64(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v ? strtoull(v, NULL, 10) : 0;
}

/* The largest of the loop's last lags over about `sec` seconds (the lag
 * timer ticks every 50 ms: node.c), seconds. */
static double web__lag_recent_max(const looplag *l, unsigned sec)
{
    uint32_t k = sec * 20u;
    if (k > l->nrecent)
        k = l->nrecent;
    double max = 0;
    for (uint32_t i = 1; i <= k; i++) {
        double v = l->recent[(l->next + LOOPLAG_RECENT - i) % LOOPLAG_RECENT];
        if (v > max)
            max = v;
    }
    return max;
}

static enum MHD_Result web__cluster(web *w, struct MHD_Connection *c, const web_session *s)
{
    coordinator *co = w->co;
    uint64_t now = web__now(w);
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"coordinator\":{\"name\":");
    jsonbuf_str(&b, co->n->opt.name);
    jsonbuf_printf(&b, ",\"loop_lag_p99\":");
    jsonbuf_num(&b, looplag_quantile(&co->n->lag, 0.99));
    jsonbuf_printf(&b, ",\"loop_lag_max\":");
    jsonbuf_num(&b, co->n->lag.max_sec);
    /* ?lag_sec=S: over the last S seconds (1 to 200, default 10) */
    uint64_t sec = web__arg_u64(c, "lag_sec");
    sec = sec < 1 ? 10 : sec > 200 ? 200 : sec;
    jsonbuf_printf(&b, ",\"loop_lag_recent_sec\":%llu,\"loop_lag_max_recent\":",
                   (unsigned long long)sec);
    jsonbuf_num(&b, web__lag_recent_max(&co->n->lag, (unsigned)sec));
    size_t queued = 0;
    for (size_t i = 0; i < co->njobs; i++)
        queued += co->jobs[i]->state == APPLIANCE__JOB_STATE__JOB_QUEUED;
    jsonbuf_printf(&b, ",\"queued\":%zu,\"running\":", queued);
    jsonbuf_str(&b, co->running && web__visible(s, co->running) ? co->running->id : "");
    jsonbuf_printf(&b, "},\"members\":[");
    for (size_t i = 0; i < co->members.n; i++) {
        const member *mb = &co->members.v[i];
        job *j = mb->job[0] ? co->running : NULL;
        bool shown = s->operator_ || (j && web__visible(s, j));
        jsonbuf_printf(&b, "%s{\"id\":%u,\"role\":\"%s\",\"name\":", i ? "," : "", mb->id,
                       msg_role_name(mb->role));
        jsonbuf_str(&b, mb->name);
        jsonbuf_printf(&b, ",\"state\":\"%s\",\"addr\":", msg_member_state_name(mb->state));
        jsonbuf_str(&b, mb->addr);
        jsonbuf_printf(&b, ",\"host\":");
        jsonbuf_str(&b, mb->host_name);
        jsonbuf_printf(&b, ",\"job\":");
        jsonbuf_str(&b, shown ? mb->job : mb->job[0] ? "(another user's)" : "");
        jsonbuf_printf(&b, ",\"threads\":%u,\"wafer_memory\":%llu,\"memory\":%llu,"
                           "\"last_seen_ms_ago\":%llu,\"loop_lag_p99\":",
                       mb->threads, (unsigned long long)mb->wafer_memory,
                       (unsigned long long)mb->memory,
                       (unsigned long long)(now > mb->last_seen ? now - mb->last_seen : 0));
        jsonbuf_num(&b, mb->lag_p99);
        jsonbuf_printf(&b, ",\"loop_lag_max\":");
        jsonbuf_num(&b, mb->lag_max);
        jsonbuf_printf(&b, ",\"load1\":");
        jsonbuf_num(&b, mb->load1 >= 0 ? mb->load1 : NAN);
        jsonbuf_printf(&b, ",\"simulated\":%s}", mb->simulated ? "true" : "false");
    }
    jsonbuf_printf(&b, "]}");
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}

static enum MHD_Result web__jobs(web *w, struct MHD_Connection *c, const web_session *s)
{
    coordinator *co = w->co;
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"jobs\":[");
    bool first = true;
    for (size_t i = co->njobs; i > 0; i--) { /* newest first */
        job *j = co->jobs[i - 1];
        if (!web__visible(s, j))
            continue;
        if (!first)
            jsonbuf_printf(&b, ",");
        first = false;
        web__status(&b, co, j, s);
    }
    jsonbuf_printf(&b, "]}");
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}


static enum MHD_Result web__job(web *w, struct MHD_Connection *c, const web_session *s, job *j)
{
    jsonbuf b = {0};
    web__status(&b, w->co, j, s);
    if (b.oom || !b.len)
        return web__json(c, MHD_HTTP_OK, &b, NULL); /* says out of memory */
    b.len--; /* reopen the object */
    jsonbuf_printf(&b, ",\"phases\":[");
    for (size_t i = 0; i < j->nphases; i++) {
        jsonbuf_printf(&b, "%s{\"name\":", i ? "," : "");
        jsonbuf_str(&b, j->phase_name[i]);
        jsonbuf_printf(&b, ",\"replica_sec\":[");
        for (size_t r = 0; r < j->view_replicas; r++) {
            jsonbuf_printf(&b, "%s", r ? "," : "");
            jsonbuf_num(&b, j->replica_phase[r][i]);
        }
        jsonbuf_printf(&b, "]}");
    }
    jsonbuf_printf(&b, "],\"evals\":[");
    for (size_t i = 0; i < j->nevals; i++) {
        const job_eval_point *e = &j->evals[i];
        jsonbuf_printf(&b, "%s{\"step\":%llu,\"loss\":", i ? "," : "", (unsigned long long)e->step);
        jsonbuf_num(&b, e->loss);
        jsonbuf_printf(&b, ",\"accuracy\":");
        jsonbuf_num(&b, e->accuracy >= 0 ? e->accuracy : NAN);
        jsonbuf_printf(&b, ",\"iou\":");
        jsonbuf_num(&b, e->iou >= 0 ? e->iou : NAN);
        jsonbuf_printf(&b, "}");
    }
    jsonbuf_printf(&b, "],\"log_lines\":%zu,\"points\":%zu,\"point_stride\":%llu}", j->nlog,
                   j->npoints, (unsigned long long)(j->point_stride ? j->point_stride : 1));
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}

/* Points after step `since`, at most WEB_POINTS_MAX, as parallel arrays. */
static enum MHD_Result web__points(struct MHD_Connection *c, job *j)
{
    uint64_t since = web__arg_u64(c, "since");
    size_t from = 0;
    while (from < j->npoints && j->points[from].step <= since &&
           MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since"))
        from++;
    size_t to = j->npoints - from > WEB_POINTS_MAX ? from + WEB_POINTS_MAX : j->npoints;
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"point_stride\":%llu,\"more\":%s,\"step\":[",
                   (unsigned long long)(j->point_stride ? j->point_stride : 1),
                   to < j->npoints ? "true" : "false");
    for (size_t i = from; i < to; i++)
        jsonbuf_printf(&b, "%s%llu", i > from ? "," : "", (unsigned long long)j->points[i].step);
    jsonbuf_printf(&b, "],\"loss\":[");
    for (size_t i = from; i < to; i++) {
        jsonbuf_printf(&b, "%s", i > from ? "," : "");
        jsonbuf_num(&b, j->points[i].loss);
    }
    jsonbuf_printf(&b, "],\"samples_per_sec\":[");
    for (size_t i = from; i < to; i++) {
        jsonbuf_printf(&b, "%s", i > from ? "," : "");
        jsonbuf_num(&b, j->points[i].samples_per_sec);
    }
    jsonbuf_printf(&b, "],\"compute_sec\":[");
    for (size_t i = from; i < to; i++) {
        jsonbuf_printf(&b, "%s", i > from ? "," : "");
        jsonbuf_num(&b, j->points[i].compute_sec);
    }
    jsonbuf_printf(&b, "]}");
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}

static enum MHD_Result web__log(struct MHD_Connection *c, job *j)
{
    uint64_t from = web__arg_u64(c, "from");
    size_t to = j->nlog;
    if (from > to)
        from = to;
    if (to - from > WEB_LOG_LINES_MAX)
        to = (size_t)from + WEB_LOG_LINES_MAX;
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"from\":%llu,\"next\":%zu,\"total\":%zu,\"lines\":[",
                   (unsigned long long)from, to, j->nlog);
    for (size_t i = (size_t)from; i < to; i++) {
        if (i > from)
            jsonbuf_printf(&b, ",");
        jsonbuf_str(&b, j->log[i]);
    }
    jsonbuf_printf(&b, "]}");
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}

static enum MHD_Result web__cancel(web *w, struct MHD_Connection *c, const web_session *s, job *j)
{
    coordinator *co = w->co;
    if (j->state != APPLIANCE__JOB_STATE__JOB_QUEUED && j->state != APPLIANCE__JOB_STATE__JOB_RUNNING)
        return web__error(c, MHD_HTTP_CONFLICT, "job %s has already ended: %s", j->id,
                          msg_job_state_name(j->state));
    char why[256], peer[64];
    web__peer(c, peer, sizeof(peer));
    if (s->user[0])
        snprintf(why, sizeof(why), "cancelled by user %s on the web page from %s", s->user, peer);
    else
        snprintf(why, sizeof(why), "cancelled on the web page from %s", peer);
    log_info("job %s %s", j->id, why);
    job_end(co, j, APPLIANCE__JOB_STATE__JOB_CANCELLED, why);
    jobs_schedule(co);
    jsonbuf b = {0};
    web__status(&b, co, j, s);
    return web__json(c, MHD_HTTP_OK, &b, NULL);
}

/* /api/jobs/ID[/what]: the job if the session may see it. */
static enum MHD_Result web__job_route(web *w, struct MHD_Connection *c, const web_session *s,
                                      const char *method, const char *rest)
{
    char id[64];
    const char *slash = strchr(rest, '/');
    size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (idlen == 0 || idlen >= sizeof(id))
        return web__error(c, MHD_HTTP_NOT_FOUND, "no such job");
    memcpy(id, rest, idlen);
    id[idlen] = 0;
    const char *what = slash ? slash + 1 : "";
    job *j = job_find(w->co, id);
    if (!j || !web__visible(s, j)) /* another user's job is no job at all */
        return web__error(c, MHD_HTTP_NOT_FOUND, "no job %s", id);
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (!what[0] && get)
        return web__job(w, c, s, j);
    if (strcmp(what, "points") == 0 && get)
        return web__points(c, j);
    if (strcmp(what, "log") == 0 && get)
        return web__log(c, j);
    if (strcmp(what, "plan") == 0 && get) {
        if (!j->plan_json)
            return web__error(c, MHD_HTTP_NOT_FOUND, "job %s has no plan: it has not started", id);
        return web__send(c, MHD_HTTP_OK, "application/json", j->plan_json, strlen(j->plan_json),
                         MHD_RESPMEM_MUST_COPY, NULL);
    }
    if (strcmp(what, "cancel") == 0 && post)
        return web__cancel(w, c, s, j);
    if (!what[0] || !strcmp(what, "points") || !strcmp(what, "log") || !strcmp(what, "plan") ||
        !strcmp(what, "cancel"))
        return web__error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s is not allowed here", method);
    return web__error(c, MHD_HTTP_NOT_FOUND, "no such path under /api/jobs/%s", id);
}

/* A POST from another site's page: refused (the cookie is SameSite=Strict,
 * this is the second wall). */
static bool web__cross_origin(struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!origin || strcmp(origin, "null") == 0)
        return origin != NULL;
    const char *o = strstr(origin, "://");
    return !host || !o || strcmp(o + 3, host) != 0;
}

static enum MHD_Result web__api(web *w, struct MHD_Connection *c, const char *url,
                                const char *method, const char *body)
{
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (!get && !post)
        return web__error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s: only GET and POST", method);
    if (post && web__cross_origin(c))
        return web__error(c, MHD_HTTP_FORBIDDEN, "a POST from another origin is refused");
    if (strcmp(url, "/api/login") == 0) {
        if (!post)
            return web__error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "/api/login takes a POST");
        return web__login(w, c, body);
    }
    web_session *s = web__session(w, c);
    web_session insecure = {.operator_ = true};
    if (!s && w->co->n->opt.insecure)
        s = &insecure;
    if (!s)
        return web__error(c, MHD_HTTP_UNAUTHORIZED,
                          "not logged in: POST /api/login with user and key first");
    if (strcmp(url, "/api/logout") == 0 && post) {
        memset(s, 0, sizeof(*s));
        return web__send(c, MHD_HTTP_OK, "application/json", "{}", 2, MHD_RESPMEM_PERSISTENT,
                         WEB_COOKIE "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    }
    if (strcmp(url, "/api/session") == 0 && get) {
        jsonbuf b = {0};
        jsonbuf_printf(&b, "{\"user\":");
        jsonbuf_str(&b, s->user);
        jsonbuf_printf(&b, ",\"operator\":%s}", s->operator_ ? "true" : "false");
        return web__json(c, MHD_HTTP_OK, &b, NULL);
    }
    if (strcmp(url, "/api/cluster") == 0 && get)
        return web__cluster(w, c, s);
    if (strcmp(url, "/api/jobs") == 0 && get)
        return web__jobs(w, c, s);
    if (strncmp(url, "/api/jobs/", 10) == 0)
        return web__job_route(w, c, s, method, url + 10);
    return web__error(c, MHD_HTTP_NOT_FOUND, "no such API path: %s", url);
}

static enum MHD_Result web__answer(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **ctx)
{
    web *w = cls;
    web_request *rq = *ctx;
    if (!rq) {
        if (w->connections > WEB_BUSY_CONNECTIONS) {
            w->refused++;
            return web__error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                              "busy: %u connections open, try again", w->connections);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > WEB_MAX_BODY)
            return web__error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                              "request body of %s bytes: at most %d", cl, WEB_MAX_BODY);
        if (!(rq = calloc(1, sizeof(*rq))))
            return MHD_NO;
        *ctx = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (rq->len + *upload_size > WEB_MAX_BODY)
            rq->too_big = true;
        else {
            memcpy(rq->body + rq->len, upload, *upload_size);
            rq->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    w->requests++;
    if (rq->too_big)
        return web__error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %d bytes",
                          WEB_MAX_BODY);
    rq->body[rq->len] = 0;
    if (strncmp(url, "/api/", 5) == 0)
        return web__api(w, c, url, method, rq->body);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return web__error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s: the page takes GET", method);
    const char *path = strcmp(url, "/") == 0 ? "/index.html" : url;
    for (size_t i = 0; i < web_nassets; i++)
        if (strcmp(web_assets[i].path, path) == 0)
            return web__send(c, MHD_HTTP_OK, web_assets[i].type, web_assets[i].data,
                             web_assets[i].len, MHD_RESPMEM_PERSISTENT, NULL);
    return web__error(c, MHD_HTTP_NOT_FOUND, "no such page: %s", url);
}

static void web__completed(void *cls, struct MHD_Connection *c, void **ctx,
                           enum MHD_RequestTerminationCode why)
{
    free(*ctx);
    *ctx = NULL;
}

static void web__notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                        enum MHD_ConnectionNotificationCode code)
{
    web *w = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        w->connections++;
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED && w->connections)
        w->connections--;
}

/* ---- driving libmicrohttpd from the loop ---- */

static void web__run(web *w);

static void web__on_timer(uv_timer_t *t) { web__run(t->data); }

static void web__on_poll(uv_poll_t *p, int status, int events) { web__run(p->data); }

/* Lets libmicrohttpd do what is ready, then arms the timer for its next
 * timeout (0: it has buffered work, run again on the next turn). */
static void web__run(web *w)
{
    MHD_run(w->d);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(w->d, &ms) == MHD_YES)
        uv_timer_start(&w->timer, web__on_timer, ms > 60000 ? 60000 : ms, 0);
    else
        uv_timer_stop(&w->timer);
}

web *web_start(coordinator *co, const users *u, const char *addr, int *port, char *err,
               size_t errlen)
{
    char host[64];
    int p;
    struct sockaddr_in sa = {0};
    if (conn_addr_parse(addr, host, sizeof(host), &p) < 0 || uv_ip4_addr(host, p, &sa) < 0) {
        snprintf(err, errlen, "bad --http address \"%s\": expected IPv4:PORT", addr);
        return NULL;
    }
    if (sodium_init() < 0) {
        snprintf(err, errlen, "--http: libsodium cannot start");
        return NULL;
    }
    web *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "--http: out of memory");
        return NULL;
    }
    w->co = co;
    w->u = u;
    w->d = MHD_start_daemon(MHD_USE_EPOLL, (uint16_t)p, NULL, NULL, web__answer, w,
                            MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)WEB_MAX_CONNECTIONS,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)WEB_MAX_CONNECTIONS,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64u << 10),
                            MHD_OPTION_NOTIFY_COMPLETED, web__completed, w,
                            MHD_OPTION_NOTIFY_CONNECTION, web__notify, w,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 128u,
                            MHD_OPTION_END);
    if (!w->d) {
        snprintf(err, errlen, "cannot serve the web page on %s: %s", addr, strerror(errno));
        free(w);
        return NULL;
    }
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_EPOLL_FD);
    const union MHD_DaemonInfo *pi = MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_BIND_PORT);
    if (!ei || uv_poll_init(co->n->loop, &w->poll, ei->epoll_fd) < 0) {
        snprintf(err, errlen, "cannot serve the web page on %s: no epoll descriptor", addr);
        MHD_stop_daemon(w->d);
        free(w);
        return NULL;
    }
    *port = pi && pi->port ? pi->port : p;
    w->poll.data = w;
    uv_timer_init(co->n->loop, &w->timer);
    w->timer.data = w;
    w->open_handles = 2;
    uv_poll_start(&w->poll, UV_READABLE, web__on_poll);
    web__run(w);
    return w;
}

static void web__closed(uv_handle_t *h)
{
    web *w = h->data;
    if (--w->open_handles == 0) {
        sodium_memzero(w->sessions, sizeof(w->sessions));
        free(w);
    }
}

void web_stop(web *w)
{
    if (!w)
        return;
    uv_poll_stop(&w->poll);
    uv_timer_stop(&w->timer);
    MHD_stop_daemon(w->d); /* closes its sockets and its epoll descriptor */
    uv_close((uv_handle_t *)&w->poll, web__closed);
    uv_close((uv_handle_t *)&w->timer, web__closed);
}
