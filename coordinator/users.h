/* The coordinator's users: names and keys read from a users file, so that a
 * client can authenticate with its own key instead of the cluster secret and
 * see only its own jobs (docs/security.md). */
#pragma once

#include <stddef.h>

#include "auth.h"

#define USERS_NAME_MAX 64      /* bytes of a user name, with the NUL */
#define USERS_KEY_MIN 16       /* bytes of a user key, at least */

typedef struct users users;

/* Reads a users file (TOML, one table per user under [users]):
 *
 *   [users.alice]
 *   key_file = "alice.key"     # relative to the users file; mode 0600
 *   [users.bob]
 *   key = "4f1c...e9"          # or the key itself, as text
 *
 * The file and every key file must be readable by their owner only. A key
 * is the file's bytes without the trailing newline, as for the cluster
 * secret. Returns NULL with a message in err (never a key's bytes). */
users *users_load(const char *path, char *err, size_t errlen);

/* Wipes the keys and frees; NULL is fine. */
void users_free(users *u);

/* The key of user name, or NULL when there is no such user; a
 * conn_user_key_fn with u as its argument. */
const auth_secret *users_key(void *u, const char *name);

/* How many users the file names. */
size_t users_count(const users *u);
