/* Users and their keys, from the coordinator's users file. */
#include "users.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "toml.h"

typedef struct users_entry {
    char name[USERS_NAME_MAX]; /* [A-Za-z0-9._-], unique */
    auth_secret key;           /* at least USERS_KEY_MIN bytes */
} users_entry;

struct users {
    users_entry *v;            /* in file order */
    size_t n;                  /* entries read */
    size_t cap;                /* entries allocated (all wiped when freed) */
};

/* Refuses a file others could read or write: it holds keys. */
static int users__check_mode(const char *path, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a regular file", what, path);
        return -EINVAL;
    }
    if (st.st_mode & 077) {
        snprintf(err, errlen, "%s %s has mode %04o: it holds keys and must be readable by its "
                 "owner only (chmod 600 %s)", what, path, (unsigned)(st.st_mode & 07777), path);
        return -EPERM;
    }
    return 0;
}

static bool users__name_ok(const char *s, size_t len)
{
    if (len == 0 || len >= USERS_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

/* Reads one [users.NAME] table into e. */
static int users__entry(users_entry *e, const char *path, const char *name, const toml_value *t,
                        char *err, size_t errlen)
{
    const toml_value *key = NULL, *key_file = NULL;
    for (size_t i = 0; i < toml_table_len(t); i++) {
        const char *k = toml_table_key(t, i);
        const toml_value *v = toml_table_value(t, i);
        if (strcmp(k, "key") != 0 && strcmp(k, "key_file") != 0)
            return toml_errorf(err, errlen, path, toml_table_key_pos(t, i),
                               "users.%s: unknown key \"%s\" (expected key or key_file)", name, k);
        if (toml_type_of(v) != TOML_STRING)
            return toml_errorf(err, errlen, path, toml_pos_of(v), "users.%s.%s: expected a string",
                               name, k);
        if (strcmp(k, "key") == 0)
            key = v;
        else
            key_file = v;
    }
    if (!key == !key_file)
        return toml_errorf(err, errlen, path, toml_pos_of(t),
                           "users.%s: give exactly one of key and key_file", name);
    snprintf(e->name, sizeof(e->name), "%s", name);
    if (key) {
        if (toml_string_len(key) < USERS_KEY_MIN || toml_string_len(key) > AUTH_SECRET_MAX)
            return toml_errorf(err, errlen, path, toml_pos_of(key),
                               "users.%s.key: a key has %d to %d bytes", name, USERS_KEY_MIN,
                               AUTH_SECRET_MAX);
        return auth_secret_set(&e->key, toml_string(key), toml_string_len(key));
    }
    /* A relative key file lives beside the users file. */
    char kpath[PATH_MAX];
    const char *kf = toml_string(key_file);
    const char *slash = strrchr(path, '/');
    int n;
    if (kf[0] == '/' || !slash)
        n = snprintf(kpath, sizeof(kpath), "%s", kf);
    else
        n = snprintf(kpath, sizeof(kpath), "%.*s/%s", (int)(slash - path), path, kf);
    if (n < 0 || (size_t)n >= sizeof(kpath))
        return toml_errorf(err, errlen, path, toml_pos_of(key_file), "users.%s.key_file: path too long",
                           name);
    char why[PATH_MAX + 200];
    int rc = users__check_mode(kpath, "key file", why, sizeof(why));
    if (rc == 0)
        rc = auth_secret_load(&e->key, kpath, why, sizeof(why));
    if (rc == 0 && e->key.len < USERS_KEY_MIN) {
        snprintf(why, sizeof(why), "key file %s: a key has at least %d bytes", kpath, USERS_KEY_MIN);
        rc = -EINVAL;
    }
    if (rc < 0) {
        toml_errorf(err, errlen, path, toml_pos_of(key_file), "users.%s: %s", name, why);
        return rc;
    }
    return 0;
}

users *users_load(const char *path, char *err, size_t errlen)
{
    if (users__check_mode(path, "users file", err, errlen) < 0)
        return NULL;
    toml_value *root = toml_parse_file(path, err, errlen);
    if (!root)
        return NULL;
    users *u = calloc(1, sizeof(*u));
    if (!u) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < toml_table_len(root); i++)
        if (strcmp(toml_table_key(root, i), "users") != 0) {
            toml_errorf(err, errlen, path, toml_table_key_pos(root, i),
                        "unknown key \"%s\" (users go in [users.NAME] tables)",
                        toml_table_key(root, i));
            goto fail;
        }
    const toml_value *tab = toml_table_get(root, "users");
    if (!tab || toml_type_of(tab) != TOML_TABLE || toml_table_len(tab) == 0) {
        snprintf(err, errlen, "%s: no users (expected [users.NAME] tables with key or key_file)",
                 path);
        goto fail;
    }
    u->v = calloc(toml_table_len(tab), sizeof(*u->v));
    if (!u->v) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    u->cap = toml_table_len(tab);
    for (size_t i = 0; i < toml_table_len(tab); i++) {
        const char *name = toml_table_key(tab, i);
        const toml_value *t = toml_table_value(tab, i);
        if (!users__name_ok(name, toml_table_key_len(tab, i))) {
            toml_errorf(err, errlen, path, toml_table_key_pos(tab, i),
                        "user name \"%.*s\": 1 to %d letters, digits, '.', '_' or '-'",
                        (int)(toml_table_key_len(tab, i) > 80 ? 80 : toml_table_key_len(tab, i)),
                        name, USERS_NAME_MAX - 1);
            goto fail;
        }
        if (toml_type_of(t) != TOML_TABLE) {
            toml_errorf(err, errlen, path, toml_pos_of(t), "users.%s: expected a table", name);
            goto fail;
        }
        if (users__entry(&u->v[u->n], path, name, t, err, errlen) < 0)
            goto fail;
        u->n++;
    }
    toml_free(root);
    return u;
fail:
    toml_free(root);
    users_free(u);
    return NULL;
}

void users_free(users *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->cap; i++)
        auth_secret_clear(&u->v[i].key);
    free(u->v);
    free(u);
}

const auth_secret *users_key(void *arg, const char *name)
{
    users *u = arg;
    for (size_t i = 0; i < u->n; i++)
        if (strcmp(u->v[i].name, name) == 0)
            return &u->v[i].key;
    return NULL;
}

size_t users_count(const users *u)
{
    return u->n;
}
