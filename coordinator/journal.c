/* The job journal on SQLite. */
#include "journal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "fsutil.h"
#include "log.h"

struct journal {
    sqlite3 *db;
    sqlite3_stmt *put;     /* INSERT OR REPLACE INTO jobs */
    sqlite3_stmt *log;     /* INSERT OR REPLACE INTO job_log */
    sqlite3_stmt *get;     /* SELECT one job by id */
    sqlite3_stmt *owner;   /* INSERT OR REPLACE INTO job_owner */
};

/* The columns journal__row reads, in its order, and the tables they come
 * from: a job's owner is in job_owner, and a job without a row there (one
 * submitted by an operator, or before owners were kept) has owner "". */
#define JOURNAL_COLUMNS                                                                      \
    "id, seq, state, priority, file, toml, base_dir, model_dir, message, submitted_at, steps," \
    " max_steps, loss, eval_step, eval_loss, eval_accuracy, eval_iou, COALESCE(o.owner, '')"
#define JOURNAL_TABLES "jobs LEFT JOIN job_owner o ON o.job_id = jobs.id"


static const char journal__schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS jobs("
    " id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state INTEGER NOT NULL,"
    " priority INTEGER NOT NULL, file TEXT, toml TEXT, base_dir TEXT, model_dir TEXT,"
    " message TEXT, submitted_at REAL, steps INTEGER, max_steps INTEGER, loss REAL,"
    " eval_step INTEGER, eval_loss REAL, eval_accuracy REAL, eval_iou REAL);"
    "CREATE TABLE IF NOT EXISTS job_recovery("
    " job_id TEXT PRIMARY KEY, restarts INTEGER NOT NULL, ckpt_step INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS job_log("
    " job_id TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL,"
    " PRIMARY KEY(job_id, line));";

/* Schema changes after the first, by PRAGMA user_version: entry i takes a
 * journal from version i to i + 1. */
static const char *const journal__migrations[] = {
    /* 0 -> 1: job owners (coordinator users file); older jobs keep no row
     * and belong to the operators. */
    "CREATE TABLE IF NOT EXISTS job_owner(job_id TEXT PRIMARY KEY, owner TEXT NOT NULL);",
    /* 1 -> 2: the kind of wse-nodes a job runs on (real or simulated), so
     * that a restarted coordinator recovers it onto the same kind; older
     * rows read 0, any kind. */
    "ALTER TABLE job_recovery ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;",
};

/* Brings an older journal up to the current schema, one transaction per
 * step. Returns 0 or -EIO with a message in err. */
static int journal__migrate(journal *jn, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int version = -1;
    if (sqlite3_prepare_v2(jn->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            version = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    int latest = (int)(sizeof(journal__migrations) / sizeof(journal__migrations[0]));
    if (version < 0 || version > latest) {
        snprintf(err, errlen, "journal schema version %d: this coordinator knows 0 to %d", version,
                 latest);
        return -EIO;
    }
    for (int v = version; v < latest; v++) {
        char sql[512];
        snprintf(sql, sizeof(sql), "BEGIN; %s PRAGMA user_version = %d; COMMIT;",
                 journal__migrations[v], v + 1);
        char *msg = NULL;
        if (sqlite3_exec(jn->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
            snprintf(err, errlen, "journal schema %d -> %d: %s", v, v + 1,
                     msg ? msg : sqlite3_errmsg(jn->db));
            sqlite3_free(msg);
            sqlite3_exec(jn->db, "ROLLBACK", NULL, NULL, NULL);
            return -EIO;
        }
        log_info("journal: schema version %d -> %d", v, v + 1);
    }
    return 0;
}

journal *journal_open(const char *dir, char *err, size_t errlen)
{
    int rc = fsutil_mkdir_p(dir);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create state directory %s: %s", dir, strerror(-rc));
        return NULL;
    }
    journal *jn = calloc(1, sizeof(*jn));
    if (!jn) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/journal.sqlite", dir);
    char *msg = NULL;
    err[0] = 0;
    if (sqlite3_open(path, &jn->db) != SQLITE_OK ||
        sqlite3_exec(jn->db, journal__schema, NULL, NULL, &msg) != SQLITE_OK ||
        journal__migrate(jn, err, errlen) < 0 ||
        sqlite3_prepare_v2(jn->db,
                           "INSERT OR REPLACE INTO jobs VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                           "?12,?13,?14,?15,?16,?17)",
                           -1, &jn->put, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(jn->db, "INSERT OR REPLACE INTO job_log VALUES(?1,?2,?3)", -1, &jn->log,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(jn->db, "INSERT OR REPLACE INTO job_owner VALUES(?1,?2)", -1,
                           &jn->owner, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(jn->db, "SELECT " JOURNAL_COLUMNS " FROM " JOURNAL_TABLES " WHERE id = ?1",
                           -1, &jn->get, NULL) != SQLITE_OK) {
        if (!err[0] || msg)
            snprintf(err, errlen, "%s: %s", path, msg ? msg : sqlite3_errmsg(jn->db));
        sqlite3_free(msg);
        journal_close(jn);
        return NULL;
    }
    return jn;
}

void journal_close(journal *jn)
{
    if (!jn)
        return;
    sqlite3_finalize(jn->put);
    sqlite3_finalize(jn->log);
    sqlite3_finalize(jn->get);
    sqlite3_finalize(jn->owner);
    sqlite3_close(jn->db);
    free(jn);
}

static int journal__step(journal *jn, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) {
        log_error("journal: cannot write %s: %s", what, sqlite3_errmsg(jn->db));
        return -EIO;
    }
    return 0;
}

int journal_put(journal *jn, const journal_job *jj)
{
    sqlite3_stmt *st = jn->put;
    sqlite3_bind_text(st, 1, jj->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)jj->seq);
    sqlite3_bind_int(st, 3, jj->state);
    sqlite3_bind_int(st, 4, (int)jj->priority);
    sqlite3_bind_text(st, 5, jj->file, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, jj->toml, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, jj->base_dir, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, jj->model_dir, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, jj->message, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 10, jj->submitted_at);
    sqlite3_bind_int64(st, 11, (sqlite3_int64)jj->steps);
    sqlite3_bind_int64(st, 12, (sqlite3_int64)jj->max_steps);
    sqlite3_bind_double(st, 13, jj->loss);
    sqlite3_bind_int64(st, 14, (sqlite3_int64)jj->eval_step);
    sqlite3_bind_double(st, 15, jj->eval_loss);
    sqlite3_bind_double(st, 16, jj->eval_accuracy);
    sqlite3_bind_double(st, 17, jj->eval_iou);
    return journal__step(jn, st, "a job");
}

int journal_put_recovery(journal *jn, const char *job_id, const journal_recovery *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(jn->db,
                           "INSERT OR REPLACE INTO job_recovery(job_id, restarts, ckpt_step, kind) "
                           "VALUES(?1,?2,?3,?4)",
                           -1, &st, NULL) != SQLITE_OK) {
        log_error("journal: cannot write a job's recovery point: %s", sqlite3_errmsg(jn->db));
        return -EIO;
    }
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)r->restarts);
    sqlite3_bind_int64(st, 3, r->have_ckpt ? (sqlite3_int64)r->ckpt_step : -1);
    sqlite3_bind_int(st, 4, r->kind);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        log_error("journal: cannot write a job's recovery point: %s", sqlite3_errmsg(jn->db));
        return -EIO;
    }
    return 0;
}

int journal_get_recovery(journal *jn, const char *job_id, journal_recovery *r)
{
    *r = (journal_recovery){0};
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(jn->db,
                           "SELECT restarts, ckpt_step, kind FROM job_recovery WHERE job_id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        r->restarts = (uint32_t)sqlite3_column_int64(st, 0);
        sqlite3_int64 step = sqlite3_column_int64(st, 1);
        r->have_ckpt = step >= 0;
        r->ckpt_step = step >= 0 ? (uint64_t)step : 0;
        r->kind = sqlite3_column_int(st, 2);
    }
    sqlite3_finalize(st);
    return 0;
}

int journal_set_owner(journal *jn, const char *job_id, const char *owner)
{
    sqlite3_stmt *st = jn->owner;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    return journal__step(jn, st, "a job's owner");
}

int journal_log(journal *jn, const char *job_id, uint64_t line, const char *text)
{
    sqlite3_stmt *st = jn->log;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)line);
    sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
    return journal__step(jn, st, "a log line");
}

static const char *journal__text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? (const char *)t : "";
}

/* The job on the current row of a statement selecting JOURNAL_COLUMNS. */
static journal_job journal__row(sqlite3_stmt *st)
{
    journal_job jj = {
        .id = journal__text(st, 0),
        .seq = (uint64_t)sqlite3_column_int64(st, 1),
        .state = sqlite3_column_int(st, 2),
        .priority = (uint32_t)sqlite3_column_int(st, 3),
        .file = journal__text(st, 4),
        .toml = journal__text(st, 5),
        .base_dir = journal__text(st, 6),
        .model_dir = journal__text(st, 7),
        .message = journal__text(st, 8),
        .submitted_at = sqlite3_column_double(st, 9),
        .steps = (uint64_t)sqlite3_column_int64(st, 10),
        .max_steps = (uint64_t)sqlite3_column_int64(st, 11),
        .loss = sqlite3_column_double(st, 12),
        .eval_step = (uint64_t)sqlite3_column_int64(st, 13),
        .eval_loss = sqlite3_column_double(st, 14),
        .eval_accuracy = sqlite3_column_double(st, 15),
        .eval_iou = sqlite3_column_double(st, 16),
        .owner = journal__text(st, 17),
    };
    return jj;
}

int journal_load(journal *jn, int (*cb)(void *arg, const journal_job *jj), void *arg)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(jn->db, "SELECT " JOURNAL_COLUMNS " FROM " JOURNAL_TABLES " ORDER BY seq", -1, &st,
                           NULL) != SQLITE_OK) {
        log_error("journal: cannot read the jobs: %s", sqlite3_errmsg(jn->db));
        return -EIO;
    }
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        journal_job jj = journal__row(st);
        rc = cb(arg, &jj);
    }
    sqlite3_finalize(st);
    return rc;
}

int journal_get(journal *jn, const char *id, int (*cb)(void *arg, const journal_job *jj), void *arg)
{
    sqlite3_stmt *st = jn->get;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    int rc = step == SQLITE_ROW ? 0 : step == SQLITE_DONE ? -ENOENT : -EIO;
    if (rc == 0) {
        journal_job jj = journal__row(st);
        rc = cb(arg, &jj);
    } else if (rc == -EIO) {
        log_error("journal: cannot read job %s: %s", id, sqlite3_errmsg(jn->db));
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

int journal_recent(journal *jn, const char *owner, size_t limit, uint64_t *total,
                   int (*cb)(void *arg, const journal_job *jj), void *arg)
{
    /* ?2 NULL: every job; else the jobs of that owner ("" an operator's). */
    sqlite3_stmt *st;
    if (total) {
        *total = 0;
        if (sqlite3_prepare_v2(jn->db,
                               "SELECT COUNT(*) FROM " JOURNAL_TABLES
                               " WHERE ?1 IS NULL OR COALESCE(o.owner, '') = ?1",
                               -1, &st, NULL) != SQLITE_OK)
            return -EIO;
        sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            *total = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (sqlite3_prepare_v2(jn->db,
                           "SELECT " JOURNAL_COLUMNS " FROM " JOURNAL_TABLES
                           " WHERE ?2 IS NULL OR COALESCE(o.owner, '') = ?2"
                           " ORDER BY seq DESC LIMIT ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        log_error("journal: cannot read the jobs: %s", sqlite3_errmsg(jn->db));
        return -EIO;
    }
    sqlite3_bind_int64(st, 1, limit > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)limit);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        journal_job jj = journal__row(st);
        rc = cb(arg, &jj);
    }
    sqlite3_finalize(st);
    return rc;
}

int journal_load_log(journal *jn, const char *job_id,
                     int (*cb)(void *arg, uint64_t line, const char *text), void *arg)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(jn->db, "SELECT line, text FROM job_log WHERE job_id = ?1 ORDER BY line",
                           -1, &st, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW)
        rc = cb(arg, (uint64_t)sqlite3_column_int64(st, 0), journal__text(st, 1));
    sqlite3_finalize(st);
    return rc;
}
