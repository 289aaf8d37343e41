/* Mutual authentication against the cluster secret, or against a user's key
 * (a client of a coordinator with a users file). Both ends send a Hello with
 * a fresh random nonce, then an AuthProof: HMAC-SHA256 keyed with the secret
 * over a label naming the sender's side (dialer or acceptor), both nonces in
 * a fixed order and the user name when there is one. A proof cannot be
 * replayed (fresh nonces) nor reflected back (the side label), nor moved to
 * another user name. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
#define AUTH_SECRET_MAX 4096

typedef struct auth_secret {
    uint8_t key[AUTH_SECRET_MAX]; /* the secret file's bytes, trailing newline removed */
    size_t len;                   /* 0: no secret loaded */
} auth_secret;

/* Loads a secret from path. Refuses an empty or oversized file. Returns 0 or
 * a negative errno code with a message in err. */
int auth_secret_load(auth_secret *s, const char *path, char *err, size_t errlen);

/* Sets a key from len bytes (1 to AUTH_SECRET_MAX). Returns 0 or -EINVAL. */
int auth_secret_set(auth_secret *s, const void *key, size_t len);

/* A random key nobody knows: proofs against it always fail. */
void auth_secret_random(auth_secret *s);

/* Fills out with random bytes (libsodium). */
void auth_nonce(uint8_t out[AUTH_NONCE_LEN]);

/* Computes the proof that the dialer (from_dialer) or the acceptor sends;
 * user is the user name the dialer gave ("" or NULL: the cluster secret). */
void auth_proof(uint8_t mac[AUTH_MAC_LEN], const auth_secret *s, bool from_dialer,
                const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                const uint8_t acceptor_nonce[AUTH_NONCE_LEN], const char *user);

/* Constant-time check of a peer's proof; len is what the peer sent. */
bool auth_verify(const uint8_t *mac, size_t len, const auth_secret *s, bool from_dialer,
                 const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                 const uint8_t acceptor_nonce[AUTH_NONCE_LEN], const char *user);

/* Wipes the key from memory. */
void auth_secret_clear(auth_secret *s);
