/* Mutual authentication against the cluster secret. Both ends send a Hello
 * with a fresh random nonce, then an AuthProof: HMAC-SHA256 keyed with the
 * secret over a label naming the sender's side (dialer or acceptor) and both
 * nonces in a fixed order. A proof cannot be replayed (fresh nonces) nor
 * reflected back (the side label). */
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

/* Fills out with random bytes (libsodium). */
void auth_nonce(uint8_t out[AUTH_NONCE_LEN]);

/* Computes the proof that the dialer (from_dialer) or the acceptor sends. */
void auth_proof(uint8_t mac[AUTH_MAC_LEN], const auth_secret *s, bool from_dialer,
                const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                const uint8_t acceptor_nonce[AUTH_NONCE_LEN]);

/* Constant-time check of a peer's proof; len is what the peer sent. */
bool auth_verify(const uint8_t *mac, size_t len, const auth_secret *s, bool from_dialer,
                 const uint8_t dialer_nonce[AUTH_NONCE_LEN],
                 const uint8_t acceptor_nonce[AUTH_NONCE_LEN]);

/* Wipes the key from memory. */
void auth_secret_clear(auth_secret *s);
